package asm

import (
	"crypto/subtle"
	"encoding/binary"
	"sync"
)

// XTSFunc encrypts or decrypts len(src)/sectorSize consecutive sectors with
// AES-XTS (IEEE 1619) under the data key k and the tweak key tk, which have
// the same size. Sector i of the batch has the initial tweak
// AES_tk(le64((firstSector + i*sectorSize/512) & mask) || 0^8); mask is
// ^0 for dm-crypt's plain64 IVs and 2^32-1 for plain. sectorSize is a
// multiple of 512 (LUKS sectors are 512 to 4096 bytes); len(src) is a
// multiple of it; dst and src have equal length and overlap entirely or not
// at all. Callers (package header/cipher) check these conditions.
type XTSFunc func(k, tk *Schedule, dst, src []byte, firstSector, mask uint64, sectorSize int)

// XTSImpl is one implementation of the XTS kernels.
type XTSImpl struct {
	Name    string
	Encrypt XTSFunc
	Decrypt XTSFunc
}

// GenericXTS is the pure-Go implementation on crypto/aes.
var GenericXTS = XTSImpl{Name: "generic", Encrypt: xtsEncryptGeneric, Decrypt: xtsDecryptGeneric}

// XTSImplementations returns every XTS implementation this CPU can run,
// best first.
func XTSImplementations() []XTSImpl {
	return append(append([]XTSImpl(nil), xtsArchImpls()...), GenericXTS)
}

// BestXTS returns the fastest XTS implementation this CPU can run.
func BestXTS() XTSImpl { return XTSImplementations()[0] }

func xtsEncryptGeneric(k, tk *Schedule, dst, src []byte, first, mask uint64, ss int) {
	xtsGeneric(k, tk, dst, src, first, mask, ss, false)
}

func xtsDecryptGeneric(k, tk *Schedule, dst, src []byte, first, mask uint64, ss int) {
	xtsGeneric(k, tk, dst, src, first, mask, ss, true)
}

// xtsPool holds the generic code's tweak and block buffers: they escape
// into crypto/aes's interface calls, and pooling them keeps calls free of
// allocations.
var xtsPool = sync.Pool{New: func() any { return new([2][BlockSize]byte) }}

func xtsGeneric(k, tk *Schedule, dst, src []byte, first, mask uint64, ss int, dec bool) {
	buf := xtsPool.Get().(*[2][BlockSize]byte)
	defer xtsPool.Put(buf)
	t, x := &buf[0], &buf[1]
	step := uint64(ss / 512)
	for off := 0; off+ss <= len(src); off += ss {
		binary.LittleEndian.PutUint64(t[:8], first&mask)
		clear(t[8:])
		tk.block.Encrypt(t[:], t[:])
		for b := off; b < off+ss; b += BlockSize {
			subtle.XORBytes(x[:], src[b:b+BlockSize], t[:])
			if dec {
				k.block.Decrypt(x[:], x[:])
			} else {
				k.block.Encrypt(x[:], x[:])
			}
			subtle.XORBytes(dst[b:b+BlockSize], x[:], t[:])
			mulAlpha(t)
		}
		first += step
	}
	clear(t[:])
	clear(x[:])
}

// mulAlpha multiplies a tweak by x in GF(2^128) modulo x^128+x^7+x^2+x+1,
// the tweak being a little-endian 128-bit integer (IEEE 1619 §5.2).
func mulAlpha(t *[BlockSize]byte) {
	lo := binary.LittleEndian.Uint64(t[:8])
	hi := binary.LittleEndian.Uint64(t[8:])
	carry := hi >> 63
	hi = hi<<1 | lo>>63
	lo = lo<<1 ^ 0x87*carry
	binary.LittleEndian.PutUint64(t[:8], lo)
	binary.LittleEndian.PutUint64(t[8:], hi)
}
