package image

import (
	"context"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/image/qcow2"
)

// Clone writes a per-instance copy of the image e (read from src with the
// unlocked key k) to dst, an empty regular file, under the new header and
// key of f, in one pass: every sector is decrypted with the old key and
// encrypted with the new one in memory, so no plaintext reaches the disk.
// o says the output's format (empty: the source's), cluster size and
// pipeline; a qcow2 source stays sparse, and a qcow2 output stores only
// the clusters holding data. f is FormatHeader's, with a new volume key
// and UUID.
func (e *Encrypted) Clone(ctx context.Context, src, dst *os.File, k *Key, f *Formatted, o EncryptOptions) error {
	if SameFile(src.Name(), dst.Name()) {
		return ErrSameFile
	}
	v, err := e.View(src, k, true)
	if err != nil {
		return err
	}
	defer v.Close()
	p, err := e.plainOf(src, v)
	if err != nil {
		return err
	}
	if o.Format == "" {
		o.Format = e.Format
	}
	return EncryptTo(ctx, dst, p, f, o)
}

// plainOf is the decrypted view v of e as a plaintext image: its guest
// data and where that data may be non-zero (a qcow2 source's allocated
// clusters; all of a raw one).
func (e *Encrypted) plainOf(src *os.File, v View) (*Plain, error) {
	p := &Plain{Format: Raw, Size: v.Size(), guest: v, mapped: true}
	if e.Format != Qcow2 {
		p.ranges = []Range{{0, v.Size()}}
		return p, nil
	}
	ext, err := e.qcow.Extents(src)
	if err != nil {
		return nil, err
	}
	// The encrypted source's map says which guest clusters hold data; the
	// qcow2 output path then keeps the holes without reading them.
	p.Format = Qcow2
	for _, x := range ext {
		if x.Kind == qcow2.Data {
			p.ranges = appendRange(p.ranges, Range{x.GuestOffset, x.Length})
		}
	}
	if p.Size%SectorSize != 0 {
		return nil, fmt.Errorf("%w: the source holds %d bytes", ErrSize, p.Size)
	}
	return p, nil
}
