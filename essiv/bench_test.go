package essiv

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/asm"
)

// stdlibESSIV is the baseline the kernels are measured against: crypto/aes
// and crypto/cipher CBC modes reused across sectors with SetIV, and one
// cipher.Block.Encrypt per sector for the ESSIV IV.
type stdlibESSIV struct {
	ivc      cipher.Block
	enc, dec cipher.BlockMode
	iv       [BlockSize]byte
}

type ivSetter interface{ SetIV([]byte) }

func newStdlibESSIV(tb testing.TB, key []byte) *stdlibESSIV {
	b, err := aes.NewCipher(key)
	if err != nil {
		tb.Fatal(err)
	}
	salt := sha256.Sum256(key)
	ivc, err := aes.NewCipher(salt[:])
	if err != nil {
		tb.Fatal(err)
	}
	s := &stdlibESSIV{ivc: ivc}
	s.enc = cipher.NewCBCEncrypter(b, s.iv[:])
	s.dec = cipher.NewCBCDecrypter(b, s.iv[:])
	if _, ok := s.enc.(ivSetter); !ok {
		tb.Skip("crypto/cipher CBC modes have no SetIV")
	}
	if _, ok := s.dec.(ivSetter); !ok {
		tb.Skip("crypto/cipher CBC modes have no SetIV")
	}
	return s
}

func (s *stdlibESSIV) crypt(m cipher.BlockMode, dst, src []byte, first uint64, ss int) {
	for off := 0; off < len(src); off += ss {
		binary.LittleEndian.PutUint64(s.iv[:8], first+uint64(off/512))
		clear(s.iv[8:])
		s.ivc.Encrypt(s.iv[:], s.iv[:])
		m.(ivSetter).SetIV(s.iv[:])
		m.CryptBlocks(dst[off:off+ss], src[off:off+ss])
	}
}

// BenchmarkSectors measures EncryptSectors and DecryptSectors (Encrypt and
// Decrypt for single sectors) for every implementation and the stdlib
// baseline in the same run. Sub-benchmark names are key=value pairs so that
// benchstat -col /impl compares the implementations, e.g.
//
//	go test -run XXX -bench Sectors -count 6 ./essiv > bench.txt
//	benchstat -col /impl bench.txt
func BenchmarkSectors(b *testing.B) {
	impls := []string{"stdlib"}
	for _, impl := range asm.Implementations() {
		impls = append(impls, impl.Name)
	}
	for _, dir := range []string{"enc", "dec"} {
		for _, keyLen := range []int{16, 32} {
			for _, ss := range []int{512, 4096} {
				for _, batch := range []int{16, 1} {
					for _, name := range impls {
						b.Run(fmt.Sprintf("dir=%s/aes=%d/ss=%d/batch=%d/impl=%s", dir, keyLen*8, ss, batch, name), func(b *testing.B) {
							benchSectors(b, dir, name, keyLen, ss, batch)
						})
					}
				}
			}
		}
	}
}

func benchSectors(b *testing.B, dir, name string, keyLen, ss, batch int) {
	buf := make([]byte, ss*batch)
	run := benchOp(b, dir, name, keyLen, ss, batch, buf)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
}

const benchFirstSector = 1 << 20

// benchOp returns one in-place call of the operation under test on buf.
func benchOp(b *testing.B, dir, name string, keyLen, ss, batch int, buf []byte) func() {
	key := make([]byte, keyLen)
	for i := range key {
		key[i] = byte(i*7 + 1)
	}
	for i := range buf {
		buf[i] = byte(i)
	}
	if name == "stdlib" {
		s := newStdlibESSIV(b, key)
		m := s.enc
		if dir == "dec" {
			m = s.dec
		}
		return func() { s.crypt(m, buf, buf, benchFirstSector, ss) }
	}
	var impl asm.Impl
	for _, i := range asm.Implementations() {
		if i.Name == name {
			impl = i
		}
	}
	c, err := newCipher(key, impl)
	if err != nil {
		b.Fatal(err)
	}
	switch {
	case dir == "enc" && batch == 1:
		return func() { c.Encrypt(buf, buf, benchFirstSector) }
	case dir == "dec" && batch == 1:
		return func() { c.Decrypt(buf, buf, benchFirstSector) }
	case dir == "enc":
		return func() { c.EncryptSectors(buf, buf, benchFirstSector, ss) }
	default:
		return func() { c.DecryptSectors(buf, buf, benchFirstSector, ss) }
	}
}

// BenchmarkSpeedup runs each implementation and the stdlib baseline
// alternately, one call each per iteration, and reports the best time of
// each as GB/s and their ratio (x-stdlib). On a shared machine the minimum
// over many short interleaved calls is far more stable than the mean of
// BenchmarkSectors, and both sides see the same conditions:
//
//	go test -run XXX -bench Speedup -benchtime 0.3s -count 6 ./essiv > speedup.txt
//	benchstat -col /impl speedup.txt
func BenchmarkSpeedup(b *testing.B) {
	for _, dir := range []string{"enc", "dec"} {
		for _, keyLen := range []int{16, 32} {
			for _, ss := range []int{512, 4096} {
				for _, batch := range []int{16, 1} {
					for _, impl := range asm.Implementations() {
						if impl.Name == asm.Generic.Name {
							continue
						}
						b.Run(fmt.Sprintf("dir=%s/aes=%d/ss=%d/batch=%d/impl=%s", dir, keyLen*8, ss, batch, impl.Name), func(b *testing.B) {
							benchSpeedup(b, dir, impl.Name, keyLen, ss, batch)
						})
					}
				}
			}
		}
	}
}

func benchSpeedup(b *testing.B, dir, name string, keyLen, ss, batch int) {
	buf, stdBuf := make([]byte, ss*batch), make([]byte, ss*batch)
	run := benchOp(b, dir, name, keyLen, ss, batch, buf)
	std := benchOp(b, dir, "stdlib", keyLen, ss, batch, stdBuf)
	best, stdBest := time.Duration(1<<62), time.Duration(1<<62)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		run()
		t1 := time.Now()
		std()
		t2 := time.Now()
		best = min(best, t1.Sub(t0))
		stdBest = min(stdBest, t2.Sub(t1))
	}
	n := float64(len(buf))
	b.ReportMetric(n/float64(best.Nanoseconds()), "GB/s")
	b.ReportMetric(n/float64(stdBest.Nanoseconds()), "std-GB/s")
	b.ReportMetric(float64(stdBest)/float64(best), "x-stdlib")
}
