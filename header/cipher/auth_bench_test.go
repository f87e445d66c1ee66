package cipher

import (
	"crypto/sha256"
	"testing"
)

// BenchmarkAuth measures Seal and Open of 1 MiB runs for each authenticated
// mode with its default key, at 4096- and 512-byte sectors. The product
// goal is that both reach 0.8 of BenchmarkSHA256's throughput per core:
//
//	go test -run '^$' -bench 'Auth|SHA256' -count 5 ./header/cipher
func BenchmarkAuth(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(b, spec)
		for _, ss := range []int{4096, 512} {
			s, err := m.NewSector(make([]byte, m.DefaultCipherKeyBytes+m.MACKeyBytes), Geometry{SectorSize: ss})
			if err != nil {
				b.Fatal(err)
			}
			tags := make([]byte, len(buf)/ss*m.TagSize)
			name := m.Spec + "+" + m.Option + "/" + itoa(ss)
			b.Run(name+"/seal", func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Seal(buf, tags, buf, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			// Open needs valid tags: open out of place from one sealed
			// copy, so every iteration checks the same good sectors.
			ct := make([]byte, len(buf))
			if err := s.Seal(ct, tags, buf, 0); err != nil {
				b.Fatal(err)
			}
			b.Run(name+"/open", func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Open(buf, ct, tags, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSHA256 is the baseline of BenchmarkAuth: crypto/sha256 over the
// same 1 MiB, as one Sum256 per 4096-byte piece and as one Sum256 of the
// whole buffer.
func BenchmarkSHA256(b *testing.B) {
	buf := make([]byte, 1<<20)
	b.Run("4096", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			for off := 0; off < len(buf); off += 4096 {
				sha256.Sum256(buf[off : off+4096])
			}
		}
	})
	b.Run("1MiB", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			sha256.Sum256(buf)
		}
	})
}

// BenchmarkAuthHMAC is the tagging alone, 1 MiB of sectors with their
// records, for each MAC implementation: the multi-buffer kernels of package
// asm, its generic code, and crypto/sha256 one sector at a time (the
// fallback without kernels, and how every machine tagged before them).
func BenchmarkAuthHMAC(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, mi := range macImpls() {
		mac := newHMACSHA256(make([]byte, macSize), mi.mac)
		for _, ss := range []int{4096, 512} {
			n := len(buf) / ss
			recs, tags := make([]byte, 24*n), make([]byte, macSize*n)
			b.Run(mi.name+"/"+itoa(ss), func(b *testing.B) {
				st := getMAC()
				defer st.put()
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					for i := 0; i < n; i += authChunkSectors {
						k := min(n, i+authChunkSectors)
						mac.sectors(st, tags[i*macSize:k*macSize], recs[i*24:k*24], buf[i*ss:k*ss], ss)
					}
				}
			})
		}
	}
}
