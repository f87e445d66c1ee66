package header

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/cryptimg/cryptimg/vectors"
)

// FuzzUnlockArea fuzzes a whole header area (phdr and key material) with a
// passphrase, seeded with the cryptsetup-made areas in vectors/luks. Read
// and Unlock must never panic and return only documented errors; a key they
// return must match the digest; and adding a key slot to the area (what
// add-key does) must give an area whose new slot unlocks to the same key.
// Run: go test -run=^$ -fuzz=FuzzUnlockArea -fuzztime=3m ./header
func FuzzUnlockArea(f *testing.F) {
	meta, err := vectors.ReadFile("luks/cryptsetup-luks1.json")
	if err != nil {
		f.Fatal(err)
	}
	var seeds []struct {
		File       string `json:"file"`
		Passphrase string `json:"passphrase"`
	}
	if err := json.Unmarshal(meta, &seeds); err != nil {
		f.Fatal(err)
	}
	for _, s := range seeds {
		gz, err := vectors.ReadFile("luks/" + s.File)
		if err != nil {
			f.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			f.Fatal(err)
		}
		area, err := io.ReadAll(zr)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(area, []byte(s.Passphrase))
	}
	f.Add(bytes.Clone(fuzzArea()), []byte(fuzzPassphrase))
	f.Fuzz(func(t *testing.T, area, passphrase []byte) {
		h, err := readLUKS1(bytes.NewReader(area), 0, int64(len(area)))
		if err != nil {
			var uh *UnsupportedHashError
			if h != nil || !(errors.Is(err, ErrNotLUKS) || errors.Is(err, ErrCorrupt) || errors.As(err, &uh)) {
				t.Fatalf("Read = %v, %v", h, err)
			}
			return
		}
		if h.MKDigestIter > fuzzMaxIterations {
			return
		}
		for i := range h.Slots {
			if h.Slots[i].Active() && h.Slots[i].Iterations > fuzzMaxIterations {
				return
			}
		}
		vk, slot, err := h.Unlock(bytes.NewReader(area), 0, passphrase, -1)
		var uc *UnsupportedCipherError
		switch {
		case err == nil:
		case errors.Is(err, ErrNoMatchingKeyslot), errors.Is(err, ErrNoActiveKeyslot), errors.Is(err, ErrCorrupt), errors.As(err, &uc):
			if vk != nil || slot != -1 {
				t.Fatalf("Unlock failed with results: %v", err)
			}
			return
		default:
			t.Fatalf("Unlock: unexpected error %v", err)
		}
		if !h.VerifyVolumeKey(vk) || !h.Slots[slot].Active() {
			t.Fatalf("Unlock returned a bad key from slot %d", slot)
		}
		free := h.FirstFreeSlot()
		if free < 0 {
			return
		}
		h2 := *h
		newPass := []byte("fuzz new passphrase")
		material, err := h2.SetKeySlot(free, newPass, vk, MinIterations, testRand("fuzz unlock"))
		if err != nil {
			t.Fatalf("SetKeySlot on a header that unlocked: %v", err)
		}
		out := bytes.Clone(area)
		copy(out[int64(h2.Slots[free].KeyMaterialOffset)*SectorSize:], material)
		copy(out, h2.Marshal())
		h3, err := readLUKS1(bytes.NewReader(out), 0, int64(len(out)))
		if err != nil {
			t.Fatalf("Read after SetKeySlot: %v", err)
		}
		vk2, slot2, err := h3.Unlock(bytes.NewReader(out), 0, newPass, free)
		if err != nil || slot2 != free || !bytes.Equal(vk, vk2) {
			t.Fatalf("new slot %d: %v", free, err)
		}
	})
}
