package image

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

// convertState checks an image a conversion may leave: a valid header of
// either version whose passphrases all open the volume key vk and whose
// payload decrypts to plain, or a marked one (the journal finishes it). It
// returns the version, or 0 for marked.
func convertState(t *testing.T, img, plain, vk []byte, passes ...[]byte) int {
	t.Helper()
	h, err := header.Read(bytes.NewReader(img), 0, int64(len(img)))
	if errors.Is(err, header.ErrMarked) {
		return 0
	}
	if err != nil {
		t.Fatalf("the image reads neither as a header nor as marked: %v", err)
	}
	for _, p := range passes {
		got, _, err := h.Unlock(bytes.NewReader(img), 0, p, -1)
		if err != nil {
			t.Fatalf("LUKS%d: %q does not open: %v", h.Info().Version, p, err)
		}
		if !bytes.Equal(got, vk) {
			t.Fatalf("LUKS%d: %q opens another volume key", h.Info().Version, p)
		}
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	off := h.Info().PayloadOffset
	out := make([]byte, int64(len(img))-off)
	if err := c.DecryptSectors(out, img[off:], 0); err != nil || !bytes.Equal(out, plain) {
		t.Fatalf("LUKS%d: the data no longer decrypts (%v)", h.Info().Version, err)
	}
	return h.Info().Version
}

// TestConvertPowerCut converts a LUKS1 image to LUKS2 and back with a
// power cut at 200 random points of each (a quarter crash again while
// resuming): after every crash the image holds the old header, the new
// one or the mark, both passphrases open the same volume key, and running
// Convert again finishes with the new header.
func TestConvertPowerCut(t *testing.T) {
	points := 200
	switch {
	case raceEnabled:
		points = 8 // the race run looks for data races, not crash states
	case testing.Short():
		points = 20
	}
	rng := rand.New(rand.NewPCG(5, 7))
	plain := testPlain(rng, 1<<20)
	second := []byte("second passphrase")
	img1 := testLUKS(t, rng, plain, 32, rePass, second)
	h, err := header.Read(bytes.NewReader(img1), 0, int64(len(img1)))
	if err != nil {
		t.Fatal(err)
	}
	vk, _, err := h.Unlock(bytes.NewReader(img1), 0, rePass, -1)
	if err != nil {
		t.Fatal(err)
	}
	convert := func(img []byte, version int, crashAt int, seed uint64) ([]byte, *faultDisk, error) {
		d := newFaultDisk(seed)
		f := d.add("img", img)
		d.crashAt = crashAt
		_, err := Convert(context.Background(), f, faultJournal{d, "img.journal"}, ConvertOptions{Version: version, Rand: testParams(rng).Rand})
		return f.cur, d, err
	}
	// Clean runs: the two conversions, and how many operations each takes.
	img2, d, err := convert(img1, 2, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v := convertState(t, img2, plain, vk, rePass, second); v != 2 {
		t.Fatalf("converted to LUKS%d", v)
	}
	ops2 := d.ops
	back, d, err := convert(img2, 1, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v := convertState(t, back, plain, vk, rePass, second); v != 1 {
		t.Fatalf("converted back to LUKS%d", v)
	}
	ops1 := d.ops
	for _, c := range []struct {
		img      []byte
		old, new int
		ops      int
	}{{img1, 1, 2, ops2}, {img2, 2, 1, ops1}} {
		seen := map[int]int{}
		for i := range points {
			d := newFaultDisk(uint64(i) + 100)
			f := d.add("img", c.img)
			js := faultJournal{d, "img.journal"}
			run := func() error {
				_, err := Convert(context.Background(), f, js, ConvertOptions{Version: c.new, Rand: testParams(rng).Rand})
				return err
			}
			d.crashAt = 1 + d.rng.IntN(c.ops)
			if err := run(); !errors.Is(err, errCrash) {
				t.Fatalf("to LUKS%d, point %d: %v, want a crash", c.new, d.crashAt, err)
			}
			d.crash()
			v := convertState(t, f.cur, plain, vk, rePass, second)
			if v != 0 && v != c.old && v != c.new {
				t.Fatalf("to LUKS%d: LUKS%d after a crash", c.new, v)
			}
			if _, ok := d.files[js.name]; v == 0 && !ok {
				t.Fatalf("to LUKS%d: the image is marked and the journal is gone", c.new)
			}
			seen[v]++
			if i%4 == 0 {
				d.crashAt = 1 + d.rng.IntN(c.ops)
				if err := run(); err != nil && !errors.Is(err, errCrash) {
					t.Fatalf("to LUKS%d, point %d: first resume: %v", c.new, i, err)
				}
				d.crash()
				if v := convertState(t, f.cur, plain, vk, rePass, second); v != 0 && v != c.old && v != c.new {
					t.Fatalf("to LUKS%d: LUKS%d after a crash while resuming", c.new, v)
				}
			}
			if err := run(); err != nil {
				t.Fatalf("to LUKS%d, point %d: resume: %v", c.new, i, err)
			}
			if v := convertState(t, f.cur, plain, vk, rePass, second); v != c.new {
				t.Fatalf("to LUKS%d: LUKS%d after resuming", c.new, v)
			}
			if _, ok := d.files[js.name]; ok {
				t.Fatalf("to LUKS%d: journal left behind", c.new)
			}
		}
		t.Logf("to LUKS%d: %d crash points (%d mutating operations per run); states after the crash: old %d, marked %d, new %d",
			c.new, points, c.ops, seen[c.old], seen[0], seen[c.new])
		if seen[0] == 0 || seen[c.old] == 0 {
			t.Fatalf("to LUKS%d: the crashes never hit the marked or the old state: %v", c.new, seen)
		}
	}
}

// TestConvertRefusals: qcow2 stays LUKS1, a header of the version asked
// for is refused, and a refusal leaves no journal and no change.
func TestConvertRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	img := testLUKS(t, rng, testPlain(rng, 64<<10), 32, rePass)
	d := newFaultDisk(1)
	f := d.add("img", img)
	js := faultJournal{d, "img.journal"}
	if _, err := Convert(context.Background(), f, js, ConvertOptions{Version: 1}); !errors.Is(err, header.ErrConvert) {
		t.Fatalf("LUKS1 to LUKS1: %v", err)
	}
	if _, err := Convert(context.Background(), f, js, ConvertOptions{Version: 2, Resume: true}); !errors.Is(err, ErrNothingToResume) {
		t.Fatalf("resume without a conversion: %v", err)
	}
	if d.ops != 0 || !bytes.Equal(f.cur, img) {
		t.Fatal("a refused conversion wrote something")
	}
}
