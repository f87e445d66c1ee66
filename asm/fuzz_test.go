package asm

import (
	"bytes"
	mrand "math/rand/v2"
	"testing"
)

// FuzzKernels compares every implementation with Generic on a
// fuzzer-chosen key, first sector, batch and sector size, alignment and
// buffer mode. The seed corpus in testdata/fuzz/FuzzKernels runs with
// plain go test.
func FuzzKernels(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint64(0), uint8(1), uint8(0), uint8(0), false, uint64(1))
	f.Add([]byte("0123456789abcdef01234567"), uint64(1<<40), uint8(17), uint8(3), uint8(5), true, uint64(2))
	f.Add([]byte("0123456789abcdef0123456789abcdef"), ^uint64(0), uint8(33), uint8(0), uint8(15), false, uint64(3))
	f.Fuzz(func(t *testing.T, key []byte, first uint64, batch, sizeSel, align uint8, inPlace bool, seed uint64) {
		switch len(key) {
		case 16, 24, 32:
		default:
			t.Skip()
		}
		k, ivk := newSchedules(t, key)
		// sizeSel picks 512..4096 or, above 3, a single sector of any
		// multiple of 16 up to 4096+16.
		n, ss := int(batch%40)+1, 512<<(sizeSel%4)
		if sizeSel >= 4 {
			n, ss = 1, 16*(int(sizeSel)%257+1)
		}
		rng := mrand.New(mrand.NewPCG(seed, first))
		plain := make([]byte, n*ss)
		for i := range plain {
			plain[i] = byte(rng.Uint32())
		}
		want := make([]byte, len(plain))
		Generic.Encrypt(k, ivk, want, plain, first, ss)
		off := int(align % 16)
		for _, impl := range Implementations() {
			src := make([]byte, len(plain)+off)[off:]
			copy(src, plain)
			dst := src
			if !inPlace {
				dst = make([]byte, len(plain)+15-off)[15-off:]
			}
			impl.Encrypt(k, ivk, dst, src, first, ss)
			if !bytes.Equal(dst, want) {
				t.Fatalf("%s: encrypt (n %d, ss %d, in place %v) differs from generic", impl.Name, n, ss, inPlace)
			}
			copy(src, want)
			impl.Decrypt(k, ivk, dst, src, first, ss)
			if !bytes.Equal(dst, plain) {
				t.Fatalf("%s: decrypt (n %d, ss %d, in place %v) differs from the plaintext", impl.Name, n, ss, inPlace)
			}
		}
	})
}

// FuzzXTS compares every XTS implementation with the generic one on random
// keys, sector numbers, masks, batch sizes and alignments.
func FuzzXTS(f *testing.F) {
	f.Add(make([]byte, 32), uint64(0), uint8(1), uint8(0), uint8(0), false, false, uint64(1))
	f.Add(make([]byte, 48), uint64(1<<32-2), uint8(17), uint8(3), uint8(5), true, true, uint64(2))
	f.Add(make([]byte, 64), ^uint64(0), uint8(33), uint8(1), uint8(15), false, true, uint64(3))
	f.Fuzz(func(t *testing.T, key []byte, first uint64, batch, sizeSel, align uint8, inPlace, plain32 bool, seed uint64) {
		switch len(key) {
		case 32, 48, 64:
		default:
			t.Skip()
		}
		k, _ := NewSchedule(key[:len(key)/2])
		tk, _ := NewSchedule(key[len(key)/2:])
		mask := ^uint64(0)
		if plain32 {
			mask = 1<<32 - 1
		}
		n, ss := int(batch%40)+1, 512<<(sizeSel%4)
		rng := mrand.New(mrand.NewPCG(seed, first))
		plain := make([]byte, n*ss)
		for i := range plain {
			plain[i] = byte(rng.Uint32())
		}
		want := make([]byte, len(plain))
		GenericXTS.Encrypt(k, tk, want, plain, first, mask, ss)
		off := int(align % 16)
		for _, impl := range XTSImplementations() {
			src := make([]byte, len(plain)+off)[off:]
			copy(src, plain)
			dst := src
			if !inPlace {
				dst = make([]byte, len(plain)+15-off)[15-off:]
			}
			impl.Encrypt(k, tk, dst, src, first, mask, ss)
			if !bytes.Equal(dst, want) {
				t.Fatalf("%s: encrypt (n %d, ss %d, in place %v) differs from generic", impl.Name, n, ss, inPlace)
			}
			copy(src, want)
			impl.Decrypt(k, tk, dst, src, first, mask, ss)
			if !bytes.Equal(dst, plain) {
				t.Fatalf("%s: decrypt (n %d, ss %d, in place %v) differs from the plaintext", impl.Name, n, ss, inPlace)
			}
		}
	})
}
