// Package essiv implements the aes-cbc-essiv:sha256 sector transform of
// dm-crypt, LUKS1 and LUKS2, the Linux kernel's essiv(cbc(aes),sha256).
// Package header/cipher registers it as that cipher specification; the
// other modes live there.
//
// Each sector is encrypted with AES-CBC under the volume key. Its IV is
// AES-256_{SHA-256(key)}(le64(sector) || 0^8): the IV cipher is always
// AES-256, keyed with the 32-byte SHA-256 digest of the volume key, whatever
// the size of the volume key itself. Sector numbers count 512-byte units, as
// dm-crypt does, also when a sector is larger than 512 bytes.
//
// ESSIV-CBC provides confidentiality only. It has no authentication: a
// modified ciphertext sector decrypts to garbage without any error, and an
// attacker who sees several versions of an image learns which sectors, and
// which 16-byte blocks from the first change onwards, have changed. It is
// meant for disk images, where ciphertext size must equal plaintext size.
//
// dm-crypt's authenticated ESSIV mode (LUKS2 with --integrity) keys the IV
// cipher with the SHA-256 of the whole authenc key instead; NewCipherWithSalt
// takes that salt.
//
// References: Linux crypto/essiv.c; dm-crypt's "essiv" IV generator; the
// LUKS1 on-disk format specification (cipher mode "cbc-essiv:sha256").
package essiv

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"strconv"

	"github.com/cryptimg/cryptimg/asm"
)

// BlockSize is the AES block size. Sector lengths are multiples of it.
const BlockSize = 16

// KeySizeError reports a volume key that is not 16, 24 or 32 bytes long.
type KeySizeError int

func (k KeySizeError) Error() string {
	return "essiv: invalid key size " + strconv.Itoa(int(k)) + " (want 16, 24 or 32 bytes)"
}

// Cipher is an ESSIV-CBC sector cipher. It holds only expanded keys and no
// mutable state, so it is safe for concurrent use.
type Cipher struct {
	key  *asm.Schedule // bulk CBC key
	salt *asm.Schedule // AES-256 IV key: SHA-256(volume key) or a given salt
	// ivb is the same IV cipher as a crypto/aes block, for EncryptIVs:
	// package asm has no single-block entry point.
	ivb  cipher.Block
	impl asm.Impl
}

// NewCipher returns a Cipher for a 16-, 24- or 32-byte AES volume key. The
// key slice is not retained.
func NewCipher(key []byte) (*Cipher, error) {
	return newCipher(key, asm.Best())
}

// NewCipherWithSalt returns a Cipher for a 16-, 24- or 32-byte AES key
// whose IV cipher is keyed with a given 32-byte salt instead of
// SHA-256(key). It is the ESSIV of dm-crypt's authenticated mode
// essiv(authenc(hmac(sha256),cbc(aes)),sha256), where the salt is the
// SHA-256 of the whole authenc key, the encryption key followed by the MAC
// key (Linux crypto/essiv.c, essiv_aead_setkey). Neither slice is retained.
func NewCipherWithSalt(key, salt []byte) (*Cipher, error) {
	return NewCipherWithSaltImpl(key, salt, asm.Best())
}

// NewCipherWithSaltImpl is NewCipherWithSalt with a kernel chosen from
// asm.Implementations() rather than the best one, so that the tests of
// other packages can run every kernel.
func NewCipherWithSaltImpl(key, salt []byte, impl asm.Impl) (*Cipher, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, KeySizeError(len(key))
	}
	if len(salt) != sha256.Size {
		return nil, SaltSizeError(len(salt))
	}
	k, err := asm.NewSchedule(key)
	if err != nil {
		return nil, err
	}
	s, err := asm.NewSchedule(salt)
	if err != nil {
		k.Clear()
		return nil, err
	}
	ivb, err := aes.NewCipher(salt)
	if err != nil {
		k.Clear()
		s.Clear()
		return nil, err
	}
	return &Cipher{key: k, salt: s, ivb: ivb, impl: impl}, nil
}

// SaltSizeError reports an IV salt that is not 32 bytes long.
type SaltSizeError int

func (k SaltSizeError) Error() string {
	return "essiv: invalid salt size " + strconv.Itoa(int(k)) + " (want 32 bytes)"
}

func newCipher(key []byte, impl asm.Impl) (*Cipher, error) {
	digest := sha256.Sum256(key)
	defer clear(digest[:])
	return NewCipherWithSaltImpl(key, digest[:], impl)
}

// EncryptIVs encrypts len(ivs)/16 blocks in place with the IV cipher. The
// block le64(n) || 0^8 becomes the IV of sector n, the IV that Encrypt and
// the Sectors methods use; an authenticated mode needs it because it is
// part of what the tag covers. Other blocks are encrypted all the same
// (Linux crypto/essiv.c encrypts whatever 16-byte IV it is given).
// len(ivs) must be a multiple of 16. ivs is handed to crypto/aes through an
// interface, so a buffer that is reused avoids an allocation per call.
func (c *Cipher) EncryptIVs(ivs []byte) {
	if len(ivs)%BlockSize != 0 {
		panic("essiv: input not full blocks")
	}
	for off := 0; off < len(ivs); off += BlockSize {
		b := ivs[off : off+BlockSize]
		c.ivb.Encrypt(b, b)
	}
}

// Implementation names the kernel this Cipher uses, for example "generic".
func (c *Cipher) Implementation() string { return c.impl.Name }

// Clear wipes the expanded keys. The Cipher must not be used afterwards.
// The crypto/aes copy of the IV key cannot be wiped; it is dropped.
func (c *Cipher) Clear() {
	c.key.Clear()
	c.salt.Clear()
	c.ivb = nil
}

// Encrypt encrypts one sector. The sector is len(plaintext) bytes, a
// non-zero multiple of 16; sectorNum counts 512-byte units. ciphertext
// must be at least as long as plaintext, and the two must overlap entirely
// or not at all.
func (c *Cipher) Encrypt(ciphertext, plaintext []byte, sectorNum uint64) {
	checkOne(ciphertext, plaintext)
	c.impl.Encrypt(c.key, c.salt, ciphertext[:len(plaintext)], plaintext, sectorNum, len(plaintext))
}

// Decrypt decrypts one sector. The rules of Encrypt apply.
func (c *Cipher) Decrypt(plaintext, ciphertext []byte, sectorNum uint64) {
	checkOne(plaintext, ciphertext)
	c.impl.Decrypt(c.key, c.salt, plaintext[:len(ciphertext)], ciphertext, sectorNum, len(ciphertext))
}

// EncryptSectors encrypts len(src)/sectorSize consecutive sectors. The
// first has sector number firstSector and each next one sectorSize/512
// more. sectorSize is 512 or a larger power of two up to 4096; len(src)
// must be a multiple of it. dst must be at least as long as src, and the
// two must overlap entirely or not at all. It makes no allocations.
func (c *Cipher) EncryptSectors(dst, src []byte, firstSector uint64, sectorSize int) {
	checkMany(dst, src, sectorSize)
	if len(src) == 0 {
		return
	}
	c.impl.Encrypt(c.key, c.salt, dst[:len(src)], src, firstSector, sectorSize)
}

// DecryptSectors decrypts len(src)/sectorSize consecutive sectors. The
// rules of EncryptSectors apply.
func (c *Cipher) DecryptSectors(dst, src []byte, firstSector uint64, sectorSize int) {
	checkMany(dst, src, sectorSize)
	if len(src) == 0 {
		return
	}
	c.impl.Decrypt(c.key, c.salt, dst[:len(src)], src, firstSector, sectorSize)
}

func checkOne(dst, src []byte) {
	if len(src) == 0 || len(src)%BlockSize != 0 {
		panic("essiv: input not full blocks")
	}
	checkBuffers(dst, src)
}

func checkMany(dst, src []byte, sectorSize int) {
	switch sectorSize {
	case 512, 1024, 2048, 4096:
	default:
		panic("essiv: invalid sector size " + strconv.Itoa(sectorSize))
	}
	if len(src)%sectorSize != 0 {
		panic("essiv: input not full sectors")
	}
	checkBuffers(dst, src)
}

func checkBuffers(dst, src []byte) {
	if len(dst) < len(src) {
		panic("essiv: output smaller than input")
	}
	if inexactOverlap(dst[:len(src)], src) {
		panic("essiv: invalid buffer overlap")
	}
}

// Kernel names the AES kernel NewCipher picks on this CPU, for example
// "vaes-avx2" or "generic".
func Kernel() string { return asm.Best().Name }
