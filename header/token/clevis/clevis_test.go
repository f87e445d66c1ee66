package clevis

import (
	"crypto/rand"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
)

// Any t of n shares give the key back; fewer give something else; the
// prime is a 256-bit safe prime.
func TestShamir(t *testing.T) {
	p, err := safePrime(rand.Reader, 256)
	if err != nil {
		t.Fatal(err)
	}
	q := new(big.Int).Rsh(p, 1)
	if p.BitLen() != 256 || !p.ProbablyPrime(20) || !q.ProbablyPrime(20) {
		t.Fatalf("p = %x is not a 256-bit safe prime", p)
	}
	const n, th = 4, 3
	e := make([]*big.Int, th)
	for i := range e {
		e[i], _ = rand.Int(rand.Reader, p)
	}
	xs := map[string]bool{}
	var shares [][]byte
	for range n {
		s, x, err := share(rand.Reader, p, e, xs)
		if err != nil {
			t.Fatal(err)
		}
		xs[x] = true
		shares = append(shares, s)
	}
	want := fixed(e[0], keyBytes)
	for _, pick := range [][]int{{0, 1, 2}, {1, 2, 3}, {0, 2, 3}, {3, 1, 0}} {
		var sub [][]byte
		for _, i := range pick {
			sub = append(sub, shares[i])
		}
		k, err := recoverKey(p, keyBytes, sub)
		if err != nil || string(k) != string(want) {
			t.Fatalf("shares %v: %x, %v; want %x", pick, k, err, want)
		}
	}
	if k, _ := recoverKey(p, keyBytes, shares[:2]); string(k) == string(want) {
		t.Fatal("two shares of a threshold-3 split recovered the key")
	}
}

func TestParseConfigRefuses(t *testing.T) {
	for _, cfg := range []string{
		`{"url":"http://x"}`, // no adv
		`{"t":1,"pins":{"tpm2":{}}}`,
		`{"t":3,"pins":{"sss":{"t":1,"pins":{"tang":{"url":"http://x","adv":{}}}}}}`,
		`[]`,
	} {
		if _, err := ParseConfig([]byte(cfg), os.ReadFile); !errors.Is(err, ErrConfig) && !errors.Is(err, ErrAdvertisement) {
			t.Errorf("ParseConfig(%s): %v, want a refusal", cfg, err)
		}
	}
}

func TestNewPassphrase(t *testing.T) {
	p, err := NewPassphrase(nil)
	if err != nil || len(p) != 54 || strings.ContainsAny(string(p), "+/=") {
		t.Fatalf("NewPassphrase: %q, %v; want 54 base64url characters", p, err)
	}
}
