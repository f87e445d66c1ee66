package header

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// crashPoints applies u to area as far as a power cut at every 512-byte
// boundary of every write allows (every 4096 bytes of key material): the writes before it whole (each is
// synced before the next starts), the one it falls in with a random subset
// of its sectors (a disk may reorder a write's sectors), and none after.
// check is called on each resulting image; it returns the number of
// crash points.
func crashPoints(t *testing.T, area []byte, u *Update, seed uint64, check func(img []byte) error) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	n := 0
	for i, w := range u.Writes {
		step := 512
		if len(w.Data) > 64<<10 {
			step = 4096 // key material: no reader looks at it before the copies name it
		}
		for cut := 0; cut <= len(w.Data); cut += step {
			img := bytes.Clone(area)
			for _, p := range u.Writes[:i] {
				copy(img[p.Offset:], p.Data)
			}
			// The sectors of w before cut landed, and a random few after.
			copy(img[w.Offset:], w.Data[:cut])
			for s := cut; s < len(w.Data); s += 512 {
				if rng.IntN(4) == 0 {
					copy(img[w.Offset+int64(s):], w.Data[s:min(s+512, len(w.Data))])
				}
			}
			if err := check(img); err != nil {
				t.Fatalf("crash in write %d (%s) after %d bytes: %v", i, w.What, cut, err)
			}
			n++
		}
	}
	return n
}

// TestLUKS2PowerCut: a power cut at every sector of every write of each
// LUKS2 header update leaves a header that reads, opens with the
// passphrases of the old state or all of the new one, and shows the old or
// the new value of what the update changed: add-key, remove-key (a kill of
// one slot), change-key (add, then kill), token import, config and uuid.
func TestLUKS2PowerCut(t *testing.T) {
	hh, vk, area, err := Format([]byte("pw0"), Params{Version: 2, Cipher: "aes-xts-plain64", PBKDF: "pbkdf2", ForceIterations: MinIterations, Rand: testRand("crash")})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*LUKS2)
	kdf := KDF{Type: "pbkdf2", Iterations: MinIterations}
	// Everything the updates touch lies in the first MiB (both copies and
	// three 252 KiB keyslot areas); the rest of the 16 MiB header area
	// reads as zeros, which keeps 2500 crash images cheap.
	area = area[:1<<20]
	read := func(img []byte) (*LUKS2, error) {
		r, err := Read(metaReader(img), 0, h.Info().AreaSize)
		if err != nil {
			return nil, err
		}
		return r.(*LUKS2), nil
	}
	opens := func(img []byte, h *LUKS2, pass string) bool {
		_, _, err := h.Unlock(bytes.NewReader(img), 0, []byte(pass), -1)
		return err == nil
	}
	// state checks that img holds either the old state (exactly the slots
	// oldSlots, and every passphrase of oldPass opens) or the new one.
	state := func(img []byte, oldSlots []int, oldPass []string, newSlots []int, newPass []string) error {
		got, err := read(img)
		if err != nil {
			return err
		}
		is := func(slots []int, ps []string) bool {
			if got.ActiveSlots() != len(slots) {
				return false
			}
			for _, s := range slots {
				if !got.SlotActive(s) {
					return false
				}
			}
			for _, p := range ps {
				if !opens(img, got, p) {
					return false
				}
			}
			return true
		}
		if !is(oldSlots, oldPass) && !is(newSlots, newPass) {
			return fmt.Errorf("neither the old state (slots %v open with %v) nor the new (%v with %v)", oldSlots, oldPass, newSlots, newPass)
		}
		return nil
	}
	total := 0
	add, err := h.AddSlot(1, []byte("pw1"), vk, kdf, testRand("crash add"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seed := range uint64(2) {
		n += crashPoints(t, area, add, 1+seed, func(img []byte) error {
			return state(img, []int{0}, []string{"pw0"}, []int{0, 1}, []string{"pw0", "pw1"})
		})
	}
	if n < 200 {
		t.Errorf("add-key: %d crash points", n)
	}
	total += n
	applyTo(t, area, add)
	h = add.Header.(*LUKS2)

	// change-key: pw1 moves to pw2, in slot 2, then slot 1 goes.
	add2, err := h.AddSlot(2, []byte("pw2"), vk, kdf, testRand("crash add2"))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(2) {
		total += crashPoints(t, area, add2, 3+seed, func(img []byte) error {
			return state(img, []int{0, 1}, []string{"pw0", "pw1"}, []int{0, 1, 2}, []string{"pw0", "pw1", "pw2"})
		})
	}
	applyTo(t, area, add2)
	h = add2.Header.(*LUKS2)
	kill, err := h.KillSlot(1, testRand("crash kill"))
	if err != nil {
		t.Fatal(err)
	}
	for seed := range uint64(2) {
		total += crashPoints(t, area, kill, 5+seed, func(img []byte) error {
			return state(img, []int{0, 1, 2}, []string{"pw0", "pw1", "pw2"}, []int{0, 2}, []string{"pw0", "pw2"})
		})
	}
	applyTo(t, area, kill)
	h = kill.Header.(*LUKS2)
	if opens(area, h, "pw1") {
		t.Fatal("pw1 still opens after the kill")
	}

	// Metadata changes: the old or the new value, pw0 and pw2 always.
	label := "after"
	for name, mk := range map[string]func(*LUKS2) (*Update, error){
		"token": func(h *LUKS2) (*Update, error) {
			u, _, err := h.ImportToken(3, []byte(`{"type":"x-crash","keyslots":["0"]}`), -1)
			return u, err
		},
		"config": func(h *LUKS2) (*Update, error) { return h.WithLabel(&label, nil) },
		"uuid":   func(h *LUKS2) (*Update, error) { return h.WithUUID("0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b") },
	} {
		u, err := mk(h)
		if err != nil {
			t.Fatal(name, err)
		}
		oldJSON, newJSON := string(h.JSON()), string(u.Header.(*LUKS2).JSON())
		oldInfo, newInfo := h.Info(), u.Header.Info()
		oldLabel, newLabel := h.Label(), u.Header.(*LUKS2).Label()
		check := func(img []byte) error {
			if err := state(img, []int{0, 2}, []string{"pw0", "pw2"}, []int{0, 2}, []string{"pw0", "pw2"}); err != nil {
				return err
			}
			got, _ := read(img)
			j := string(got.JSON())
			isOld := j == oldJSON && got.Info() == oldInfo && got.Label() == oldLabel
			isNew := j == newJSON && got.Info() == newInfo && got.Label() == newLabel
			if !isOld && !isNew {
				return fmt.Errorf("neither the old nor the new %s", name)
			}
			return nil
		}
		// Two 16 KiB copies are 66 crash points; four seeds of the
		// landed sectors make 264.
		n := 0
		for seed := range uint64(4) {
			n += crashPoints(t, area, u, 10+seed, check)
		}
		if n < 200 {
			t.Errorf("%s: only %d crash points", name, n)
		}
		total += n
	}
	t.Logf("%d crash points", total)
	if total < 6*200 {
		t.Errorf("%d crash points over six updates, want at least 1200", total)
	}
}
