package cipher

import (
	"crypto/aes"
	gocipher "crypto/cipher"
	"encoding/binary"
)

// aes-cbc-plain64 and aes-cbc-plain: AES-CBC with the IV le64(sector)
// (plain64) or le32(sector mod 2^32) (plain), padded with zeros to 16 bytes,
// dm-crypt's plain64 and plain IV generators.
func init() {
	for _, m := range []struct {
		mode string
		mask uint64
	}{{"cbc-plain64", ^uint64(0)}, {"cbc-plain", 1<<32 - 1}} {
		mask := m.mask
		register(&Mode{Name: "aes", Mode: m.mode, KeyBytes: []int{16, 24, 32}, DefaultKeyBytes: 32,
			new: func(key []byte) (kernel, error) {
				b, err := aes.NewCipher(key)
				if err != nil {
					return nil, err
				}
				return &cbcPlain{b: b, mask: mask}, nil
			}})
	}
}

type cbcPlain struct {
	b    gocipher.Block
	mask uint64
}

// ivSetter is what crypto/cipher's CBC modes implement, so one mode value
// serves every sector of a call.
type ivSetter interface {
	gocipher.BlockMode
	SetIV([]byte)
}

// EncryptSectors and DecryptSectors take calls that sector has checked.
func (c *cbcPlain) EncryptSectors(dst, src []byte, first uint64, sectorSize int) {
	c.run(dst, src, first, sectorSize, gocipher.NewCBCEncrypter)
}

func (c *cbcPlain) DecryptSectors(dst, src []byte, first uint64, sectorSize int) {
	c.run(dst, src, first, sectorSize, gocipher.NewCBCDecrypter)
}

func (c *cbcPlain) run(dst, src []byte, first uint64, sectorSize int, mode func(gocipher.Block, []byte) gocipher.BlockMode) {
	var iv [16]byte
	step := uint64(sectorSize / UnitSize)
	binary.LittleEndian.PutUint64(iv[:8], first&c.mask)
	m := mode(c.b, iv[:]).(ivSetter)
	for off := 0; off < len(src); off += sectorSize {
		binary.LittleEndian.PutUint64(iv[:8], first&c.mask)
		m.SetIV(iv[:])
		m.CryptBlocks(dst[off:off+sectorSize], src[off:off+sectorSize])
		first += step
	}
}

// Clear drops the key schedule (crypto/aes cannot wipe it).
func (c *cbcPlain) Clear() { c.b = nil }
