package header

// Running argon2 on memory the process has already touched.
//
// golang.org/x/crypto/argon2 allocates its whole memory with one make and
// then fills it with one goroutine per lane. Left alone, the first touch
// of that memory is slow in one of two ways, both measured on a keyslot
// cryptsetup's --iter-time 1000 chose on a 2-core machine (4 passes over
// 511522 KiB, 2 lanes):
//
//   - When the allocation overlaps heap pages used before (anything
//     allocated and freed earlier in the process), the runtime clears the
//     whole span before make returns, in the calling goroutine: every page
//     faults in there, one after the other, before any lane starts (about
//     0.2 s of CPU, all of it on the critical path).
//   - On fresh pages, each lane's first pass XORs into its output block
//     before writing it, so the first touch of a page is a read: the
//     kernel maps the shared zero page, then the write faults again and
//     replaces it, with a TLB shootdown across the process's CPUs. Two
//     faults a page: 263 000 faults and 0.59 s of system time against
//     cryptsetup's 128 000 and 0.33 s.
//
// readyArgon2Memory avoids both: it returns the free heap to the OS, so
// that a buffer of the KDF's size comes from pages the runtime knows are
// zero (no clearing), writes one byte of each page from one goroutine a
// lane or a CPU, whichever are more (one fault a page, spread over the
// CPUs; cryptsetup's lanes take the same faults in their first pass), and
// frees it with a collection. The KDF's make, the next allocation of that
// size, then takes the same pages: the page allocator gives the lowest
// free run that fits, and nothing else is large enough. The runtime clears
// them again, now without a fault (about 25 ms for 500 MiB). Peak memory
// stays one copy: the buffer is collected before the KDF allocates. The
// runtime's background scavenger may return a few of the freed pages to
// the OS before the make (a few thousand pages a second); those fault
// again, in the clearing.

import (
	"os"
	"runtime"
	"runtime/debug"
	"sync"

	"golang.org/x/crypto/argon2"
)

// argon2ReadyMin is the memory in KiB from which argon2Key readies the
// heap first; below it the first touches cost little.
const argon2ReadyMin = 32 << 10

// argon2Key is argon2id (kind "argon2id") or argon2i (otherwise) of
// passphrase, run on readied memory.
func argon2Key(kind string, passphrase, salt []byte, passes, memory, threads, keyLen uint32) []byte {
	if memory >= argon2ReadyMin {
		readyArgon2Memory(memory, threads)
	}
	if kind == "argon2id" {
		return argon2.IDKey(passphrase, salt, passes, memory, uint8(threads), keyLen)
	}
	return argon2.Key(passphrase, salt, passes, memory, uint8(threads), keyLen)
}

// readyArgon2Memory leaves the pages of an argon2 run over memory KiB on
// threads lanes faulted in and free in the heap (see the top of the file).
func readyArgon2Memory(memory, threads uint32) {
	debug.FreeOSMemory()
	// One goroutine a lane at least, as the lanes would take the faults;
	// more where there are more CPUs, which the KDF's lanes cannot use.
	touchPages(argon2Bytes(memory, threads), max(int(threads), min(runtime.GOMAXPROCS(0), 16), 1))
	runtime.GC() // the buffer is dead: this frees its span
}

// argon2Bytes is the size of x/crypto's allocation for memory KiB on
// threads lanes: the memory rounded down to whole sync points of every
// lane (RFC 9106 section 3.2), at least two a lane.
func argon2Bytes(memory, threads uint32) int {
	const syncPoints = 4
	threads = max(threads, 1)
	m := memory / (syncPoints * threads) * (syncPoints * threads)
	m = max(m, 2*syncPoints*threads)
	return int(m) << 10
}

// touchPages allocates size bytes and writes a byte of each page of them
// from parts goroutines, each over its own stretch.
//
//go:noinline
func touchPages(size, parts int) {
	buf := make([]byte, size)
	page := max(os.Getpagesize(), 1)
	var wg sync.WaitGroup
	per := (size/parts + page - 1) / page * page
	for off := 0; off < size; off += per {
		part := buf[off:min(off+per, size)]
		wg.Go(func() {
			for i := 0; i < len(part); i += page {
				part[i] = 1
			}
		})
	}
	wg.Wait()
}
