package image

import (
	"context"
	"io"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/integrity"
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
	if !e.Authenticated() {
		return 0, header.ErrNotAuthenticated
	}
	return e.c.stream(ctx, w, k, p, allowCorrupt)
}

// areaPieces calls fn over the bytes [s, s+n) of the integrity device cut
// at the area boundaries, with the logical sector of each piece.
func areaPieces(g *integrity.Geometry, s int64, n int, fn func(lo, hi int, unit uint64) error) error {
	for lo := 0; lo < n; {
		unit := integrityIV(s + int64(lo))
		a := g.Area(unit >> g.Log2Interleave())
		hi := lo + int(min(uint64(n-lo), (a.FirstSector+a.Sectors-unit)*512))
		if err := fn(lo, hi, unit); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}
