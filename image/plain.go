package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"

	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// ErrNotEncrypted reports a qcow2 image without LUKS encryption where an
// encrypted one was expected.
var ErrNotEncrypted = errors.New("image is not encrypted")

// Plain is a plaintext input image: a raw file or a plain qcow2 image,
// seen as its guest (virtual) disk.
type Plain struct {
	Format Format
	Size   int64 // virtual size in bytes
	// Qcow2 is the parsed header of a qcow2 input.
	Qcow2 *qcow2.Image

	f      *os.File
	guest  io.ReaderAt // the guest view: f itself for raw input
	ranges []Range     // where the guest view may hold non-zero data; see dataMap
	mapped bool        // ranges is known
}

// Range is a byte range [Offset, Offset+Length).
type Range struct{ Offset, Length int64 }

// OpenPlain opens a plaintext image, raw or qcow2, detected by its magic.
// An encrypted qcow2 image is refused with ErrNotEncrypted's opposite: it
// has to be decrypted first.
func OpenPlain(f *os.File) (*Plain, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	if qcow2.IsQcow2(f) {
		im, err := qcow2.Open(f, st.Size())
		if err != nil {
			return nil, err
		}
		if im.CryptMethod != qcow2.CryptNone {
			return nil, fmt.Errorf("qcow2 image is already encrypted (crypt method %d); decrypt it first", im.CryptMethod)
		}
		ext, err := im.Extents(f)
		if err != nil {
			return nil, err
		}
		p := &Plain{Format: Qcow2, Size: im.Size, Qcow2: im, f: f, mapped: true}
		g := &qcowGuest{f: f, im: im, ext: ext}
		p.guest = g
		for _, e := range ext {
			if e.Kind == qcow2.Data || e.Kind == qcow2.Compressed {
				p.ranges = appendRange(p.ranges, Range{e.GuestOffset, e.Length})
			}
		}
		return p, nil
	}
	size := st.Size()
	if size%SectorSize != 0 {
		return nil, fmt.Errorf("%s: %w (%d bytes)", f.Name(), ErrSize, size)
	}
	return &Plain{Format: Raw, Size: size, f: f, guest: f}, nil
}

// dataMap returns the ranges of the guest view that may hold non-zero data.
// For raw input it asks the file system on first use: on a dense file on
// tmpfs SEEK_HOLE walks the whole page cache (about 16 ms per GiB), which
// the raw LUKS path, whose pipeline finds holes itself, need not pay twice.
func (p *Plain) dataMap() []Range {
	if !p.mapped {
		p.ranges, p.mapped = dataRanges(p.f, p.Size), true
	}
	return p.ranges
}

// dataRanges lists the parts of f that are not holes (package sectors asks
// the file system).
func dataRanges(f *os.File, size int64) []Range {
	var rs []Range
	for _, s := range sectors.DataSpans(f, size) {
		rs = append(rs, Range(s))
	}
	return rs
}

func appendRange(rs []Range, r Range) []Range {
	if n := len(rs); n > 0 && rs[n-1].Offset+rs[n-1].Length == r.Offset {
		rs[n-1].Length += r.Length
		return rs
	}
	return append(rs, r)
}

// qcowGuest reads the guest view of a plain qcow2 image: data from its
// host clusters, zeros for holes and zero clusters, compressed clusters
// inflated. It is safe for concurrent use.
type qcowGuest struct {
	f   io.ReaderAt
	im  *qcow2.Image
	ext []qcow2.Extent

	mu        sync.Mutex
	cacheOff  int64 // guest offset of the cached inflated cluster, -1 if none
	cache     []byte
	cacheFill bool
}

func (g *qcowGuest) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("image: negative offset")
	}
	if off >= g.im.Size {
		return 0, io.EOF
	}
	want := len(p)
	if max := g.im.Size - off; int64(want) > max {
		want = int(max)
	}
	i := sort.Search(len(g.ext), func(i int) bool { return g.ext[i].GuestOffset+g.ext[i].Length > off })
	n := 0
	for n < want && i < len(g.ext) {
		e := g.ext[i]
		pos := off + int64(n)
		in := pos - e.GuestOffset
		m := e.Length - in
		if m > int64(want-n) {
			m = int64(want - n)
		}
		dst := p[n : n+int(m)]
		switch e.Kind {
		case qcow2.Data:
			if _, err := g.f.ReadAt(dst, e.HostOffset+in); err != nil {
				return n, fmt.Errorf("read qcow2 data at host offset %d: %w", e.HostOffset+in, err)
			}
		case qcow2.Compressed:
			if err := g.inflated(e, in, dst); err != nil {
				return n, err
			}
		default:
			clear(dst)
		}
		n += int(m)
		i++
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (g *qcowGuest) inflated(e qcow2.Extent, in int64, dst []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.cacheFill || g.cacheOff != e.GuestOffset {
		if g.cache == nil {
			g.cache = make([]byte, g.im.ClusterSize)
		}
		g.cacheFill = false
		if err := g.im.ReadCompressed(g.f, e, g.cache); err != nil {
			return err
		}
		g.cacheOff, g.cacheFill = e.GuestOffset, true
	}
	// A compressed extent is one cluster, possibly cut at the virtual end.
	copy(dst, g.cache[in:])
	return nil
}
