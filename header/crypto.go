package header

import (
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"strings"

	"github.com/cryptimg/cryptimg/essiv"
)

const (
	supportedCipherName = "aes"
	supportedCipherMode = "cbc-essiv:sha256"
	supportedCipherSpec = supportedCipherName + "-" + supportedCipherMode
)

// hashFunc returns the constructor for a LUKS hash-spec. Names are matched
// case-insensitively: cryptsetup loads upper-case names too, it only
// lower-cases them when it formats.
func hashFunc(name string) (func() hash.Hash, error) {
	switch strings.ToLower(name) {
	case "sha1":
		return sha1.New, nil
	case "sha256":
		return sha256.New, nil
	case "sha512":
		return sha512.New, nil
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

// ParseCipherSpec splits a cryptsetup cipher specification such as
// "aes-cbc-essiv:sha256" into the LUKS1 cipher-name and cipher-mode fields.
// Only aes-cbc-essiv:sha256 is supported; anything else gives an
// *UnsupportedCipherError.
func ParseCipherSpec(spec string) (cipherName, cipherMode string, err error) {
	if spec != supportedCipherSpec {
		return "", "", &UnsupportedCipherError{Spec: spec}
	}
	return supportedCipherName, supportedCipherMode, nil
}

func checkCipher(name, mode string) error {
	if name != supportedCipherName || mode != supportedCipherMode {
		return &UnsupportedCipherError{Spec: name + "-" + mode}
	}
	return nil
}

// checkCipherKey checks the cipher and that keyBytes is a key size it takes
// (AES: 16, 24 or 32 bytes). A header that names the supported cipher with
// another key size is corrupt.
func checkCipherKey(name, mode string, keyBytes uint32) error {
	if err := checkCipher(name, mode); err != nil {
		return err
	}
	switch keyBytes {
	case 16, 24, 32:
		return nil
	}
	return parseErrorf("key-bytes", "%d-byte key is invalid for %s (want 16, 24 or 32)", keyBytes, supportedCipherSpec)
}

// newCipher returns the sector cipher for a key of the header's cipher.
func newCipher(name, mode string, key []byte) (*essiv.Cipher, error) {
	if err := checkCipher(name, mode); err != nil {
		return nil, err
	}
	return essiv.NewCipher(key)
}
