package cipher

import (
	"github.com/cryptimg/cryptimg/asm"
)

// aes-xts-plain64 and aes-xts-plain: XTS-AES (IEEE 1619) with the tweak
// le64(sector) (plain64) or le32(sector mod 2^32) (plain), padded with zeros
// to 16 bytes, as dm-crypt's plain64 and plain IV generators make it. The
// volume key is the data key followed by the tweak key, so a 512-bit key is
// AES-256-XTS. cryptsetup 2.6.1's LUKS1 default is aes-xts-plain64 with 512
// bits (measured: luksFormat --type luks1 without --key-size). The sector
// kernels are package asm's.
func init() {
	for _, m := range []struct {
		mode string
		mask uint64
	}{{"xts-plain64", ^uint64(0)}, {"xts-plain", 1<<32 - 1}} {
		mask := m.mask
		register(&Mode{Name: "aes", Mode: m.mode, KeyBytes: []int{32, 48, 64}, DefaultKeyBytes: 64,
			new: func(key []byte) (kernel, error) { return newXTS(key, mask, asm.BestXTS()) }})
	}
}

type xtsCipher struct {
	k, tk *asm.Schedule // data and tweak keys
	mask  uint64        // sector bits the IV keeps
	impl  asm.XTSImpl
}

func newXTS(key []byte, mask uint64, impl asm.XTSImpl) (*xtsCipher, error) {
	k, err := asm.NewSchedule(key[:len(key)/2])
	if err != nil {
		return nil, err
	}
	tk, err := asm.NewSchedule(key[len(key)/2:])
	if err != nil {
		k.Clear()
		return nil, err
	}
	return &xtsCipher{k: k, tk: tk, mask: mask, impl: impl}, nil
}

// EncryptSectors and DecryptSectors take calls that sector has checked.
func (x *xtsCipher) EncryptSectors(dst, src []byte, first uint64, sectorSize int) {
	x.impl.Encrypt(x.k, x.tk, dst[:len(src)], src, first, x.mask, sectorSize)
}

func (x *xtsCipher) DecryptSectors(dst, src []byte, first uint64, sectorSize int) {
	x.impl.Decrypt(x.k, x.tk, dst[:len(src)], src, first, x.mask, sectorSize)
}

// Clear overwrites the round keys.
func (x *xtsCipher) Clear() {
	x.k.Clear()
	x.tk.Clear()
}

// Implementation names the XTS kernel in use.
func (x *xtsCipher) Implementation() string { return x.impl.Name }

// XTSKernel names the XTS kernel this CPU runs, for example "vaes-avx512".
func XTSKernel() string { return asm.BestXTS().Name }
