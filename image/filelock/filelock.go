// Package filelock takes shared and exclusive advisory locks on image
// files without waiting, and names the process that holds one.
//
// A reader takes a [Shared] lock, a writer (or anything that changes a
// header) an [Exclusive] one; any number of shared locks coexist, an
// exclusive one excludes every other. The lock belongs to the open file:
// it lasts until the file is closed (by every process that shares it, such
// as a child that inherited the descriptor), and two opens of one file
// exclude each other even within one process.
//
// On Unix the lock is flock(2) on the file itself. cryptsetup takes the same
// lock on a regular file that holds LUKS2 metadata (LOCK_SH to read it,
// LOCK_EX to change it; lib/utils_device_locking.c), so cryptsetup and
// cryptimg exclude each other. On Windows it is LockFileEx on one byte far
// past any data, where it stops no read or write. Either way the lock is
// advisory: a program that takes none is not stopped.
package filelock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Mode says which lock to take.
type Mode int

const (
	// Shared is a reader's lock: it excludes exclusive locks only.
	Shared Mode = iota
	// Exclusive is a writer's lock: it excludes every other lock.
	Exclusive
)

func (m Mode) String() string {
	if m == Exclusive {
		return "exclusive"
	}
	return "shared"
}

// ErrLocked reports a file locked by another open of it; a *LockedError
// matches it.
var ErrLocked = errors.New("locked by another process")

// LockedError reports a lock that could not be taken because another open
// of the file holds a conflicting one.
type LockedError struct {
	Path string // the file, as the caller named it
	Mode Mode   // the lock asked for
	// Holders are the processes found holding a lock on the file, with the
	// mode of each. It is empty where they cannot be found (systems other
	// than Linux, processes of other users).
	Holders []Holder
}

func (e *LockedError) Error() string {
	if len(e.Holders) == 0 {
		return e.Path + " is " + ErrLocked.Error()
	}
	return fmt.Sprintf("%s is locked (%s) by %s", e.Path, e.Holders[0].Mode, e.Holders[0])
}

// Is makes a *LockedError match ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Holder is a process that holds a lock on a file.
type Holder struct {
	PID  int
	Mode Mode
	// Args is the process's command line, nil when it cannot be read.
	Args []string
}

// Program is the base name of the holder's executable ("" if unknown).
func (h Holder) Program() string {
	if len(h.Args) == 0 || h.Args[0] == "" {
		return ""
	}
	return filepath.Base(h.Args[0])
}

func (h Holder) String() string {
	if p := h.Program(); p != "" {
		return fmt.Sprintf("pid %d (%s)", h.PID, p)
	}
	return fmt.Sprintf("pid %d", h.PID)
}

// Lock takes a lock of mode m on f without waiting for its holder. When
// another open of the file holds a conflicting lock it returns a
// *LockedError naming the holders it can find; path names the file in it.
// The lock is released when f is closed.
//
// A file closed while another goroutine forks a process lives on in the
// child until it execs, lock included: a lock released by Close may
// outlast it by that moment. So where no holder can be found, or the only
// ones are such copies of this process, Lock tries again for about 30 ms
// before it reports the conflict.
func Lock(f *os.File, path string, m Mode) error {
	for delay := time.Millisecond; ; delay *= 2 {
		err := lock(f, m)
		if err == nil {
			return nil
		}
		if !isWouldBlock(err) {
			return fmt.Errorf("failed to lock %s: %w", path, err)
		}
		hs, _ := Holders(f)
		if delay > 16*time.Millisecond || !transient(hs) {
			return &LockedError{Path: path, Mode: m, Holders: hs}
		}
		time.Sleep(delay)
	}
}

// transient reports holders that may be gone in a moment: none that can be
// found, or children of a fork of this process that have not yet exec'd
// (another pid with this process's command line).
func transient(hs []Holder) bool {
	for _, h := range hs {
		if h.PID == os.Getpid() || !slices.Equal(h.Args, os.Args) {
			return false
		}
	}
	return true
}

// Holders lists the processes that hold a lock on the file f is open on,
// exclusive holders first. It returns nothing, and no error, where the
// system does not tell (anywhere but Linux).
func Holders(f *os.File) ([]Holder, error) {
	hs, err := holders(f)
	// Exclusive first: that is the one a reader waits for.
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].Mode == Exclusive && hs[j-1].Mode != Exclusive; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
	return hs, err
}
