//go:build linux || darwin

package asm

import (
	"bytes"
	"crypto/rand"
	"testing"
)

// The HMAC implementations stay inside their buffers: messages, associated
// data and tags placed against a guard page at either end of their
// regions.
func TestHMACSHA256GuardPages(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	k := newHMACKey(key)
	const maxN = 17
	msgMem, aadMem, tagMem := guarded(t, maxN*4096), guarded(t, maxN*100), guarded(t, maxN*32)
	for _, impl := range SHA256Implementations() {
		for _, shape := range []struct{ a, m int }{{24, 512}, {24, 4096}, {0, 64}, {0, 100}, {40, 24}, {70, 1}, {16, 16}} {
			for _, n := range []int{1, 2, 3, 4, 5, 8, 9, 10, 16, maxN} {
				msgs, aads := make([]byte, n*shape.m), make([]byte, n*shape.a)
				rand.Read(msgs)
				rand.Read(aads)
				want := refTags(key, aads, msgs, n)
				for _, end := range []bool{false, true} {
					at := func(mem []byte, size int) []byte {
						if end {
							return mem[len(mem)-size:]
						}
						return mem[:size]
					}
					m, a, tags := at(msgMem, len(msgs)), at(aadMem, len(aads)), at(tagMem, n*32)
					copy(m, msgs)
					copy(a, aads)
					impl.HMAC(k, tags, a, m, shape.m)
					if !bytes.Equal(tags, want) {
						t.Fatalf("%s: %d messages of %d+%d bytes, at the end %v: tags differ from crypto/hmac", impl.Name, n, shape.a, shape.m, end)
					}
				}
			}
		}
	}
}
