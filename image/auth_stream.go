package image

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/sectors"
)

// Authenticated images to a stream (cryptimg decrypt IMAGE -): the image
// is a file, read where the integrity geometry puts each area's data and
// tags, and the plaintext goes out in order, each sector checked before it
// is written.

// DecryptAuthStream writes the verified plaintext of an authenticated
// image to w, in order, and returns the bytes written. Without
// allowCorrupt it stops before the chunk holding the first bad sector,
// so that everything written passed its check, as the kernel's reads stop
// at the first failing sector, and returns the *CorruptError naming it.
// With allowCorrupt, bad sectors are written as zeros and listed in the
// returned *CorruptError once the whole plaintext is written.
func (e *Encrypted) DecryptAuthStream(ctx context.Context, w io.Writer, k *Key, p Pipeline, allowCorrupt bool) (int64, error) {
	if e.auth == nil {
		return 0, header.ErrNotAuthenticated
	}
	a, err := e.authCipher(k)
	if err != nil {
		return 0, err
	}
	var bad badList
	t := inAreas(e.auth, openTransform(e.f, e.auth, a, &bad))
	if !allowCorrupt {
		t = stopOnBad(t, &bad)
	}
	so := p.options(e.PayloadSize, false)
	so.SectorSize = a.Geometry().SectorSize
	n, err := sectors.Stream(ctx, w, &areaReader{r: e.f, g: e.auth}, 0, t, so)
	if errors.Is(err, errBadSector) {
		return n, e.firstBad(ctx, a, &bad, p)
	}
	if err != nil {
		return n, err
	}
	if n != e.PayloadSize {
		return n, fmt.Errorf("image: internal error: streamed %d of %d bytes", n, e.PayloadSize)
	}
	return n, bad.err()
}

// inAreas calls t once per piece of a chunk that lies in one interleave
// area: the tags of consecutive areas are not contiguous, and a stream's
// chunks need not end where an area does.
func inAreas(g *integrity.Geometry, t sectors.Transform) sectors.Transform {
	return func(dst, src []byte, n uint64) error {
		return areaPieces(g, int64(n)*512, len(src), func(lo, hi int, unit uint64) error {
			return t(dst[lo:hi], src[lo:hi], unit)
		})
	}
}

// areaPieces calls fn over the bytes [s, s+n) of the integrity device cut
// at the area boundaries, with the logical sector of each piece.
func areaPieces(g *integrity.Geometry, s int64, n int, fn func(lo, hi int, unit uint64) error) error {
	for lo := 0; lo < n; {
		unit := uint64(s+int64(lo)) / 512
		a := g.Area(unit >> g.Log2Interleave())
		hi := lo + int(min(uint64(n-lo), (a.FirstSector+a.Sectors-unit)*512))
		if err := fn(lo, hi, unit); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// areaReader reads the data of every area in order: the integrity
// device's sectors, without the tags between them. A file that ends
// inside an area is ErrTruncated, not a shorter stream.
type areaReader struct {
	r    io.ReaderAt
	g    *integrity.Geometry
	area uint64 // the area being read
	off  int64  // bytes of it already read
}

func (ar *areaReader) Read(p []byte) (int, error) {
	if ar.area >= ar.g.NumAreas() {
		return 0, io.EOF
	}
	a := ar.g.Area(ar.area)
	n, err := ar.r.ReadAt(p[:min(int64(len(p)), a.DataLen-ar.off)], a.DataOffset+ar.off)
	ar.off += int64(n)
	if ar.off == a.DataLen {
		ar.area, ar.off = ar.area+1, 0
		return n, nil
	}
	if errors.Is(err, io.EOF) {
		return n, fmt.Errorf("image: %w: the file ends inside integrity area %d", ErrTruncated, a.Index)
	}
	return n, err
}
