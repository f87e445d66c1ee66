// Package derive derives LUKS volume keys from a master secret and an
// image's UUID, so that a key server holding the master can recompute the
// volume key of any image it made from the image's header alone, and a
// pipeline can give every copy of a golden image a key of its own.
//
// The construction is HKDF-SHA512 (RFC 5869):
//
//	PRK = HMAC-SHA512(salt = "cryptimg derived volume keys v1", IKM = master)
//	vk  = HKDF-Expand(PRK, info, n)
//	info = "cryptimg volume key v1" || 0x00 || uuid || 0x00 || be16(n)
//
// uuid is the header's UUID in its canonical lower-case 36-character form
// and n the volume key size in bytes, so images with different UUIDs, and
// keys of different sizes, never share a key. It assumes that UUIDs are
// unique among the images of one master (cryptimg makes random version 4
// UUIDs; an explicit --uuid must not be reused) and that the master is
// never stored in an image. HKDF is one-way: a derived key and the UUID do
// not give the master back (unlike fscrypt v1's AES-ECB derivation, which
// is reversible and not offered).
//
// The expansion calls SHA-512's compression directly, as fscrypt's key
// derivation calls its primitives: the PRK's HMAC pad states are computed
// once per master, so a key of up to 64 bytes costs two compressions, not
// the eight and the allocations of a generic crypto/hkdf.Key call.
package derive

import (
	"crypto/sha512"
	"encoding"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/cryptimg/cryptimg/asm/secmem"
)

// Salt and Label are the construction's fixed strings (the package doc).
const (
	Salt  = "cryptimg derived volume keys v1"
	Label = "cryptimg volume key v1"
)

// MinMasterBytes is the shortest master accepted: 256 bits.
const MinMasterBytes = 32

// MaxKeyBytes bounds a derived key: the largest LUKS2 keyslot key_size,
// as header.MaxKeyBytes (HKDF-SHA512 itself allows 255 blocks).
const MaxKeyBytes = 512

// ErrShortMaster refuses a master shorter than MinMasterBytes.
var ErrShortMaster = fmt.Errorf("master key shorter than %d bytes", MinMasterBytes)

// Master is a master secret ready to derive keys: the HMAC-SHA512 states
// of its PRK. It is safe for concurrent use.
type Master struct {
	inner, outer []byte // marshaled SHA-512 states after the ipad and opad blocks
	pool         sync.Pool
}

type hashes struct {
	in, out   hash.Hash
	inU, outU encoding.BinaryUnmarshaler
	buf       []byte
	ctr       [1]byte
	t         [sha512.Size]byte // T(i), in the pooled struct so it does not escape per call
}

// New extracts the PRK from master (copied, not retained).
func New(master []byte) (*Master, error) {
	if len(master) < MinMasterBytes {
		return nil, ErrShortMaster
	}
	prk := hmacSHA512([]byte(Salt), master)
	defer clear(prk)
	m := &Master{}
	var ipad, opad [sha512.BlockSize]byte
	copy(ipad[:], prk) // 64 bytes, shorter than the block: used as is
	copy(opad[:], prk)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	var err error
	if m.inner, err = state(ipad[:]); err != nil {
		return nil, err
	}
	if m.outer, err = state(opad[:]); err != nil {
		secmem.Free(m.inner)
		return nil, err
	}
	clear(ipad[:])
	clear(opad[:])
	return m, nil
}

// state is the marshaled SHA-512 state after one block, in package
// secmem's memory (locked, out of core dumps).
func state(block []byte) ([]byte, error) {
	h := sha512.New()
	h.Write(block)
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, err
	}
	defer clear(st)
	return secmem.Clone(st), nil
}

// hmacSHA512 is HMAC-SHA512 for the one-off extract.
func hmacSHA512(key, msg []byte) []byte {
	var ipad, opad [sha512.BlockSize]byte
	copy(ipad[:], key) // the salt is shorter than a block
	copy(opad[:], key)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	in := sha512.New()
	in.Write(ipad[:])
	in.Write(msg)
	sum := in.Sum(nil)
	out := sha512.New()
	out.Write(opad[:])
	out.Write(sum)
	clear(sum)
	clear(ipad[:])
	clear(opad[:])
	return out.Sum(nil)
}

// Info is the HKDF info of the volume key of n bytes for uuid, appended to
// dst.
func Info(dst []byte, uuid string, n int) []byte {
	dst = append(dst, Label...)
	dst = append(dst, 0)
	dst = append(dst, uuid...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint16(dst, uint16(n))
}

// VolumeKey derives the n-byte volume key of the image with uuid (its
// canonical form, as header.CanonicalUUID gives it) into a new slice.
func (m *Master) VolumeKey(uuid string, n int) ([]byte, error) {
	out := make([]byte, n)
	if err := m.DeriveInto(out, uuid); err != nil {
		return nil, err
	}
	return out, nil
}

// ErrKeySize refuses a key size of 0 or over MaxKeyBytes.
var ErrKeySize = errors.New("derived key size out of range")

// DeriveInto fills out with the volume key of len(out) bytes for uuid. It
// makes no allocations once warm.
func (m *Master) DeriveInto(out []byte, uuid string) error {
	if len(out) == 0 || len(out) > MaxKeyBytes {
		return ErrKeySize
	}
	if m.inner == nil {
		return errors.New("derive: the master was cleared")
	}
	h, _ := m.pool.Get().(*hashes)
	if h == nil {
		h = &hashes{in: sha512.New(), out: sha512.New(), buf: make([]byte, 0, 256)}
		h.inU, h.outU = h.in.(encoding.BinaryUnmarshaler), h.out.(encoding.BinaryUnmarshaler)
	}
	defer func() {
		// Nothing of the key stays in the pool.
		h.in.Reset()
		h.out.Reset()
		m.pool.Put(h)
	}()
	info := Info(h.buf[:0], uuid, len(out))
	// HKDF-Expand: T(i) = HMAC(PRK, T(i-1) || info || i).
	t := &h.t
	var prev []byte
	for i, off := 1, 0; off < len(out); i++ {
		if err := h.inU.UnmarshalBinary(m.inner); err != nil {
			return err
		}
		h.in.Write(prev)
		h.in.Write(info)
		h.ctr[0] = byte(i)
		h.in.Write(h.ctr[:])
		sum := h.in.Sum(t[:0])
		if err := h.outU.UnmarshalBinary(m.outer); err != nil {
			return err
		}
		h.out.Write(sum)
		prev = h.out.Sum(t[:0])
		off += copy(out[off:], prev)
	}
	clear(t[:])
	h.buf = info[:0]
	return nil
}

// Clear wipes the PRK states and returns their memory; the Master is
// unusable afterwards.
func (m *Master) Clear() {
	secmem.Free(m.inner)
	secmem.Free(m.outer)
	m.inner, m.outer = nil, nil
	m.pool = sync.Pool{}
}
