package filelock

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestParseLocks reads /proc/locks lines: flock locks held on the inode,
// not the ones waited for ("->"), not POSIX, OFD or lease locks, not
// other inodes.
func TestParseLocks(t *testing.T) {
	const locks = `1: FLOCK  ADVISORY  WRITE 4242 fe:00:9980169 0 EOF
1: -> FLOCK  ADVISORY  READ 4343 fe:00:9980169 0 EOF
2: POSIX  ADVISORY  WRITE 77 fe:00:9980169 0 EOF
3: OFDLCK ADVISORY  READ -1 fe:00:9980169 100 101
4: LEASE  ACTIVE    READ 88 fe:00:9980169 0 EOF
5: FLOCK  ADVISORY  READ 99 fe:00:123 0 EOF
6: FLOCK  ADVISORY  READ 100 103:0a:9980169 0 EOF
garbage
`
	got := parseLocks(strings.NewReader(locks), 9980169)
	want := []lockEntry{
		{pid: 4242, mode: Exclusive, major: 0xfe, minor: 0, inode: 9980169},
		{pid: 100, mode: Shared, major: 0x103, minor: 0xa, inode: 9980169},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// fdinfo's "lock:" lines have the same format.
	if e, ok := parseLockLine("lock:\t1: FLOCK  ADVISORY  READ 10525 fe:00:9980169 0 EOF\n"); !ok || e.pid != 10525 || e.mode != Shared {
		t.Errorf("fdinfo line: %+v, %v", e, ok)
	}
}

// TestHolders names this process, holding the lock, with its mode.
func TestHolders(t *testing.T) {
	p := tempFile(t)
	a, b := open(t, p), open(t, p)
	if err := Lock(a, p, Exclusive); err != nil {
		t.Fatal(err)
	}
	var le *LockedError
	if err := Lock(b, p, Shared); !errors.As(err, &le) {
		t.Fatalf("Lock: %v", err)
	}
	if len(le.Holders) != 1 || le.Holders[0].PID != os.Getpid() || le.Holders[0].Mode != Exclusive || le.Holders[0].Program() != "filelock.test" {
		t.Fatalf("holders %+v, want this process (exclusive)", le.Holders)
	}
	if !strings.Contains(le.Error(), "exclusive") || !strings.Contains(le.Error(), "filelock.test") {
		t.Errorf("message %q", le.Error())
	}
}

// TestHoldersInherited: the process that took the lock handed the file
// to a child and closed its copy (as open --background does), so
// /proc/locks names a process that no longer holds it; the holder found
// is the child.
func TestHoldersInherited(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep(1)")
	}
	p := tempFile(t)
	a := open(t, p)
	if err := Lock(a, p, Shared); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "30")
	cmd.ExtraFiles = []*os.File{a}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	a.Close()
	b := open(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var le *LockedError
		err := Lock(b, p, Exclusive)
		if !errors.As(err, &le) {
			t.Fatalf("Lock: %v", err)
		}
		// Until the child has exec'd, its command line is this test's.
		if len(le.Holders) == 1 && le.Holders[0].PID == cmd.Process.Pid && le.Holders[0].Program() == "sleep" {
			if le.Holders[0].Mode != Shared {
				t.Errorf("mode %v", le.Holders[0].Mode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders %+v, want the child %d", le.Holders, cmd.Process.Pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
