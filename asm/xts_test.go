package asm

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"fmt"
	"testing"

	"golang.org/x/crypto/xts"
)

// TestXTSAllImplementations compares every XTS implementation with
// golang.org/x/crypto/xts, sector by sector, for every key size, the LUKS
// sector sizes, batches that end inside and on chunk boundaries, sector
// numbers that cross 2^32 with both masks, and in place.
func TestXTSAllImplementations(t *testing.T) {
	for _, impl := range XTSImplementations() {
		t.Run(impl.Name, func(t *testing.T) {
			for _, keyLen := range []int{32, 48, 64} {
				key := make([]byte, keyLen)
				rand.Read(key)
				ref, err := xts.NewCipher(aes.NewCipher, key)
				if err != nil {
					t.Fatal(err)
				}
				k, _ := NewSchedule(key[:keyLen/2])
				tk, _ := NewSchedule(key[keyLen/2:])
				for _, ss := range []int{512, 1024, 4096} {
					for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 33} {
						for _, mask := range []uint64{^uint64(0), 1<<32 - 1} {
							first := uint64(1<<32 - 3)
							src := make([]byte, n*ss)
							rand.Read(src)
							want := make([]byte, len(src))
							for i := range n {
								sec := (first + uint64(i*ss/512)) & mask
								ref.Encrypt(want[i*ss:(i+1)*ss], src[i*ss:(i+1)*ss], sec)
							}
							name := fmt.Sprintf("key %d, %d x %d bytes, mask %x", keyLen, n, ss, mask)
							got := make([]byte, len(src))
							impl.Encrypt(k, tk, got, src, first, mask, ss)
							if !bytes.Equal(got, want) {
								t.Fatalf("%s: encrypt differs from x/crypto/xts", name)
							}
							back := make([]byte, len(src))
							impl.Decrypt(k, tk, back, got, first, mask, ss)
							if !bytes.Equal(back, src) {
								t.Fatalf("%s: decrypt does not invert", name)
							}
							// In place.
							impl.Encrypt(k, tk, back, back, first, mask, ss)
							if !bytes.Equal(back, want) {
								t.Fatalf("%s: in-place encrypt differs", name)
							}
							impl.Decrypt(k, tk, back, back, first, mask, ss)
							if !bytes.Equal(back, src) {
								t.Fatalf("%s: in-place decrypt differs", name)
							}
						}
					}
				}
			}
		})
	}
}

func TestMulAlpha(t *testing.T) {
	var v [16]byte
	v[15] = 0x80 // x^127
	mulAlpha(&v)
	if v != [16]byte{0x87} {
		t.Fatalf("x^127 * x = %x, want 87 00...", v)
	}
	v = [16]byte{0x80}
	mulAlpha(&v)
	if v != [16]byte{0x00, 0x01} {
		t.Fatalf("x^7 * x = %x", v)
	}
}

func TestXTSNoAllocs(t *testing.T) {
	k, _ := NewSchedule(make([]byte, 32))
	buf := make([]byte, 64<<10)
	for _, impl := range XTSImplementations() {
		if n := testing.AllocsPerRun(10, func() { impl.Encrypt(k, k, buf, buf, 0, ^uint64(0), 512) }); n != 0 {
			t.Errorf("%s: %.0f allocations", impl.Name, n)
		}
	}
}

// BenchmarkXTS measures every XTS implementation on 1 MiB of 4096- and
// 512-byte sectors with a 512-bit key, next to every ESSIV implementation's
// decryption of the same batch (256-bit key), so that each XTS kernel can
// be compared with the ESSIV path of the same instruction set in one run.
func BenchmarkXTS(b *testing.B) {
	buf := make([]byte, 1<<20)
	key := make([]byte, 64)
	rand.Read(key)
	k, _ := NewSchedule(key[:32])
	tk, _ := NewSchedule(key[32:])
	for _, ss := range []int{4096, 512} {
		for _, impl := range XTSImplementations() {
			b.Run(fmt.Sprintf("xts-%s-enc-%d", impl.Name, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					impl.Encrypt(k, tk, buf, buf, uint64(i), ^uint64(0), ss)
				}
			})
			b.Run(fmt.Sprintf("xts-%s-dec-%d", impl.Name, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					impl.Decrypt(k, tk, buf, buf, uint64(i), ^uint64(0), ss)
				}
			})
		}
		for _, impl := range Implementations() {
			b.Run(fmt.Sprintf("essiv-%s-dec-%d", impl.Name, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					impl.Decrypt(k, tk, buf, buf, uint64(i), ss)
				}
			})
		}
	}
}
