package derive

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/asm/secmem"
)

var master = bytes.Repeat([]byte{0x5a, 0xa5, 0x3c}, 22) // 66 bytes

const uuid = "9c7d9b9e-3f7a-4f0e-8d1f-5b2a6c4e1d00"

// stdlib is the construction through crypto/hkdf.
func stdlib(t testing.TB, master []byte, uuid string, n int) []byte {
	k, err := hkdf.Key(sha512.New, master, []byte(Salt), string(Info(nil, uuid, n)), n)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestMatchesStdlib: every key size a LUKS header can take, and the
// multi-block ones, equal crypto/hkdf's HKDF-SHA512 with the documented
// salt and info.
func TestMatchesStdlib(t *testing.T) {
	for _, mk := range [][]byte{master, bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 200)} {
		m, err := New(mk)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{16, 32, 48, 63, 64, 65, 96, 128, 200, MaxKeyBytes} {
			got, err := m.VolumeKey(uuid, n)
			if err != nil {
				t.Fatal(err)
			}
			if want := stdlib(t, mk, uuid, n); !bytes.Equal(got, want) {
				t.Fatalf("master %d bytes, key %d bytes: %x, want %x", len(mk), n, got, want)
			}
		}
	}
}

// TestKnownAnswer pins the construction: a change of salt, label or info
// layout would orphan every key a key server derived.
func TestKnownAnswer(t *testing.T) {
	m, _ := New(bytes.Repeat([]byte{0x11}, 32))
	got, _ := m.VolumeKey("00000000-0000-4000-8000-000000000000", 64)
	// Computed once with crypto/hkdf (TestMatchesStdlib checks the two agree).
	want := hex.EncodeToString(stdlib(t, bytes.Repeat([]byte{0x11}, 32), "00000000-0000-4000-8000-000000000000", 64))
	if hex.EncodeToString(got) != want || want != knownAnswer {
		t.Fatalf("derived %x\nstdlib  %s\npinned  %s", got, want, knownAnswer)
	}
}

// TestSeparation: another UUID, key size or master gives an unrelated key.
func TestSeparation(t *testing.T) {
	m, _ := New(master)
	a, _ := m.VolumeKey(uuid, 64)
	b, _ := m.VolumeKey("9c7d9b9e-3f7a-4f0e-8d1f-5b2a6c4e1d01", 64)
	c, _ := m.VolumeKey(uuid, 32)
	m2, _ := New(append(bytes.Clone(master), 0))
	d, _ := m2.VolumeKey(uuid, 64)
	if bytes.Equal(a, b) || bytes.Equal(a[:32], c) || bytes.Equal(a, d) {
		t.Fatal("keys of different UUIDs, sizes or masters collide")
	}
}

func TestRefusals(t *testing.T) {
	if _, err := New(make([]byte, MinMasterBytes-1)); !errors.Is(err, ErrShortMaster) {
		t.Fatalf("short master: %v", err)
	}
	m, _ := New(master)
	for _, n := range []int{0, MaxKeyBytes + 1} {
		if _, err := m.VolumeKey(uuid, n); !errors.Is(err, ErrKeySize) {
			t.Fatalf("key size %d: %v", n, err)
		}
	}
	// The PRK's states live in package secmem's memory (locked, out of
	// core dumps), which Clear wipes and returns.
	inner, outer := m.inner, m.outer
	if runtime.GOOS == "linux" && (!secmem.Owns(inner) || !secmem.Owns(outer)) {
		t.Error("the PRK states are not in package secmem's memory")
	}
	m.Clear()
	if secmem.Owns(inner) || secmem.Owns(outer) {
		t.Error("Clear left the PRK states' memory behind")
	}
	if _, err := m.VolumeKey(uuid, 32); err == nil {
		t.Fatal("a cleared master still derives")
	}
}

// TestConcurrent derives from many goroutines at once (run with -race).
func TestConcurrent(t *testing.T) {
	m, _ := New(master)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				u := fmt.Sprintf("9c7d9b9e-3f7a-4f0e-8d1f-%012d", g*1000+i)
				got, _ := m.VolumeKey(u, 64)
				if want := stdlib(t, master, u, 64); !bytes.Equal(got, want) {
					t.Errorf("goroutine %d key %d differs", g, i)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestNoAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects under the race detector")
	}
	m, _ := New(master)
	out := make([]byte, 64)
	m.DeriveInto(out, uuid)
	if n := testing.AllocsPerRun(100, func() { m.DeriveInto(out, uuid) }); n != 0 {
		t.Fatalf("%v allocations per key", n)
	}
}

// BenchmarkDerive and BenchmarkStdlibHKDF measure keys per second per core
// (one goroutine), 64-byte keys: go test -run '^$' -bench 'Derive|Stdlib' ./header/derive
func BenchmarkDerive(b *testing.B) {
	m, _ := New(master)
	out := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		m.DeriveInto(out, uuid)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

func BenchmarkStdlibHKDF(b *testing.B) {
	info := string(Info(nil, uuid, 64))
	b.ReportAllocs()
	for b.Loop() {
		hkdf.Key(sha512.New, master, []byte(Salt), info, 64)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// knownAnswer is the 64-byte key of master 0x11×32 and UUID
// 00000000-0000-4000-8000-000000000000 under the construction of the
// package doc, as crypto/hkdf computed it when the construction was fixed.
const knownAnswer = "9610a084ec64b2ce068172ea5068d7c5d2fa769ca53e60431cd7a73dafa74706da56393cd1990b62a9b0c62a11ccc9eef1902e9379c99cdadaec62e9b41850d5"
