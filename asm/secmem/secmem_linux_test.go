//go:build linux

package secmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapping returns the /proc/self/smaps entry of the mapping that holds p:
// its Locked: size in kB and its VmFlags; ok is false if none holds it.
func mapping(t *testing.T, p unsafe.Pointer) (lockedKB int, flags []string, ok bool) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := uint64(uintptr(p))
	in := false
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, found := strings.Cut(fields[0], "-"); found && !strings.HasSuffix(fields[0], ":") {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			b, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = a <= addr && addr < b
				continue
			}
		}
		if !in {
			continue
		}
		switch fields[0] {
		case "Locked:":
			lockedKB, _ = strconv.Atoi(fields[1])
		case "VmFlags:":
			return lockedKB, fields[1:], true
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return 0, nil, false
}

func has(flags []string, f string) bool {
	for _, x := range flags {
		if x == f {
			return true
		}
	}
	return false
}

// canLock reports whether this thread may lock a page: CAP_IPC_LOCK, or a
// soft RLIMIT_MEMLOCK with room for one more page (roughly).
func canLock(t *testing.T) bool {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil {
		t.Fatal(err)
	}
	return l.Cur >= 64<<10 || capIPCLock(t)
}

func capIPCLock(t *testing.T) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	return data[0].Effective&(1<<unix.CAP_IPC_LOCK) != 0
}

// TestAllocLockedNotDumped: a secret lives in a mapping of its own that is
// locked (where the limit allows) and marked MADV_DONTDUMP ("dd"), and
// Free unmaps it.
func TestAllocLockedNotDumped(t *testing.T) {
	b := Alloc(64)
	if len(b) != 64 || !bytes.Equal(b, make([]byte, 64)) {
		t.Fatalf("Alloc(64) = %d bytes %x", len(b), b)
	}
	copy(b, "volume key")
	p := unsafe.Pointer(&b[0])
	kb, flags, ok := mapping(t, p)
	if !ok {
		t.Fatal("the allocation is in no mapping of /proc/self/smaps")
	}
	if !has(flags, "dd") {
		t.Errorf("VmFlags %v lack dd (MADV_DONTDUMP)", flags)
	}
	if canLock(t) {
		if !Locked(b) || kb == 0 || !has(flags, "lo") {
			t.Errorf("Locked %v, smaps Locked: %d kB, VmFlags %v; want locked", Locked(b), kb, flags)
		}
	} else {
		t.Logf("locking not allowed here; Locked %v", Locked(b))
	}
	if !Owns(b) {
		t.Error("Owns(b) is false")
	}
	Free(b)
	if _, _, ok := mapping(t, p); ok {
		t.Error("the mapping survives Free")
	}
	if Owns(b) {
		t.Error("Owns(b) after Free")
	}
}

// TestFreeClearsOthers: Free of a slice Alloc did not make clears it, and
// Free of a slice into an allocation's middle leaves the allocation.
func TestFreeClearsOthers(t *testing.T) {
	h := []byte("heap secret")
	Free(h)
	if !bytes.Equal(h, make([]byte, len(h))) {
		t.Errorf("heap slice after Free: %q", h)
	}
	b := Alloc(32)
	copy(b, "0123456789abcdef0123456789abcdef")
	Free(b[16:])
	if string(b[:16]) != "0123456789abcdef" || !bytes.Equal(b[16:], make([]byte, 16)) {
		t.Errorf("after Free(b[16:]): %q", b)
	}
	Free(b)
	Free(nil)
}

// TestLockRefused is the fallback: with RLIMIT_MEMLOCK at 0 and no
// CAP_IPC_LOCK, the lock is refused, and the memory still works, still out
// of dumps.
func TestLockRefused(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &old); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		// Capabilities belong to a thread: drop CAP_IPC_LOCK from this
		// one only, and let it end with the goroutine (no Unlock).
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_IPC_LOCK
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			done <- err
			return
		}
		zero := unix.Rlimit{Cur: 0, Max: old.Max}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &zero); err != nil {
			done <- err
			return
		}
		b := Alloc(64)
		unix.Setrlimit(unix.RLIMIT_MEMLOCK, &old)
		copy(b, "still works")
		_, flags, ok := mapping(t, unsafe.Pointer(&b[0]))
		switch {
		case Locked(b):
			done <- fmt.Errorf("locked with RLIMIT_MEMLOCK 0 and no CAP_IPC_LOCK")
		case string(b[:11]) != "still works":
			done <- fmt.Errorf("memory reads %q", b)
		case !ok || !has(flags, "dd"):
			done <- fmt.Errorf("mapping found %v, VmFlags %v: want dd", ok, flags)
		default:
			done <- nil
		}
		Free(b)
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHarden: the process is not dumpable afterwards, and what cryptimg
// reads of /proc/self (mountinfo, smaps, fd) stays readable to it.
func TestHarden(t *testing.T) {
	if err := Harden(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) })
	d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	if err != nil || d != 0 {
		t.Fatalf("PR_GET_DUMPABLE = %d, %v; want 0", d, err)
	}
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &l); err != nil || l.Cur != l.Max {
		t.Errorf("RLIMIT_MEMLOCK %+v, %v: soft limit not raised to the hard one", l, err)
	}
	for _, p := range []string{"/proc/self/mountinfo", "/proc/self/smaps", "/proc/self/status"} {
		if _, err := os.ReadFile(p); err != nil {
			t.Errorf("not dumpable: %v", err)
		}
	}
	if _, err := os.ReadDir("/proc/self/fd"); err != nil {
		t.Errorf("not dumpable: %v", err)
	}
}

// TestMaxRegions: past maxRegions live allocations, Alloc falls back to the
// Go heap instead of adding mappings.
func TestMaxRegions(t *testing.T) {
	var bs [][]byte
	defer func() {
		for _, b := range bs {
			Free(b)
		}
	}()
	mu.Lock()
	n := maxRegions - len(regions)
	mu.Unlock()
	for range n {
		bs = append(bs, Alloc(16))
	}
	if !Owns(bs[len(bs)-1]) {
		t.Fatal("allocation below the bound is not a mapping")
	}
	b := Alloc(16)
	bs = append(bs, b)
	if Owns(b) || len(b) != 16 {
		t.Fatalf("allocation past the bound: Owns %v, %d bytes", Owns(b), len(b))
	}
}
