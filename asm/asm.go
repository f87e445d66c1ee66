// Package asm holds the kernels beneath cryptimg's sector ciphers, each of
// which processes many consecutive sectors per call:
//
//   - [Schedule], an expanded AES key laid out for the kernels;
//   - [Impl], fused ESSIV-IV + AES-CBC kernels, for package essiv;
//   - [XTSImpl], AES-XTS kernels with dm-crypt's plain64 and plain IVs, for
//     package header/cipher;
//   - [SHA256Impl], multi-buffer SHA-256 and HMAC-SHA256, which computes the
//     sector tags of the LUKS2 hmac(sha256) integrity modes in
//     header/cipher.
//
// Assembly exists for amd64 (AES-NI, VAES, SHA-NI, AVX-512) and arm64 (the
// ARMv8 Crypto Extensions, for CBC and XTS). Each kind of kernel has a
// pure-Go implementation with the same contract, [Generic], [GenericXTS]
// and [GenericSHA256] (their code is in cbc_generic.go, xts.go and
// sha256_generic.go), which is the reference the tests compare the assembly
// against; the Implementations functions list what this CPU can run, best
// first. The purego build tag turns all assembly off. A Schedule keeps its
// round keys in memory from package secmem.
//
// It is an internal layer of cryptimg, not a stable API: its callers are
// packages essiv and header/cipher, which check the arguments the AES
// kernels assume.
package asm

import (
	"crypto/aes"
	"crypto/cipher"
	"strconv"

	"github.com/cryptimg/cryptimg/asm/secmem"
)

// BlockSize is the AES block size in bytes.
const BlockSize = 16

// Schedule is an expanded AES key: the cipher.Block used by the generic code
// and, where assembly is available, the round keys laid out for the kernels.
// A Schedule is read-only after NewSchedule and safe for concurrent use.
type Schedule struct {
	block  cipher.Block
	rounds int
	// enc and dec hold the encryption and (AESIMC-transformed) decryption
	// round keys, 16 bytes per round, rounds+1 entries used. They point
	// into mem, memory of package secmem (locked, out of core dumps).
	enc *[15 * BlockSize]byte
	dec *[15 * BlockSize]byte
	mem []byte
}

// KeySizeError reports an AES key of the wrong length.
type KeySizeError int

func (k KeySizeError) Error() string {
	return "asm: invalid AES key size " + strconv.Itoa(int(k))
}

// NewSchedule expands a 16-, 24- or 32-byte AES key.
func NewSchedule(key []byte) (*Schedule, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, KeySizeError(len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	mem := secmem.Alloc(2 * 15 * BlockSize)
	s := &Schedule{block: b, rounds: 6 + len(key)/4, mem: mem,
		enc: (*[15 * BlockSize]byte)(mem), dec: (*[15 * BlockSize]byte)(mem[15*BlockSize:])}
	expandKey(s, key)
	return s, nil
}

// Rounds returns the number of AES rounds: 10, 12 or 14.
func (s *Schedule) Rounds() int { return s.rounds }

// Clear overwrites the round keys and returns their memory. The Schedule
// must not be used afterwards. The crypto/aes copy of the key, which the
// generic code uses, cannot be wiped; it is dropped.
func (s *Schedule) Clear() {
	secmem.Free(s.mem)
	s.mem, s.enc, s.dec = nil, nil, nil
	s.block = nil
}

// SectorFunc encrypts or decrypts len(src)/sectorSize consecutive sectors
// with ESSIV IVs: sector i of the batch uses the IV
// AES_ivk(le64(firstSector + i*sectorSize/512) || 0^8) and is processed with
// AES-CBC under k. sectorSize is a multiple of 16; len(src) is a multiple of
// sectorSize; dst and src have equal length and overlap entirely or not at
// all. Callers (package essiv) check these conditions.
type SectorFunc func(k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int)

// Impl is one implementation of the ESSIV-CBC sector kernels.
type Impl struct {
	Name    string
	Encrypt SectorFunc
	Decrypt SectorFunc
}

// Generic is the pure-Go implementation on crypto/aes.
var Generic = Impl{Name: "generic", Encrypt: encryptGeneric, Decrypt: decryptGeneric}

// Implementations returns every implementation this CPU can run, best
// first. Tests run each of them; Best returns the first.
func Implementations() []Impl {
	return append(append([]Impl(nil), archImpls()...), Generic)
}

// Best returns the fastest implementation this CPU can run.
func Best() Impl { return Implementations()[0] }
