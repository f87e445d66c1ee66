package header

import (
	"crypto/pbkdf2"
	"fmt"
	"hash"
	"strings"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// hashFunc returns the constructor for a LUKS hash-spec. Names are matched
// case-insensitively: cryptsetup loads upper-case names too, it only
// lower-cases them when it formats.
func hashFunc(name string) (func() hash.Hash, error) {
	for _, h := range hashes {
		if strings.EqualFold(name, h.name) {
			return h.new, nil
		}
	}
	return nil, &UnsupportedHashError{Hash: name}
}

// deriveKey runs PBKDF2-HMAC with the named hash. iterations must be at least
// 1; the callers check it, since a zero count would silently mean one.
func deriveKey(hashName string, password, salt []byte, iterations uint32, keyLen int) ([]byte, error) {
	h, err := hashFunc(hashName)
	if err != nil {
		return nil, err
	}
	if iterations == 0 {
		return nil, fmt.Errorf("pbkdf2: zero iterations")
	}
	// crypto/pbkdf2 takes the password as a string. The conversion copies
	// it; the copy is not retained and is left to the garbage collector.
	return pbkdf2.Key(h, string(password), salt, int(iterations), keyLen)
}

// cipherMode finds the registered mode of a header's cipher fields.
func cipherMode(name, mode string) (*cipher.Mode, error) {
	m, err := cipher.Lookup(name, mode)
	if err != nil {
		return nil, &UnsupportedCipherError{Spec: name + "-" + mode}
	}
	return m, nil
}

// checkCipherKey checks the cipher and that keyBytes is a key size it takes.
// A header that names a supported cipher with another key size is corrupt.
func checkCipherKey(name, mode string, keyBytes uint32) (*cipher.Mode, error) {
	m, err := cipherMode(name, mode)
	if err != nil {
		return nil, err
	}
	if !m.ValidKey(int(keyBytes)) {
		return nil, parseErrorf("key-bytes", "%d-bit key is invalid for %s (want %s)", keyBytes*8, m.Spec(), m.KeyBits())
	}
	return m, nil
}

// cryptMaterial encrypts (or decrypts) key material in place with the
// key-slot cipher spec under dk, in 512-byte sectors with IV sector 0 at the
// material's start, as both LUKS versions do (cryptsetup keyencryption.c,
// luks2_keyslot_luks2.c). It clears dk.
func cryptMaterial(spec string, dk, material []byte, encrypt bool) error {
	defer clear(dk)
	m, err := cipher.Parse(spec)
	if err != nil {
		return &UnsupportedCipherError{Spec: spec}
	}
	c, err := m.NewSector(dk, cipher.LUKS1)
	if err != nil {
		return err
	}
	defer c.Clear()
	if encrypt {
		return c.EncryptSectors(material, material, 0)
	}
	return c.DecryptSectors(material, material, 0)
}
