package image

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// rawContainer is a raw LUKS image (cryptsetup, dm-crypt, qemu's luks
// driver), or a LUKS partition of a disk image: the payload is one run of
// encrypted sectors from byte base of data, IV unit 0 at its start
// (rawIV), after the LUKS area.
type rawContainer struct {
	luks luksArea
	data io.ReaderAt
	base int64 // the payload's offset in data
	size int64 // the payload's size
}

func (c *rawContainer) format() Format                     { return Raw }
func (c *rawContainer) file() io.ReaderAt                  { return c.data }
func (c *rawContainer) area() luksArea                     { return c.luks }
func (c *rawContainer) room() int64                        { return c.base - c.luks.off }
func (c *rawContainer) payload() (int64, int64)            { return c.base, c.size }
func (c *rawContainer) tagLayout() *integrity.Geometry     { return nil }
func (c *rawContainer) qcow2Header() *qcow2.Image          { return nil }
func (c *rawContainer) clusterSize() int64                 { return 0 }
func (c *rawContainer) extents() ([]sectors.Extent, error) { return c.run(), nil }

// run is the payload as one extent.
func (c *rawContainer) run() []sectors.Extent {
	return []sectors.Extent{{SrcOffset: c.base, DstOffset: 0, Length: c.size, Sector: rawIV(0)}}
}

func (c *rawContainer) plain(v View) (*Plain, error) {
	return &Plain{Format: Raw, Size: v.Size(), guest: v, mapped: true, ranges: []Range{{0, v.Size()}}}, nil
}

func (c *rawContainer) decrypt(ctx context.Context, w io.WriterAt, k *Key, o DecryptOptions) error {
	so := o.Pipeline.options(c.size, true)
	so.SectorSize = k.Cipher.Geometry().SectorSize
	so.Unordered = newFile(w)
	return sectors.Run(ctx, w, c.data, c.run(), k.Cipher.DecryptSectors, so)
}

// stream: the workers read the file themselves, in parallel; only the
// writes to w are in order.
func (c *rawContainer) stream(ctx context.Context, w io.Writer, k *Key, p Pipeline, _ bool) (int64, error) {
	ci := k.Cipher
	so := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: ci.Geometry().SectorSize, Collect: true}
	if p.Progress != nil {
		p.Progress(0, c.size)
		so.Progress = func(d int64) { p.Progress(d, c.size) }
	}
	sw := &streamAt{w: w}
	ext := []sectors.Extent{{SrcOffset: c.base, Length: c.size, Sector: rawIV(0)}}
	err := sectors.Run(ctx, sw, c.data, ext, ci.DecryptSectors, so)
	return sw.off, err
}

func (c *rawContainer) verify(context.Context, *Key, Pipeline) (*VerifyReport, error) {
	return nil, header.ErrNotAuthenticated
}

func (c *rawContainer) view(f *os.File, k *Key, readOnly bool) (View, error) {
	return newRawView(f, k.Cipher, c.base, c.size, readOnly), nil
}

// resize truncates the file; a fixed LUKS2 segment's size is committed
// after the file grows and before it shrinks.
func (c *rawContainer) resize(e *Encrypted, f File, size int64, _ ResizeOptions) error {
	fixed := e.Header.Info().PayloadSize != 0
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fileSize, oldEnd, end := st.Size(), c.base+c.size, c.base+size
	if end < c.base {
		return fmt.Errorf("image: a payload of %d bytes at %d does not fit in a file", size, c.base)
	}
	segment := func() error {
		if !fixed {
			return nil
		}
		l2, ok := e.Header.(*header.LUKS2)
		if !ok {
			return fmt.Errorf("image: internal error: a fixed-size payload in a %T header", e.Header)
		}
		return e.Apply(l2.WithDataSize(size))
	}
	cut := func(to int64) error {
		if err := f.Truncate(to); err != nil {
			return fmt.Errorf("failed to resize %s: %w", nameOf(f), err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("failed to sync %s: %w", nameOf(f), err)
		}
		fileSize = to
		return nil
	}
	if size > c.size {
		// The file first: until the metadata says so, the extension is
		// not part of a fixed segment.
		if end > fileSize {
			if err := cut(end); err != nil {
				return err
			}
		}
		if err := segment(); err != nil {
			return err
		}
	} else {
		// The metadata first: the file then holds more than the segment.
		if err := segment(); err != nil {
			return err
		}
		if fileSize > end && (!fixed || fileSize == oldEnd) {
			if err := cut(end); err != nil {
				return err
			}
		}
	}
	c.size = size
	e.PayloadSize, e.FileSize = size, fileSize
	return nil
}

// rawOutput writes a raw LUKS image: the header area, then the payload at
// the header's payload offset, IV unit 0 at its start; every sector is
// encrypted, zeros included, since raw LUKS has no allocation map. An
// authenticated header's payload is a dm-integrity device instead
// (integrityOutput).
type rawOutput struct{}

func (rawOutput) params(p *header.Params, size int64, detached bool) error {
	if p.Version == 2 {
		luks2SectorSize(p, size)
	}
	if detached {
		p.Detached = true
	}
	return nil
}

// create leaves the payload a hole (createRaw); an authenticated one has
// every tag written: the authenticated path seals zeros.
func (rawOutput) create(ctx context.Context, dst *os.File, size int64, o EncryptOptions) (header.Header, error) {
	if o.Header.Integrity != "" {
		return Encrypt(ctx, dst, zeroPlain(size), o)
	}
	return createRaw(ctx, dst, size, o)
}

func (rawOutput) encrypt(ctx context.Context, dst *os.File, src *Plain, f *Formatted, o EncryptOptions) error {
	if f.Key.Auth != nil {
		return integrityOutput{}.encrypt(ctx, dst, src, f, o)
	}
	c := f.Key.Cipher
	payload := f.Header.Info().PayloadOffset
	// A header with payload offset 0 is detached: the caller stores it.
	if payload > 0 {
		if err := writeArea(dst, f.Area); err != nil {
			return err
		}
	}
	ss := c.Geometry().SectorSize
	if src.Size%int64(ss) != 0 {
		return fmt.Errorf("%w: the input of %d bytes is not a whole number of %d-byte sectors", ErrUnaligned, src.Size, ss)
	}
	if err := dst.Truncate(payload + src.Size); err != nil {
		return fmt.Errorf("failed to size output: %w", err)
	}
	ext := []sectors.Extent{{SrcOffset: 0, DstOffset: payload, Length: src.Size, Sector: rawIV(0)}}
	so := o.Pipeline.options(src.Size, false)
	so.SectorSize = ss
	so.Unordered = true // dst is a new file
	if o.Verity == nil {
		return sectors.Run(ctx, dst, src.guest, ext, c.EncryptSectors, so)
	}
	vp, err := startVerity(o.Verity, payload, src.Size, &so)
	if err != nil {
		return err
	}
	if err := sectors.Run(ctx, dst, src.guest, ext, vp.wrap(c.EncryptSectors), so); err != nil {
		return err
	}
	return vp.finish(ctx, dst)
}

// luks2SectorSize gives a LUKS2 header without a sector size the one
// cryptsetup picks for a file, 4096 bytes, or 512 for data of size bytes
// that is not whole 4096-byte sectors.
func luks2SectorSize(p *header.Params, size int64) {
	if p.Version == 2 && p.SectorSize == 0 {
		p.SectorSize = header.DefaultLUKS2Sector
		if size%header.DefaultLUKS2Sector != 0 {
			p.SectorSize = SectorSize
		}
	}
}
