package asm

import (
	"crypto/subtle"
	"encoding/binary"
	"sync"
)

// ivPool holds 16-byte scratch blocks. The IV is passed to cipher.Block
// through an interface, so a stack array would escape; pooling keeps the
// generic path free of per-call allocations.
var ivPool = sync.Pool{New: func() any { return new([BlockSize]byte) }}

// essivIV writes AES_ivk(le64(sector) || 0^8) to iv.
func essivIV(ivk *Schedule, iv *[BlockSize]byte, sector uint64) {
	binary.LittleEndian.PutUint64(iv[:8], sector)
	clear(iv[8:])
	ivk.block.Encrypt(iv[:], iv[:])
}

func encryptGeneric(k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int) {
	iv := ivPool.Get().(*[BlockSize]byte)
	defer ivPool.Put(iv)
	step := uint64(sectorSize / 512)
	sector := firstSector
	for off := 0; off < len(src); off += sectorSize {
		essivIV(ivk, iv, sector)
		prev := iv[:]
		for b := off; b < off+sectorSize; b += BlockSize {
			d := dst[b : b+BlockSize]
			subtle.XORBytes(d, src[b:b+BlockSize], prev)
			k.block.Encrypt(d, d)
			prev = d
		}
		sector += step
	}
	clear(iv[:])
}

func decryptGeneric(k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int) {
	iv := ivPool.Get().(*[BlockSize]byte)
	defer ivPool.Put(iv)
	step := uint64(sectorSize / 512)
	sector := firstSector
	inPlace := len(src) > 0 && &dst[0] == &src[0]
	for off := 0; off < len(src); off += sectorSize {
		essivIV(ivk, iv, sector)
		s, d := src[off:off+sectorSize], dst[off:off+sectorSize]
		if !inPlace {
			// Decrypt every block, then undo the chaining with one XOR
			// over the sector: fewer calls than a block-by-block loop.
			for b := 0; b < sectorSize; b += BlockSize {
				k.block.Decrypt(d[b:b+BlockSize], s[b:b+BlockSize])
			}
			subtle.XORBytes(d[BlockSize:], d[BlockSize:], s[:sectorSize-BlockSize])
			subtle.XORBytes(d[:BlockSize], d[:BlockSize], iv[:])
		} else {
			// In place, walk the blocks backwards so each ciphertext block
			// is still intact when the next block needs it for chaining.
			for b := sectorSize - BlockSize; b > 0; b -= BlockSize {
				k.block.Decrypt(d[b:b+BlockSize], d[b:b+BlockSize])
				subtle.XORBytes(d[b:b+BlockSize], d[b:b+BlockSize], d[b-BlockSize:b])
			}
			k.block.Decrypt(d[:BlockSize], d[:BlockSize])
			subtle.XORBytes(d[:BlockSize], d[:BlockSize], iv[:])
		}
		sector += step
	}
	clear(iv[:])
}
