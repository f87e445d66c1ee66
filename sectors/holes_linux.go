package sectors

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fileFD returns the descriptor of f without the side effect of f.Fd, which
// switches f to blocking mode.
func fileFD(f *os.File) (int, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false
	}
	fd := -1
	if err := rc.Control(func(p uintptr) { fd = int(p) }); err != nil || fd < 0 {
		return 0, false
	}
	return fd, true
}

// seekData returns the first data offset at or after off; ok is false when
// there is no data after off (ENXIO).
func seekData(fd int, off int64) (data int64, ok bool, err error) {
	d, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 0, false, nil
	}
	return d, err == nil, err
}

// seekHole returns the first hole offset at or after off (the end of the file
// counts as a hole).
func seekHole(fd int, off int64) (int64, error) {
	return unix.Seek(fd, off, unix.SEEK_HOLE)
}
