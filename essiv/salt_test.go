package essiv

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cryptimg/cryptimg/asm"
)

// referenceSalted is ESSIV-CBC with an explicit IV key, from crypto/cipher
// alone.
func referenceSalted(key, salt, src []byte, first uint64, sectorSize int) []byte {
	b, _ := aes.NewCipher(key)
	ivc, _ := aes.NewCipher(salt)
	out := make([]byte, len(src))
	for i := 0; i*sectorSize < len(src); i++ {
		var iv [16]byte
		binary.LittleEndian.PutUint64(iv[:], first+uint64(i*sectorSize/512))
		ivc.Encrypt(iv[:], iv[:])
		cipher.NewCBCEncrypter(b, iv[:]).CryptBlocks(out[i*sectorSize:], src[i*sectorSize:(i+1)*sectorSize])
	}
	return out
}

func TestNewCipherWithSalt(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl asm.Impl) {
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			salt := make([]byte, 32)
			rand.Read(key)
			rand.Read(salt)
			c, err := NewCipherWithSaltImpl(key, salt, impl)
			if err != nil {
				t.Fatal(err)
			}
			if c.Implementation() != impl.Name {
				t.Fatalf("implementation %s, want %s", c.Implementation(), impl.Name)
			}
			for _, ss := range []int{512, 4096} {
				src := make([]byte, 5*ss)
				rand.Read(src)
				first := uint64(1<<32 - 3)
				want := referenceSalted(key, salt, src, first, ss)
				got := make([]byte, len(src))
				c.EncryptSectors(got, src, first, ss)
				if !bytes.Equal(got, want) {
					t.Fatalf("AES-%d, %d-byte sectors: the salt is not the IV key", keyLen*8, ss)
				}
				c.DecryptSectors(got, got, first, ss)
				if !bytes.Equal(got, src) {
					t.Fatalf("AES-%d, %d-byte sectors: decrypt does not invert", keyLen*8, ss)
				}
			}
			// With salt = SHA-256(key) it is NewCipher's cipher.
			digest := sha256.Sum256(key)
			s, _ := NewCipherWithSaltImpl(key, digest[:], impl)
			p, _ := newCipher(key, impl)
			src := make([]byte, 1024)
			rand.Read(src)
			a, b := make([]byte, len(src)), make([]byte, len(src))
			s.EncryptSectors(a, src, 9, 512)
			p.EncryptSectors(b, src, 9, 512)
			if !bytes.Equal(a, b) {
				t.Fatalf("AES-%d: salt SHA-256(key) differs from NewCipher", keyLen*8)
			}
		}
	})
}

func TestNewCipherWithSaltErrors(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		var se SaltSizeError
		if _, err := NewCipherWithSalt(make([]byte, 32), make([]byte, n)); !errors.As(err, &se) || int(se) != n {
			t.Errorf("%d-byte salt: %v, want SaltSizeError(%d)", n, err, n)
		}
	}
	for _, n := range []int{0, 8, 64} {
		var ke KeySizeError
		if _, err := NewCipherWithSalt(make([]byte, n), make([]byte, 32)); !errors.As(err, &ke) || int(ke) != n {
			t.Errorf("%d-byte key: %v, want KeySizeError(%d)", n, err, n)
		}
	}
}

// TestEncryptIVs: the blocks EncryptIVs makes are AES-256_salt of its input,
// and for le64(n) || 0^8 they are the IV the sector transform uses: CBC
// decryption of a sector's first block under the bulk key, XORed with the
// plaintext, gives the IV back.
func TestEncryptIVs(t *testing.T) {
	key := make([]byte, 16)
	salt := make([]byte, 32)
	rand.Read(key)
	rand.Read(salt)
	c, err := NewCipherWithSalt(key, salt)
	if err != nil {
		t.Fatal(err)
	}
	ivc, _ := aes.NewCipher(salt)
	bulk, _ := aes.NewCipher(key)
	const n = 9
	in := make([]byte, n*16)
	rand.Read(in[:16]) // one block that is not sector-shaped
	for i := 1; i < n; i++ {
		binary.LittleEndian.PutUint64(in[16*i:], uint64(i)<<40+uint64(i))
	}
	ivs := bytes.Clone(in)
	c.EncryptIVs(ivs)
	for i := range n {
		want := make([]byte, 16)
		ivc.Encrypt(want, in[16*i:16*i+16])
		if !bytes.Equal(ivs[16*i:16*i+16], want) {
			t.Fatalf("block %d: %x, want %x", i, ivs[16*i:16*i+16], want)
		}
		if i == 0 {
			continue
		}
		sector := binary.LittleEndian.Uint64(in[16*i:])
		pt := make([]byte, 512)
		rand.Read(pt)
		ct := make([]byte, 512)
		c.Encrypt(ct, pt, sector)
		iv := make([]byte, 16)
		bulk.Decrypt(iv, ct[:16])
		for j := range iv {
			iv[j] ^= pt[j]
		}
		if !bytes.Equal(iv, want) {
			t.Fatalf("sector %#x: Encrypt used IV %x, EncryptIVs gives %x", sector, iv, want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("EncryptIVs of 15 bytes did not panic")
		}
	}()
	c.EncryptIVs(make([]byte, 15))
}
