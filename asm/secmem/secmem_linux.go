//go:build linux

package secmem

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// region is one allocation: the whole mapping, as unix.Mmap returned it.
type region struct {
	mem    []byte
	locked bool
}

var (
	mu      sync.Mutex
	regions = map[unsafe.Pointer]region{}
)

// maxRegions bounds the live allocations. A process holds a few dozen
// secrets at most; a caller that never frees (a test making thousands of
// ciphers) gets the Go heap past this point, rather than pushing the
// process towards vm.max_map_count (65530 by default), where the Go
// runtime's own next mapping would fail and kill it.
const maxRegions = 8192

func alloc(n int) []byte {
	if n <= 0 {
		return []byte{}
	}
	mu.Lock()
	full := len(regions) >= maxRegions
	mu.Unlock()
	if full {
		return make([]byte, n)
	}
	page := unix.Getpagesize()
	size := (n + page - 1) / page * page
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		// Out of address space or mappings: the Go heap is all that is
		// left, and Free still clears it.
		return make([]byte, n)
	}
	// Failures are quiet: MADV_DONTDUMP exists since Linux 3.4, and the
	// lock is refused over RLIMIT_MEMLOCK without CAP_IPC_LOCK, which is
	// what cryptsetup accepts too (the buffer works unlocked).
	unix.Madvise(mem, unix.MADV_DONTDUMP)
	r := region{mem: mem, locked: unix.Mlock(mem) == nil}
	mu.Lock()
	regions[unsafe.Pointer(&mem[0])] = r
	mu.Unlock()
	return mem[:n:n]
}

func free(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	mu.Lock()
	r, ok := regions[p]
	delete(regions, p)
	mu.Unlock()
	if !ok {
		clear(b)
		return
	}
	clear(r.mem)
	if r.locked {
		unix.Munlock(r.mem)
	}
	unix.Munmap(r.mem)
}

func locked(b []byte) bool {
	if cap(b) == 0 {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	return regions[unsafe.Pointer(unsafe.SliceData(b))].locked
}

func harden() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return err
	}
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err == nil && l.Cur < l.Max {
		l.Cur = l.Max
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &l)
	}
	return nil
}

func owns(b []byte) bool {
	if cap(b) == 0 {
		return false
	}
	mu.Lock()
	defer mu.Unlock()
	_, ok := regions[unsafe.Pointer(unsafe.SliceData(b))]
	return ok
}
