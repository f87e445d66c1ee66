package clevis

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"

	jose "github.com/go-jose/go-jose/v4"
)

// SSS is clevis's sss pin: a random AES-256-GCM key split by Shamir's
// secret sharing into shares, each encrypted by a child pin, any t of
// which recover it (src/pins/sss/sss.c, clevis-encrypt-sss.c).
type SSS struct {
	t    int
	pins []Pin
}

// keyBytes is the size of the key and of the prime (sss_generate(32, t)
// in clevis-encrypt-sss.c encrypt_frags).
const keyBytes = 32

// NewSSS is the sss pin with threshold t over pins (1 <= t <= len(pins),
// as clevis-encrypt-sss.c checks).
func NewSSS(t int, pins []Pin) (*SSS, error) {
	if t < 1 || t > len(pins) {
		return nil, fmt.Errorf("%w: sss: invalid threshold (required: 1 <= %d <= %d)", ErrConfig, t, len(pins))
	}
	return &SSS{t: t, pins: pins}, nil
}

// Name is "sss".
func (s *SSS) Name() string { return "sss" }

// sssClevis is the "clevis" member of an sss pin's protected header:
// {"pin":"sss","sss":{"jwe":[compact JWEs],"p":B64URL,"t":N}}; the
// coefficients are not kept (clevis-encrypt-sss.c main deletes "e").
type sssClevis struct {
	Pin string `json:"pin"`
	SSS struct {
		JWE []string `json:"jwe"`
		P   string   `json:"p"`
		T   int      `json:"t"`
	} `json:"sss"`
}

// Encrypt splits a fresh key among the child pins and encrypts plaintext
// with it as clevis-encrypt-sss does: a new 256-bit safe prime p, t random
// coefficients in [0, p) of which the first, as 32 bytes, is the
// AES-256-GCM key; each child pin encrypts one point x ‖ y (32 bytes each,
// y the polynomial at a random x); the outer JWE is "dir" + A256GCM with
// the child JWEs, p and t in its protected header. rnd (nil: crypto/rand)
// gives the prime, coefficients and points; go-jose draws the IVs.
func (s *SSS) Encrypt(plaintext []byte, rnd io.Reader) (string, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	p, err := safePrime(rnd, keyBytes*8)
	if err != nil {
		return "", err
	}
	e := make([]*big.Int, s.t)
	defer func() {
		for _, c := range e {
			if c != nil {
				clear(c.Bits())
			}
		}
	}()
	for i := range e {
		if e[i], err = rand.Int(rnd, p); err != nil {
			return "", err
		}
	}
	var c sssClevis
	c.Pin, c.SSS.T = "sss", s.t
	c.SSS.P = base64.RawURLEncoding.EncodeToString(fixed(p, keyBytes))
	c.SSS.JWE = []string{}
	xs := map[string]bool{}
	for _, pin := range s.pins {
		pt, x, err := share(rnd, p, e, xs)
		if err != nil {
			return "", err
		}
		xs[x] = true
		jwe, err := pin.Encrypt(pt, rnd)
		clear(pt)
		if err != nil {
			return "", fmt.Errorf("sss: %s pin: %w", pin.Name(), err)
		}
		c.SSS.JWE = append(c.SSS.JWE, jwe)
	}
	cj, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	key := fixed(e[0], keyBytes)
	defer clear(key)
	opts := (&jose.EncrypterOptions{}).WithHeader("clevis", json.RawMessage(cj))
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.DIRECT, Key: key}, opts)
	if err != nil {
		return "", err
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}

// share is one share: a random x in [0, p) and y = Σ e[i]·x^i mod p, as
// x ‖ y in 32 bytes each (sss.c sss_point). An x already given (xs) or
// zero is drawn again: two equal x would make the shares useless together,
// and x = 0 would hand out the key (clevis leaves both to chance, 2^-256).
func share(rnd io.Reader, p *big.Int, e []*big.Int, xs map[string]bool) ([]byte, string, error) {
	var x *big.Int
	for {
		var err error
		if x, err = rand.Int(rnd, p); err != nil {
			return nil, "", err
		}
		if x.Sign() != 0 && !xs[x.String()] {
			break
		}
	}
	y, xi, tmp := new(big.Int), big.NewInt(1), new(big.Int)
	for i, c := range e {
		if i > 0 {
			xi.Mul(xi, x).Mod(xi, p)
		}
		tmp.Mul(c, xi).Mod(tmp, p)
		y.Add(y, tmp).Mod(y, p)
	}
	out := append(fixed(x, keyBytes), fixed(y, keyBytes)...)
	id := x.String()
	for _, n := range []*big.Int{x, y, xi, tmp} {
		clear(n.Bits())
	}
	return out, id, nil
}

// recoverKey interpolates the shares' polynomial at 0 (Lagrange, mod p),
// as sss.c sss_recover: the key, in len(p) bytes.
func recoverKey(p *big.Int, size int, shares [][]byte) ([]byte, error) {
	k := new(big.Int)
	for i, si := range shares {
		xo, yo := new(big.Int).SetBytes(si[:size]), new(big.Int).SetBytes(si[size:])
		acc := big.NewInt(1)
		for j, sj := range shares {
			if i == j {
				continue
			}
			xi := new(big.Int).SetBytes(sj[:size])
			num := new(big.Int).Sub(p, xi) // 0 - xi
			den := new(big.Int).Sub(xo, xi)
			den.Mod(den, p)
			if den.ModInverse(den, p) == nil {
				return nil, errors.New("sss: two shares have the same x")
			}
			acc.Mul(acc, num).Mod(acc, p)
			acc.Mul(acc, den).Mod(acc, p)
		}
		acc.Mul(acc, yo).Mod(acc, p)
		k.Add(k, acc).Mod(k, p)
		clear(yo.Bits())
		clear(acc.Bits())
	}
	out := fixed(k, size)
	clear(k.Bits())
	return out, nil
}

// fixed is n big-endian in size bytes (bn_encode in sss.c).
func fixed(n *big.Int, size int) []byte {
	return n.FillBytes(make([]byte, size))
}

// safePrime returns a random safe prime p = 2q+1 of bits bits (q prime
// too), as OpenSSL's BN_generate_prime_ex(p, bits, safe=1, ...) in sss.c
// sss_generate. Candidates are sieved by small primes for both q and p
// before the probabilistic tests.
func safePrime(rnd io.Reader, bits int) (*big.Int, error) {
	small := smallPrimes()
	for {
		q, err := rand.Int(rnd, new(big.Int).Lsh(big.NewInt(1), uint(bits-2)))
		if err != nil {
			return nil, err
		}
		q.SetBit(q, bits-2, 1).SetBit(q, 0, 1) // q has bits-1 bits; p has bits
		res := make([]uint64, len(small))
		for i, r := range small {
			res[i] = new(big.Int).Mod(q, new(big.Int).SetUint64(r)).Uint64()
		}
		for step := uint64(0); step < 1<<16; step += 2 {
			ok := true
			for i, r := range small {
				m := (res[i] + step) % r
				// q ≡ 0 (q composite) or 2q+1 ≡ 0 (p composite).
				if m == 0 || m == (r-1)/2 {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			c := new(big.Int).Add(q, new(big.Int).SetUint64(step))
			if c.BitLen() != bits-1 {
				break
			}
			p := new(big.Int).Lsh(c, 1)
			p.SetBit(p, 0, 1)
			if p.ProbablyPrime(1) && c.ProbablyPrime(20) && p.ProbablyPrime(20) {
				return p, nil
			}
		}
	}
}

// smallPrimes are the odd primes below 2000, for the sieve.
func smallPrimes() []uint64 {
	var out []uint64
	for n := uint64(3); n < 2000; n += 2 {
		prime := true
		for _, r := range out {
			if r*r > n {
				break
			}
			if n%r == 0 {
				prime = false
				break
			}
		}
		if prime {
			out = append(out, n)
		}
	}
	return out
}
