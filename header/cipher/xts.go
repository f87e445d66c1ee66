package cipher

import (
	"crypto/aes"

	"golang.org/x/crypto/xts"
)

// aes-xts-plain64 and aes-xts-plain: XTS-AES (IEEE 1619) with the tweak
// le64(sector) (plain64) or le32(sector mod 2^32) (plain), padded with zeros
// to 16 bytes, as dm-crypt's plain64 and plain IV generators make it. The
// volume key is the data key followed by the tweak key, so a 512-bit key is
// AES-256-XTS. cryptsetup 2.6.1's LUKS1 default is aes-xts-plain64 with 512
// bits (measured: luksFormat --type luks1 without --key-size).
func init() {
	for _, m := range []struct {
		mode string
		mask uint64
	}{{"xts-plain64", ^uint64(0)}, {"xts-plain", 1<<32 - 1}} {
		mask := m.mask
		register(&Mode{Name: "aes", Mode: m.mode, KeyBytes: []int{32, 48, 64}, DefaultKeyBytes: 64,
			New: func(key []byte) (Sector, error) {
				c, err := xts.NewCipher(aes.NewCipher, key)
				if err != nil {
					return nil, err
				}
				return &xtsCipher{c: c, mask: mask}, nil
			}})
	}
}

type xtsCipher struct {
	c    *xts.Cipher
	mask uint64 // sector bits the IV keeps
}

func (x *xtsCipher) EncryptSectors(dst, src []byte, first uint64, sectorSize int) {
	check("cipher: xts", dst, src, sectorSize)
	step := uint64(sectorSize / 512)
	for off := 0; off < len(src); off += sectorSize {
		x.c.Encrypt(dst[off:off+sectorSize], src[off:off+sectorSize], first&x.mask)
		first += step
	}
}

func (x *xtsCipher) DecryptSectors(dst, src []byte, first uint64, sectorSize int) {
	check("cipher: xts", dst, src, sectorSize)
	step := uint64(sectorSize / 512)
	for off := 0; off < len(src); off += sectorSize {
		x.c.Decrypt(dst[off:off+sectorSize], src[off:off+sectorSize], first&x.mask)
		first += step
	}
}

// Clear drops the key schedules. crypto/aes offers no way to wipe them; they
// are left to the garbage collector.
func (x *xtsCipher) Clear() { x.c = nil }
