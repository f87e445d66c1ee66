package asm

import (
	"crypto/sha256"
	"strconv"
	"testing"
)

// BenchmarkHMACSHA256 tags 1 MiB of sectors with their 24-byte records,
// as the LUKS2 hmac(sha256) modes do; BenchmarkSHA256Stdlib is
// crypto/sha256 over the same bytes, for the ratio.
func BenchmarkHMACSHA256(b *testing.B) {
	k := newHMACKey(make([]byte, 32))
	msgs := make([]byte, 1<<20)
	for _, impl := range SHA256Implementations() {
		for _, ss := range []int{512, 4096} {
			n := len(msgs) / ss
			aads, tags := make([]byte, 24*n), make([]byte, 32*n)
			b.Run(impl.Name+"/"+strconv.Itoa(ss), func(b *testing.B) {
				b.SetBytes(int64(len(msgs)))
				b.ReportAllocs()
				for b.Loop() {
					impl.HMAC(k, tags, aads, msgs, ss)
				}
			})
		}
	}
}

func BenchmarkSHA256Stdlib(b *testing.B) {
	buf := make([]byte, 1<<20)
	for _, ss := range []int{512, 4096} {
		b.Run(strconv.Itoa(ss), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				for off := 0; off < len(buf); off += ss {
					sha256.Sum256(buf[off : off+ss])
				}
			}
		})
	}
}

// BenchmarkSHA256Blocks is the raw compression of 64 KiB per lane, for
// each lane count a kernel handles.
func BenchmarkSHA256Blocks(b *testing.B) {
	const size = 64 << 10
	for _, impl := range SHA256Implementations() {
		for lanes := 1; lanes <= sha256Lanes; lanes++ {
			h := make([]SHA256State, lanes)
			blocks := make([][]byte, lanes)
			for j := range blocks {
				blocks[j] = make([]byte, size)
			}
			b.Run(impl.Name+"/lanes"+strconv.Itoa(lanes), func(b *testing.B) {
				b.SetBytes(int64(lanes * size))
				for b.Loop() {
					impl.Blocks(h, blocks)
				}
			})
		}
	}
}
