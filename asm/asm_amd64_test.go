//go:build !purego

package asm

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"testing"
)

// The assembly key schedule must match crypto/aes block for block, for
// every key size, in both directions.
func TestKeyScheduleMatchesCryptoAES(t *testing.T) {
	if !hasAESNI {
		t.Skip("no AES-NI")
	}
	for _, keyLen := range []int{16, 24, 32} {
		for range 200 {
			key := make([]byte, keyLen)
			rand.Read(key)
			s, err := NewSchedule(key)
			if err != nil {
				t.Fatal(err)
			}
			ref, _ := aes.NewCipher(key)
			var in, got, want [16]byte
			rand.Read(in[:])
			encryptBlockAsm(s.rounds, &s.enc[0], &got[0], &in[0])
			ref.Encrypt(want[:], in[:])
			if got != want {
				t.Fatalf("AES-%d key %x: encrypt %x, want %x", keyLen*8, key, got, want)
			}
			decryptBlockAsm(s.rounds, &s.dec[0], &got[0], &in[0])
			ref.Decrypt(want[:], in[:])
			if got != want {
				t.Fatalf("AES-%d key %x: decrypt %x, want %x", keyLen*8, key, got, want)
			}
		}
	}
}

// FIPS-197 appendix C vectors pin the byte order of the schedule.
func TestKeyScheduleFIPS197(t *testing.T) {
	if !hasAESNI {
		t.Skip("no AES-NI")
	}
	pt := []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	cases := []struct {
		keyLen int
		ct     string
	}{
		{16, "69c4e0d86a7b0430d8cdb78070b4c55a"},
		{24, "dda97ca4864cdfe06eaf70a0ec0d7191"},
		{32, "8ea2b7ca516745bfeafc49904b496089"},
	}
	for _, c := range cases {
		key := make([]byte, c.keyLen)
		for i := range key {
			key[i] = byte(i)
		}
		s, err := NewSchedule(key)
		if err != nil {
			t.Fatal(err)
		}
		var got [16]byte
		encryptBlockAsm(s.rounds, &s.enc[0], &got[0], &pt[0])
		want := make([]byte, 16)
		for i := range want {
			var b byte
			for _, ch := range c.ct[2*i : 2*i+2] {
				b <<= 4
				if ch >= 'a' {
					b |= byte(ch-'a') + 10
				} else {
					b |= byte(ch - '0')
				}
			}
			want[i] = b
		}
		if !bytes.Equal(got[:], want) {
			t.Errorf("AES-%d FIPS-197 C: got %x, want %x", c.keyLen*8, got, want)
		}
	}
}

func TestCPUFeatures(t *testing.T) {
	names := []string{}
	for _, impl := range archImpls() {
		names = append(names, impl.Name)
	}
	t.Logf("AES-NI %v, VAES %v, kernels %v", hasAESNI, hasVAES, names)
	if hasVAES && !hasAESNI {
		t.Fatal("VAES reported without AES-NI")
	}
}

// The skewed kernels are only picked for 2 and 4 KiB sectors; call them
// directly down to their minimum sector size, where the steady phase is
// empty, to pin their ramp logic.
func TestSkewedKernelsDirect(t *testing.T) {
	kernels := []struct {
		name         string
		f            laneFunc
		lanes, minSS int
		vaes         bool
	}{
		{"encSkew2Lanes8AESNI", encSkew2Lanes8AESNI, 8, 16 * (7*2 + 2), false},
		{"encSkew2Lanes16VAES", encSkew2Lanes16VAES, 16, 16 * (7*2 + 2), true},
		{"encSkew4Lanes16VAES", encSkew4Lanes16VAES, 16, 16 * (7*4 + 2), true},
		{"encSkew4Lanes8VAES", encSkew4Lanes8VAES, 8, 16 * (3*4 + 2), true},
	}
	for _, kern := range kernels {
		if kern.vaes && !hasVAES || !hasAESNI {
			continue
		}
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			rand.Read(key)
			k, ivk := newSchedules(t, key)
			for _, ss := range []int{kern.minSS, kern.minSS + 16, kern.minSS + 48, 1024, 2048, 4096} {
				src := make([]byte, kern.lanes*ss)
				rand.Read(src)
				step := uint64(ss / 512)
				first := uint64(1)<<40 - 3
				want := make([]byte, len(src))
				Generic.Encrypt(k, ivk, want, src, first, ss)
				got := make([]byte, len(src))
				kern.f(k.rounds, &k.enc[0], ivk.rounds, &ivk.enc[0], &got[0], &src[0], first, step, ss)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s AES-%d ss %d: differs from generic", kern.name, keyLen*8, ss)
				}
			}
		}
	}
}
