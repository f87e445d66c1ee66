package header

import (
	"bytes"
	"errors"
	"reflect"
	"sync"
	"testing"
)

// fuzzArea is a complete header area (16-byte key, qemu layout, 1000
// iterations) whose key material the fuzzed headers are unlocked against, so
// an intact or lightly mutated header still reaches AF merge and the digest.
var fuzzArea = sync.OnceValue(func() []byte {
	h, _, area, err := formatLUKS1([]byte(fuzzPassphrase), Params{
		KeyBytes: 16, AlignSectors: 8, ForceIterations: MinIterations, Rand: testRand("fuzz"),
	})
	if err != nil || h.PayloadOffset != 1032 {
		panic("header: fuzz setup: " + err.Error())
	}
	return area
})

const fuzzPassphrase = "fuzz passphrase"

// fuzzMaxIterations bounds the PBKDF2 work one input may cause.
const fuzzMaxIterations = 10000

// FuzzParse checks that Parse, Read, Marshal and Unlock never panic, return
// only the documented errors, and that a parsed header re-encodes to itself.
// Run: go test -run=^$ -fuzz=FuzzParse -fuzztime=3m ./header
func FuzzParse(f *testing.F) {
	area := fuzzArea()
	f.Add(bytes.Clone(area[:PhdrSize]))
	f.Add(bytes.Clone(area[:definedSize]))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := Parse(data)
		if err != nil {
			var uh *UnsupportedHashError
			if h != nil || !(errors.Is(err, ErrNotLUKS) || errors.Is(err, ErrCorrupt) || errors.As(err, &uh)) {
				t.Fatalf("Parse = %v, %v", h, err)
			}
			return
		}
		// Round trip.
		b := h.Marshal()
		h2, err := Parse(b)
		if err != nil || !reflect.DeepEqual(h, h2) {
			t.Fatalf("re-parse: %v\n%+v\n%+v", err, h, h2)
		}
		if !bytes.Equal(h2.Marshal(), b) {
			t.Fatal("Marshal is not stable")
		}
		_ = h.KeyMaterialSectors()
		_ = h.CipherSpec()

		// The header over the reference key material.
		file := bytes.Clone(area)
		copy(file, data[:min(len(data), PhdrSize)])
		hr, err := readLUKS1(bytes.NewReader(file), 0, int64(len(file)))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) || h.AreaSize() <= int64(len(file)) {
				t.Fatalf("Read: %v (area %d, file %d)", err, h.AreaSize(), len(file))
			}
			return
		}
		if !reflect.DeepEqual(hr, h) {
			t.Fatal("Read and Parse disagree")
		}
		cost := uint64(0)
		for i := range h.Slots {
			if h.Slots[i].Active() {
				if h.Slots[i].Iterations > fuzzMaxIterations {
					return
				}
				cost += uint64(h.Slots[i].Iterations) + uint64(h.MKDigestIter)
			}
		}
		if h.MKDigestIter > fuzzMaxIterations || cost > 4*fuzzMaxIterations {
			return
		}
		vk, slot, err := h.Unlock(bytes.NewReader(file), 0, []byte(fuzzPassphrase), -1)
		var uc *UnsupportedCipherError
		switch {
		case err == nil:
			if len(vk) != int(h.KeyBytes) || !h.Slots[slot].Active() || !h.VerifyVolumeKey(vk) {
				t.Fatalf("Unlock returned a bad key from slot %d", slot)
			}
		case errors.Is(err, ErrNoMatchingKeyslot), errors.Is(err, ErrNoActiveKeyslot), errors.Is(err, ErrCorrupt), errors.As(err, &uc):
			if vk != nil || slot != -1 {
				t.Fatalf("Unlock failed with results: %v", err)
			}
		default:
			t.Fatalf("Unlock: unexpected error %v", err)
		}
	})
}
