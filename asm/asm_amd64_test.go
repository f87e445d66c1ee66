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
