package verity

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mapData maps the first size bytes of r read-only when r is a regular
// *os.File, for the data pass to hash in place: reading tmpfs or the page
// cache through pread costs a copy of every byte (about a third of the CPU
// time of a format in perf), a mapping only the page-table entries. ok is
// false when there is no mapping to be had; the caller reads instead.
func mapData(r io.ReaderAt, size int64) (m []byte, unmap func(), ok bool) {
	f, isFile := r.(*os.File)
	if !isFile || size <= 0 || int64(int(size)) != size {
		return nil, nil, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < size {
		return nil, nil, false
	}
	m, err = unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, false
	}
	return m, func() { unix.Munmap(m) }, true
}
