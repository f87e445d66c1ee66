package header

import (
	"bytes"
	"runtime/debug"
	"syscall"
	"testing"

	"golang.org/x/crypto/argon2"
)

// TestArgon2MemoryReady: after readyArgon2Memory, x/crypto's argon2 takes
// almost none of its memory's page faults (they were taken by the lanes'
// goroutines before, in parallel), and argon2Key derives what x/crypto
// derives. Without the readying, every page of the KDF's memory faults
// in inside argon2: serially when the runtime clears a reused span, twice
// a page (a read of the zero page, then a write) on fresh ones.
func TestArgon2MemoryReady(t *testing.T) {
	const memory, threads = argon2ReadyMin, 2
	pages := argon2Bytes(memory, threads) / syscall.Getpagesize()
	faults := func() int64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt
	}
	pw, salt := []byte("password"), bytes.Repeat([]byte{2}, 32)
	// Earlier heap use, freed, as an unlock's parsing and cost estimate
	// leave it.
	for range 3 {
		clear(make([]byte, 8<<20))
	}
	// With collections off, the background scavenger stays idle: on a
	// loaded machine it returns some of the freed buffer's pages to the
	// OS while the test waits for a CPU between the readying and the
	// KDF's make (about 4000 pages a second), which is noise here.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	readyArgon2Memory(memory, threads)
	before := faults()
	want := argon2.IDKey(pw, salt, 1, memory, threads, 32)
	n := faults() - before
	t.Logf("%d page faults in argon2 over %d pages after readying", n, pages)
	if n > int64(pages/8) {
		t.Errorf("argon2 took %d page faults over %d pages of readied memory; want almost none", n, pages)
	}
	for _, kind := range []string{"argon2id", "argon2i"} {
		got := argon2Key(kind, pw, salt, 1, memory, threads, 32)
		if kind == "argon2i" {
			want = argon2.Key(pw, salt, 1, memory, threads, 32)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: argon2Key %x, x/crypto %x", kind, got, want)
		}
	}
}
