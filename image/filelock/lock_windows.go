//go:build windows

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// Windows locks are mandatory for the bytes they cover: the lock is on the
// byte at 2^63-2, which no image reaches, so that it stops no read or
// write of the file, the holder's through another handle included.
const (
	lockOffsetLow  = 0xFFFFFFFE
	lockOffsetHigh = 0x7FFFFFFF
)

func lock(f *os.File, m Mode) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if m == Exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	ol := windows.Overlapped{Offset: lockOffsetLow, OffsetHigh: lockOffsetHigh}
	return windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, &ol)
}

func isWouldBlock(err error) bool { return errors.Is(err, windows.ERROR_LOCK_VIOLATION) }
