//go:build unix

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func lock(f *os.File, m Mode) error {
	how := unix.LOCK_SH
	if m == Exclusive {
		how = unix.LOCK_EX
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if ferr = unix.Flock(int(fd), how|unix.LOCK_NB); ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

func isWouldBlock(err error) bool { return errors.Is(err, unix.EWOULDBLOCK) }
