package asm

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"sync"
	"testing"
)

func TestSHA256ImplementationsList(t *testing.T) {
	impls := SHA256Implementations()
	if last := impls[len(impls)-1]; last.Name != GenericSHA256.Name || last.Lanes != 1 {
		t.Fatalf("last implementation is %q with %d lanes, want generic with 1", last.Name, last.Lanes)
	}
	if BestSHA256().Name != impls[0].Name {
		t.Fatalf("BestSHA256() = %q, want %q", BestSHA256().Name, impls[0].Name)
	}
	seen := map[string]bool{}
	for _, impl := range impls {
		if seen[impl.Name] || impl.Blocks == nil || impl.HMAC == nil || impl.Lanes < 1 || impl.Lanes > sha256Lanes {
			t.Fatalf("bad implementation entry %q", impl.Name)
		}
		seen[impl.Name] = true
	}
	t.Logf("SHA-256 implementations: %v", seen)
}

// iroot returns floor(n^(1/k)).
func iroot(n *big.Int, k int) *big.Int {
	x := new(big.Int).Lsh(big.NewInt(1), uint(n.BitLen()/k+1)) // > the root
	kk := big.NewInt(int64(k))
	for {
		// y = ((k-1)x + n/x^(k-1)) / k
		p := new(big.Int).Exp(x, big.NewInt(int64(k-1)), nil)
		y := new(big.Int).Quo(n, p)
		y.Add(y, new(big.Int).Mul(x, big.NewInt(int64(k-1))))
		y.Quo(y, kk)
		if y.Cmp(x) >= 0 {
			return x
		}
		x = y
	}
}

// The constants are what FIPS 180-4 defines them to be: the first 32 bits
// of the fractional parts of the cube roots (K) and square roots (H(0)) of
// the first primes.
func TestSHA256Constants(t *testing.T) {
	var primes []int64
	for n := int64(2); len(primes) < 64; n++ {
		prime := true
		for _, p := range primes {
			if n%p == 0 {
				prime = false
				break
			}
		}
		if prime {
			primes = append(primes, n)
		}
	}
	frac := func(p int64, k int) uint32 {
		// floor(p^(1/k) * 2^32) = floor((p * 2^(32k))^(1/k)).
		n := new(big.Int).Lsh(big.NewInt(p), uint(32*k))
		return uint32(iroot(n, k).Uint64())
	}
	for i, p := range primes {
		if got, want := sha256K[i], frac(p, 3); got != want {
			t.Errorf("K%d = %#08x, want %#08x", i, got, want)
		}
	}
	for i, p := range primes[:8] {
		if got, want := sha256IV[i], frac(p, 2); got != want {
			t.Errorf("H0[%d] = %#08x, want %#08x", i, got, want)
		}
	}
	if SHA256IV() != sha256IV {
		t.Error("SHA256IV() differs from sha256IV")
	}
}

// sha256Pad returns msg followed by SHA-256's padding (FIPS 180-4 section
// 5.1.1) for a message of prefix+len(msg) bytes.
func sha256Pad(msg []byte, prefix int) []byte {
	l := uint64(prefix+len(msg)) * 8
	b := append(bytes.Clone(msg), 0x80)
	for (len(b)+prefix)%64 != 56 {
		b = append(b, 0)
	}
	return binary.BigEndian.AppendUint64(b, l)
}

func digestOf(h SHA256State) []byte {
	b := make([]byte, 32)
	putDigest(b, &h)
	return b
}

// The generic compression, run over a padded message from the IV, gives
// crypto/sha256's digest, for every length around the block boundaries.
func TestSHA256GenericMatchesStdlib(t *testing.T) {
	msg := make([]byte, 300)
	rand.Read(msg)
	for n := 0; n <= len(msg); n++ {
		h := SHA256IV()
		sha256BlocksGeneric(&h, sha256Pad(msg[:n], 0))
		want := sha256.Sum256(msg[:n])
		if got := digestOf(h); !bytes.Equal(got, want[:]) {
			t.Fatalf("length %d: digest %x, want %x", n, got, want)
		}
	}
	// The FIPS 180-4 example "abc" (and its appendix's two-block one).
	for _, c := range []struct{ msg, digest string }{
		{"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
		{"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
	} {
		h := SHA256IV()
		sha256BlocksGeneric(&h, sha256Pad([]byte(c.msg), 0))
		if got := fmt.Sprintf("%x", digestOf(h)); got != c.digest {
			t.Errorf("SHA-256(%q) = %s, want %s", c.msg, got, c.digest)
		}
	}
}

// Blocks of every implementation matches the generic compression lane by
// lane, for every lane count up to three groups of the driver and from
// random chaining values and misaligned buffers.
func TestSHA256BlocksDifferential(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	for _, impl := range SHA256Implementations() {
		for lanes := 0; lanes <= 3*sha256Lanes+1; lanes++ {
			for _, nb := range []int{0, 1, 2, 3, 8, 15, 16, 17, 65} {
				h := make([]SHA256State, lanes)
				want := make([]SHA256State, lanes)
				blocks := make([][]byte, lanes)
				for j := range lanes {
					for w := range h[j] {
						h[j][w] = rng.Uint32()
					}
					want[j] = h[j]
					off := rng.IntN(16)
					blocks[j] = make([]byte, off+nb*64)[off:]
					rand.Read(blocks[j])
					sha256BlocksGeneric(&want[j], blocks[j])
				}
				impl.Blocks(h, blocks)
				for j := range lanes {
					if h[j] != want[j] {
						t.Fatalf("%s: %d lanes, %d blocks: lane %d differs from generic", impl.Name, lanes, nb, j)
					}
				}
			}
		}
	}
}

func TestSHA256BlocksMisuse(t *testing.T) {
	for _, impl := range SHA256Implementations() {
		for name, f := range map[string]func(){
			"lane count":   func() { impl.Blocks(make([]SHA256State, 2), make([][]byte, 1)) },
			"partial":      func() { impl.Blocks(make([]SHA256State, 1), [][]byte{make([]byte, 65)}) },
			"uneven lanes": func() { impl.Blocks(make([]SHA256State, 2), [][]byte{make([]byte, 64), make([]byte, 128)}) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: Blocks with a bad %s did not panic", impl.Name, name)
					}
				}()
				f()
			}()
		}
	}
}

func newHMACKey(key []byte) *HMACSHA256Key {
	k := new(HMACSHA256Key)
	k.Init(key)
	return k
}

// refTags is crypto/hmac over each aad_i || msg_i.
func refTags(key, aads, msgs []byte, n int) []byte {
	var tags []byte
	if n == 0 {
		return tags
	}
	a, m := len(aads)/n, len(msgs)/n
	h := hmac.New(sha256.New, key)
	for i := range n {
		h.Reset()
		h.Write(aads[i*a : (i+1)*a])
		h.Write(msgs[i*m : (i+1)*m])
		tags = h.Sum(tags)
	}
	return tags
}

// checkHMAC runs impl on n messages of msgSize bytes with a-byte
// associated data each, at the given misalignment, and compares with
// crypto/hmac; it also checks that nothing past the tags is written.
func checkHMAC(t *testing.T, impl SHA256Impl, key []byte, n, a, msgSize, align int) {
	t.Helper()
	k := newHMACKey(key)
	aads := make([]byte, align+n*a)[align:]
	msgs := make([]byte, align+n*msgSize)[align:]
	rand.Read(aads)
	rand.Read(msgs)
	want := refTags(key, aads, msgs, n)
	buf := make([]byte, align+n*32+8)
	tags := buf[align : align+n*32]
	aadsCopy, msgsCopy := bytes.Clone(aads), bytes.Clone(msgs)
	impl.HMAC(k, tags, aads, msgs, msgSize)
	if !bytes.Equal(tags, want) {
		for i := 0; i < n; i++ {
			if !bytes.Equal(tags[32*i:32*i+32], want[32*i:32*i+32]) {
				t.Fatalf("%s: key %d bytes, %d messages of %d+%d bytes: tag %d differs from crypto/hmac", impl.Name, len(key), n, a, msgSize, i)
			}
		}
	}
	if !bytes.Equal(buf[align+n*32:], make([]byte, 8)) || !bytes.Equal(buf[:align], make([]byte, align)) {
		t.Fatalf("%s: wrote outside the tags", impl.Name)
	}
	if !bytes.Equal(aads, aadsCopy) || !bytes.Equal(msgs, msgsCopy) {
		t.Fatalf("%s: modified its input", impl.Name)
	}
}

// The sector shapes: 24-byte records and 512- or 4096-byte sectors, for
// message counts that are and are not multiples of the lanes.
func TestHMACSHA256Sectors(t *testing.T) {
	for _, impl := range SHA256Implementations() {
		for _, keyLen := range []int{32, 0, 64, 65, 200} {
			key := make([]byte, keyLen)
			rand.Read(key)
			for _, ss := range []int{512, 4096} {
				for n := 1; n <= 33; n++ {
					if ss == 4096 && n > 9 && n%8 != 1 {
						continue
					}
					checkHMAC(t, impl, key, n, 24, ss, n%7)
				}
			}
		}
	}
}

// Other shapes: every split of the associated data and message around the
// block boundary and the padding's 55/56-byte edge, which the sector sizes
// never reach.
func TestHMACSHA256Shapes(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	aadSizes := []int{0, 1, 8, 16, 24, 39, 40, 55, 56, 63, 64, 65, 100, 128, 130}
	msgSizes := []int{1, 2, 7, 16, 23, 24, 31, 32, 39, 40, 41, 47, 48, 55, 56, 63, 64, 65, 80, 119, 120, 127, 128, 129, 200, 1000}
	for _, impl := range SHA256Implementations() {
		for _, a := range aadSizes {
			for _, m := range msgSizes {
				for _, n := range []int{1, 2, 3, 5} {
					checkHMAC(t, impl, key, n, a, m, (a+m)%5)
				}
			}
		}
	}
}

// Random keys, shapes and counts, against crypto/hmac and against generic.
func TestHMACSHA256Random(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(5, 6))
	for range 300 {
		key := make([]byte, rng.IntN(100))
		rand.Read(key)
		n, a, m := 1+rng.IntN(12), rng.IntN(80), 1+rng.IntN(700)
		for _, impl := range SHA256Implementations() {
			checkHMAC(t, impl, key, n, a, m, rng.IntN(16))
		}
	}
}

func TestHMACSHA256Empty(t *testing.T) {
	k := newHMACKey([]byte("key"))
	for _, impl := range SHA256Implementations() {
		impl.HMAC(k, nil, nil, nil, 512)
		impl.HMAC(k, nil, nil, make([]byte, 0, 512), 512)
	}
}

func TestHMACSHA256Misuse(t *testing.T) {
	k := newHMACKey([]byte("key"))
	cleared := newHMACKey([]byte("key"))
	cleared.Clear()
	tags := make([]byte, 64)
	for _, impl := range SHA256Implementations() {
		for name, f := range map[string]func(){
			"uninitialized key": func() { impl.HMAC(new(HMACSHA256Key), tags, nil, make([]byte, 64), 64) },
			"cleared key":       func() { impl.HMAC(cleared, tags, nil, make([]byte, 64), 64) },
			"message size 0":    func() { impl.HMAC(k, tags, nil, nil, 0) },
			"partial message":   func() { impl.HMAC(k, tags, nil, make([]byte, 100), 64) },
			"uneven aad":        func() { impl.HMAC(k, tags, make([]byte, 3), make([]byte, 128), 64) },
			"aad, no messages":  func() { impl.HMAC(k, tags, make([]byte, 3), nil, 64) },
			"short tags":        func() { impl.HMAC(k, tags[:63], nil, make([]byte, 128), 64) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: HMAC with %s did not panic", impl.Name, name)
					}
				}()
				f()
			}()
		}
	}
}

func TestHMACSHA256KeyClear(t *testing.T) {
	k := newHMACKey(bytes.Repeat([]byte{0xa5}, 32))
	if k.inner == (SHA256State{}) || k.outer == (SHA256State{}) || k.inner == k.outer {
		t.Fatal("Init left the states unset")
	}
	k.Clear()
	if k.inner != (SHA256State{}) || k.outer != (SHA256State{}) || k.set {
		t.Fatal("Clear left key material behind")
	}
}

func TestHMACSHA256ZeroAllocs(t *testing.T) {
	k := newHMACKey(make([]byte, 32))
	for _, impl := range SHA256Implementations() {
		for _, ss := range []int{512, 4096} {
			const n = 13
			msgs, aads, tags := make([]byte, n*ss), make([]byte, n*24), make([]byte, n*32)
			if a := testing.AllocsPerRun(10, func() { impl.HMAC(k, tags, aads, msgs, ss) }); a != 0 {
				t.Errorf("%s ss %d: %v allocations", impl.Name, ss, a)
			}
		}
	}
}

// The kernels keep no shared state: concurrent calls with two keys give
// the sequential results.
func TestHMACSHA256Concurrent(t *testing.T) {
	keys := [2]*HMACSHA256Key{newHMACKey([]byte("one")), newHMACKey([]byte("two"))}
	const n = 11
	msgs, aads := make([]byte, n*512), make([]byte, n*24)
	rand.Read(msgs)
	rand.Read(aads)
	for _, impl := range SHA256Implementations() {
		var want [2][]byte
		for i := range want {
			want[i] = refTags([]byte([]string{"one", "two"}[i]), aads, msgs, n)
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for g := range 8 {
			wg.Go(func() {
				tags := make([]byte, n*32)
				for range 50 {
					impl.HMAC(keys[g%2], tags, aads, msgs, 512)
					if !bytes.Equal(tags, want[g%2]) {
						errs <- impl.Name + ": concurrent tags differ"
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
}
