package asm

import (
	"bytes"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/asm/secmem"
)

// accelerated returns the implementations other than Generic.
func accelerated() []Impl {
	var impls []Impl
	for _, impl := range Implementations() {
		if impl.Name != Generic.Name {
			impls = append(impls, impl)
		}
	}
	return impls
}

func newSchedules(t testing.TB, key []byte) (k, ivk *Schedule) {
	t.Helper()
	k, err := NewSchedule(key)
	if err != nil {
		t.Fatal(err)
	}
	// The IV key is always AES-256 in package essiv; any 32 bytes do here.
	salt := make([]byte, 32)
	for i := range salt {
		salt[i] = key[i%len(key)] ^ byte(i*37+1)
	}
	ivk, err = NewSchedule(salt)
	if err != nil {
		t.Fatal(err)
	}
	return k, ivk
}

// checkImpl runs impl and Generic on the same input, separate buffers at
// the given misalignment and in place, and fails on any difference.
func checkImpl(t *testing.T, impl Impl, k, ivk *Schedule, src []byte, first uint64, ss, align int) {
	t.Helper()
	n := len(src)
	want := make([]byte, n)
	Generic.Encrypt(k, ivk, want, src, first, ss)

	buf := make([]byte, n+align+16)
	dst := buf[align : align+n]
	impl.Encrypt(k, ivk, dst, src, first, ss)
	if !bytes.Equal(dst, want) {
		t.Fatalf("%s encrypt (separate, align %d) differs from generic at byte %d", impl.Name, align, diffIndex(dst, want))
	}
	if buf[align+n] != 0 || (align > 0 && buf[align-1] != 0) {
		t.Fatalf("%s encrypt wrote outside dst", impl.Name)
	}
	back := make([]byte, n)
	impl.Decrypt(k, ivk, back, dst, first, ss)
	if !bytes.Equal(back, src) {
		t.Fatalf("%s decrypt (separate) differs from the plaintext at byte %d", impl.Name, diffIndex(back, src))
	}

	inplace := buf[align : align+n]
	copy(inplace, src)
	impl.Encrypt(k, ivk, inplace, inplace, first, ss)
	if !bytes.Equal(inplace, want) {
		t.Fatalf("%s encrypt (in place) differs from generic at byte %d", impl.Name, diffIndex(inplace, want))
	}
	impl.Decrypt(k, ivk, inplace, inplace, first, ss)
	if !bytes.Equal(inplace, src) {
		t.Fatalf("%s decrypt (in place) differs from the plaintext at byte %d", impl.Name, diffIndex(inplace, src))
	}
	if buf[align+n] != 0 || (align > 0 && buf[align-1] != 0) {
		t.Fatalf("%s wrote outside the in-place buffer", impl.Name)
	}
}

func diffIndex(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestImplementationsList(t *testing.T) {
	impls := Implementations()
	if last := impls[len(impls)-1]; last.Name != Generic.Name {
		t.Fatalf("last implementation is %q, want generic", last.Name)
	}
	if Best().Name != impls[0].Name {
		t.Fatalf("Best() = %q, want %q", Best().Name, impls[0].Name)
	}
	seen := map[string]bool{}
	for _, impl := range impls {
		if seen[impl.Name] || impl.Encrypt == nil || impl.Decrypt == nil {
			t.Fatalf("bad implementation entry %q", impl.Name)
		}
		seen[impl.Name] = true
	}
	t.Logf("implementations: %v", seen)
}

func TestDifferentialBatches(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	firsts := []uint64{0, 1, 0xffff_ffff, 0x1_0000_0000, 1<<63 + 12345, ^uint64(0) - 3}
	for _, impl := range accelerated() {
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			rand.Read(key)
			k, ivk := newSchedules(t, key)
			for _, ss := range []int{512, 1024, 2048, 4096} {
				for n := 1; n <= 64; n++ {
					if ss != 512 && n > 20 && n%11 != 0 {
						continue
					}
					t.Run(fmt.Sprintf("%s/key%d/ss%d/n%d", impl.Name, keyLen*8, ss, n), func(t *testing.T) {
						src := make([]byte, n*ss+16)[n%16:][:n*ss]
						rand.Read(src)
						first := firsts[(n+ss/512)%len(firsts)]
						if n%3 == 0 {
							first = rng.Uint64()
						}
						checkImpl(t, impl, k, ivk, src, first, ss, (n*7+keyLen)%16)
					})
				}
			}
		}
	}
}

// Single-sector calls (essiv.Cipher.Encrypt) may use any multiple of 16.
func TestDifferentialOddSectorSizes(t *testing.T) {
	for _, impl := range accelerated() {
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			rand.Read(key)
			k, ivk := newSchedules(t, key)
			for ss := 16; ss <= 1040; ss += 16 {
				src := make([]byte, ss)
				rand.Read(src)
				checkImpl(t, impl, k, ivk, src, uint64(ss)*0x1_0000_0003, ss, ss/16%16)
			}
			// A few batches of non-power-of-two sectors, which the SectorFunc
			// contract allows (the sector number step is ss/512).
			for _, ss := range []int{48, 528, 1536, 4112} {
				for _, n := range []int{1, 2, 3, 9, 17} {
					src := make([]byte, n*ss)
					rand.Read(src)
					checkImpl(t, impl, k, ivk, src, 77, ss, n)
				}
			}
		}
	}
}

func TestZeroAllocs(t *testing.T) {
	key := make([]byte, 32)
	k, ivk := newSchedules(t, key)
	buf := make([]byte, 20*4096)
	for _, impl := range Implementations() {
		for _, ss := range []int{512, 4096} {
			if n := testing.AllocsPerRun(10, func() { impl.Encrypt(k, ivk, buf, buf, 3, ss) }); n != 0 {
				t.Errorf("%s encrypt ss %d: %v allocations", impl.Name, ss, n)
			}
			if n := testing.AllocsPerRun(10, func() { impl.Decrypt(k, ivk, buf, buf, 3, ss) }); n != 0 {
				t.Errorf("%s decrypt ss %d: %v allocations", impl.Name, ss, n)
			}
		}
	}
}

// The kernels keep no shared mutable state: concurrent calls with two
// different keys must give the same results as sequential ones.
func TestConcurrentUse(t *testing.T) {
	keys := [][]byte{make([]byte, 16), make([]byte, 32)}
	rand.Read(keys[0])
	rand.Read(keys[1])
	src := make([]byte, 24*512)
	rand.Read(src)
	for _, impl := range accelerated() {
		var wants [2][]byte
		var scheds [2][2]*Schedule
		for i, key := range keys {
			k, ivk := newSchedules(t, key)
			scheds[i] = [2]*Schedule{k, ivk}
			wants[i] = make([]byte, len(src))
			Generic.Encrypt(k, ivk, wants[i], src, 5, 512)
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8)
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				i := g % 2
				out := make([]byte, len(src))
				for range 50 {
					impl.Encrypt(scheds[i][0], scheds[i][1], out, src, 5, 512)
					if !bytes.Equal(out, wants[i]) {
						errs <- impl.Name + ": concurrent encrypt differs"
						return
					}
					impl.Decrypt(scheds[i][0], scheds[i][1], out, out, 5, 512)
					if !bytes.Equal(out, src) {
						errs <- impl.Name + ": concurrent decrypt differs"
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatal(e)
		}
	}
}

func TestScheduleClear(t *testing.T) {
	s, err := NewSchedule(bytes.Repeat([]byte{0xa5}, 32))
	if err != nil {
		t.Fatal(err)
	}
	if s.Rounds() != 14 {
		t.Fatalf("Rounds() = %d, want 14", s.Rounds())
	}
	// The round keys live in package secmem's memory (locked, out of
	// core dumps), which Clear wipes and returns.
	if runtime.GOOS == "linux" && !secmem.Owns(s.mem) {
		t.Error("the round keys are not in package secmem's memory")
	}
	mem := s.mem
	s.Clear()
	if s.enc != nil || s.dec != nil || secmem.Owns(mem) {
		t.Fatal("Clear left round keys behind")
	}
	for _, n := range []int{0, 15, 17, 33} {
		if _, err := NewSchedule(make([]byte, n)); err == nil {
			t.Errorf("NewSchedule(%d bytes) succeeded", n)
		}
	}
}
