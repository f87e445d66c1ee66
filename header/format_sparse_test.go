package header

import (
	"bytes"
	"testing"
)

// TestFormatSparse: FormatSparse gives the same header and volume key as
// Format from the same random bytes, and its area is Format's with the
// trailing zeros cut: about 300 KiB of a LUKS2 area's 16 MiB, all of a
// LUKS1 area. The header reads back from the short area padded with
// zeros.
func TestFormatSparse(t *testing.T) {
	for _, c := range []struct {
		name     string
		p        Params
		size     int64
		shortMax int
	}{
		{"luks1", Params{KeyBytes: 32}, 2 << 20, 2 << 20},
		{"luks2", Params{Version: 2, PBKDF: "pbkdf2"}, luks2DataOffset, 512 << 10},
		{"luks2-xts-512", Params{Version: 2, PBKDF: "pbkdf2", Cipher: "aes-xts-plain64", KeyBytes: 64}, luks2DataOffset, 512 << 10},
		{"luks2-detached", Params{Version: 2, PBKDF: "pbkdf2", Detached: true}, luks2DataOffset, 512 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.p.ForceIterations = MinIterations
			c.p.UUID = "12345678-1234-4234-8234-123456789abc"
			p1, p2 := c.p, c.p
			p1.Rand, p2.Rand = testRand(c.name), testRand(c.name)
			h1, vk1, full, err := Format([]byte("pw"), p1)
			if err != nil {
				t.Fatal(err)
			}
			h2, vk2, short, size, err := FormatSparse([]byte("pw"), p2)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(full)) != size || size != c.size {
				t.Errorf("Format's area %d bytes, FormatSparse's size %d; want %d", len(full), size, c.size)
			}
			if len(short) > c.shortMax || len(short)%4096 != 0 {
				t.Errorf("the sparse area holds %d bytes, want a multiple of 4096 up to %d", len(short), c.shortMax)
			}
			if !bytes.Equal(full[:len(short)], short) || !bytes.Equal(full[len(short):], make([]byte, len(full)-len(short))) {
				t.Error("the sparse area is not Format's area with its trailing zeros cut")
			}
			if !bytes.Equal(vk1, vk2) || h1.Info() != h2.Info() {
				t.Errorf("the headers or volume keys differ: %+v, %+v", h1.Info(), h2.Info())
			}
			r, err := Read(zeroTail{short}, 0, size)
			if err != nil {
				t.Fatal(err)
			}
			if got, _, err := r.Unlock(zeroTail{short}, 0, []byte("pw"), -1); err != nil || !bytes.Equal(got, vk1) {
				t.Errorf("unlocking from the sparse area: %v", err)
			}
		})
	}
}
