package verity

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// mapData maps the first size bytes of r read-only when r is a regular
// *os.File, or an *io.SectionReader of one (a partition of a disk image),
// for the data pass to hash in place: reading tmpfs or the page cache
// through pread costs a copy of every byte (about a third of the CPU time
// of a format in perf), a mapping only the page-table entries. ok is false
// when there is no mapping to be had; the caller reads instead.
func mapData(r io.ReaderAt, size int64) (m []byte, unmap func(), ok bool) {
	var base int64
	if sr, isSection := r.(*io.SectionReader); isSection {
		outer, off, n := sr.Outer()
		if n < size {
			return nil, nil, false
		}
		r, base = outer, off
	}
	f, isFile := r.(*os.File)
	if !isFile || size <= 0 || base < 0 || int64(int(size)) != size {
		return nil, nil, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size()-base < size {
		return nil, nil, false
	}
	// mmap's offset is a multiple of the page size.
	start := base / int64(os.Getpagesize()) * int64(os.Getpagesize())
	full, err := unix.Mmap(int(f.Fd()), start, int(base-start+size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, false
	}
	return full[base-start:], func() { unix.Munmap(full) }, true
}
