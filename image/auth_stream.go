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
	t := openTransform(e.f, e.auth, a, &bad)
	if !allowCorrupt {
		t = stopOnBad(t, &bad)
	}
	so := p.options(e.PayloadSize, false)
	so.SectorSize = a.Geometry().SectorSize
	// The workers read the areas' data themselves, in parallel (a chunk
	// never spans two areas: each is an extent); only the writes to w
	// keep order, and the first failed chunk in that order stops them.
	sw := &streamAt{w: w}
	err = sectors.Run(ctx, sw, e.f, authExtents(e.auth), t, so)
	n := sw.off
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return n, fmt.Errorf("image: %w: %w", ErrTruncated, err)
	}
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
