package sectors

import (
	"io"
	"math"
	"os"
	"sync"
)

// holeFinder tells data from holes in a regular file with SEEK_DATA and
// SEEK_HOLE, so that holes can be zero-filled instead of read. It caches the
// last segment found, which makes sequential use cost about two lseek calls
// per data segment and one per hole. Offsets are those of the ReaderAt given
// to newHoleFinder; base converts them to file offsets. It is safe for
// concurrent use: a run's workers share one, so that a dense file's
// SEEK_HOLE, which walks its whole page cache on tmpfs, runs once per run
// rather than once per worker.
type holeFinder struct {
	mu   sync.Mutex
	fd   int
	base int64 // file offset of ReaderAt offset 0
	size int64 // file size when the run started

	// Cached segment [start, end) in file offsets.
	start, end int64
	hole       bool
}

// newHoleFinder returns a holeFinder for src if it is a regular *os.File, or
// an *io.SectionReader of one, on a system with SEEK_DATA; otherwise nil,
// and everything is read.
func newHoleFinder(src io.ReaderAt) *holeFinder {
	var base int64
	if sr, ok := src.(*io.SectionReader); ok {
		src, base, _ = sr.Outer()
	}
	f, ok := src.(*os.File)
	if !ok {
		return nil
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	fd, ok := fileFD(f)
	if !ok {
		return nil
	}
	return &holeFinder{fd: fd, base: base, size: fi.Size()}
}

// segment reports whether off lies in a hole and where that hole or data
// segment ends (an offset > off). Past the end of the file it reports data,
// so that reading there fails with a short read. If the file system cannot
// tell, everything is data.
func (h *holeFinder) segment(off int64) (hole bool, end int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	abs := h.base + off
	if abs < h.start || abs >= h.end {
		h.find(abs)
	}
	return h.hole, h.end - h.base
}

// find caches the segment holding abs.
func (h *holeFinder) find(abs int64) {
	h.start, h.end, h.hole = abs, math.MaxInt64, false
	if abs >= h.size {
		return
	}
	d, ok, err := seekData(h.fd, abs)
	switch {
	case err != nil:
		h.disable()
	case !ok:
		// No data after abs: a hole up to the end of the file.
		h.end, h.hole = h.size, true
	case d > abs:
		h.end, h.hole = d, true
	default:
		e, err := seekHole(h.fd, abs)
		if err != nil || e <= abs {
			h.disable()
			return
		}
		h.end = e
	}
}

// disable makes every later query report data.
func (h *holeFinder) disable() {
	h.start, h.end, h.hole = math.MinInt64, math.MaxInt64, false
}

// Span is a byte range [Offset, Offset+Length).
type Span struct{ Offset, Length int64 }

// DataSpans lists the parts of f below size that hold data, by SEEK_DATA
// and SEEK_HOLE, merged where they touch. Where the file system or the
// platform cannot tell, it returns all of [0, size).
func DataSpans(f *os.File, size int64) []Span {
	all := []Span{{0, size}}
	fd, ok := fileFD(f)
	if !ok {
		return all
	}
	var spans []Span
	for off := int64(0); off < size; {
		data, ok, err := seekData(fd, off)
		if err != nil {
			return all
		}
		if !ok || data >= size {
			break
		}
		hole, err := seekHole(fd, data)
		if err != nil || hole > size {
			hole = size
		}
		if n := len(spans); n > 0 && spans[n-1].Offset+spans[n-1].Length == data {
			spans[n-1].Length += hole - data
		} else if hole > data {
			spans = append(spans, Span{data, hole - data})
		}
		off = hole
	}
	return spans
}
