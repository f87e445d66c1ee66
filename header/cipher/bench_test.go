package cipher

import (
	"crypto/aes"
	"testing"

	"golang.org/x/crypto/xts"
)

// BenchmarkSectors measures 1 MiB batches of each cipher, with
// golang.org/x/crypto/xts as the XTS baseline.
func BenchmarkSectors(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, c := range []struct {
		spec string
		key  int
	}{{"aes-cbc-essiv:sha256", 32}, {"aes-xts-plain64", 64}, {"aes-xts-plain64", 32}, {"aes-cbc-plain64", 32}} {
		m, _ := Parse(c.spec)
		for _, ss := range []int{512, 4096} {
			s, _ := m.NewSector(make([]byte, c.key), Geometry{SectorSize: ss})
			b.Run(c.spec+"-"+itoa(c.key*8)+"-"+itoa(ss)+"-enc", func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					s.EncryptSectors(buf, buf, uint64(i))
				}
			})
			b.Run(c.spec+"-"+itoa(c.key*8)+"-"+itoa(ss)+"-dec", func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					s.DecryptSectors(buf, buf, uint64(i))
				}
			})
		}
	}
	ref, _ := xts.NewCipher(aes.NewCipher, make([]byte, 64))
	b.Run("x-crypto-xts-512-4096-enc", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for i := 0; i < b.N; i++ {
			for off := 0; off < len(buf); off += 4096 {
				ref.Encrypt(buf[off:off+4096], buf[off:off+4096], uint64(off/512))
			}
		}
	})
}

func itoa(n int) string {
	s := ""
	for n > 0 || s == "" {
		s = string(rune('0'+n%10)) + s
		n /= 10
	}
	return s
}
