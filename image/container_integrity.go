package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// integrityContainer is an authenticated LUKS2 image (integrity
// protection): the payload is a dm-integrity device (package integrity) at
// the segment offset, and each of its sectors is encrypted and tagged by
// the segment's cipher.AuthMode. Logical sector N of the device is both
// the sector's place in the plaintext and its IV unit (integrityIV); its
// ciphertext and its tag live where the integrity geometry says, not at
// base+N*512. The tag transforms and the view's store are in auth.go.
type integrityContainer struct {
	luks luksArea
	data io.ReaderAt
	base int64 // the segment offset in data
	g    *integrity.Geometry
}

// newIntegrity reads and checks the integrity superblock and journal of
// the authenticated payload at byte base of data (dataSize bytes, the
// size of the device the segment is in).
func newIntegrity(a luksArea, h header.Header, data io.ReaderAt, base, dataSize int64) (container, error) {
	i := h.Info()
	m, err := authTagMode(h)
	if err != nil {
		return nil, err
	}
	if i.PayloadSize != 0 {
		return nil, fmt.Errorf("%w: an integrity segment of fixed size (cryptsetup makes them dynamic)", ErrAuthenticatedUnsupported)
	}
	g, _, err := integrity.Read(data, uint64(base/512), uint64(dataSize/512))
	if err != nil {
		return nil, err
	}
	if err := g.Check(m.TagSize, i.SectorSize); err != nil {
		return nil, fmt.Errorf("%s with %d-byte sectors: %w", m.Name(), i.SectorSize, err)
	}
	if err := checkJournal(data, g); err != nil {
		return nil, err
	}
	return &integrityContainer{luks: a, data: data, base: base, g: g}, nil
}

func (c *integrityContainer) format() Format                 { return Raw }
func (c *integrityContainer) file() io.ReaderAt              { return c.data }
func (c *integrityContainer) area() luksArea                 { return c.luks }
func (c *integrityContainer) room() int64                    { return c.base - c.luks.off }
func (c *integrityContainer) size() int64                    { return int64(c.g.DataSectors()) * 512 }
func (c *integrityContainer) payload() (int64, int64)        { return c.base, c.size() }
func (c *integrityContainer) tagLayout() *integrity.Geometry { return c.g }
func (c *integrityContainer) qcow2Header() *qcow2.Image      { return nil }
func (c *integrityContainer) clusterSize() int64             { return 0 }
func (c *integrityContainer) extents() ([]sectors.Extent, error) {
	return authExtents(c.g), nil
}

func (c *integrityContainer) plain(v View) (*Plain, error) {
	return &Plain{Format: Raw, Size: v.Size(), guest: v, mapped: true, ranges: []Range{{0, v.Size()}}}, nil
}

// authExtents are the data extents of the integrity device, one per area:
// from the file, to plaintext offset N*512, IV unit N.
func authExtents(g *integrity.Geometry) []sectors.Extent {
	var ext []sectors.Extent
	for a := range g.Areas() {
		plain := int64(a.FirstSector) * 512
		ext = append(ext, sectors.Extent{SrcOffset: a.DataOffset, DstOffset: plain, Length: a.DataLen, Sector: integrityIV(plain)})
	}
	return ext
}

// decrypt writes the verified plaintext to w. Without o.AllowCorrupt the
// first bad sector fails the run with a *CorruptError naming it; with it,
// bad sectors are written as zeros and listed in the returned
// *CorruptError after the whole output is written.
func (c *integrityContainer) decrypt(ctx context.Context, w io.WriterAt, k *Key, o DecryptOptions) error {
	a, err := authCipher(k)
	if err != nil {
		return err
	}
	p := o.Pipeline
	var bad badList
	so := p.options(c.size(), true)
	so.SectorSize = a.Geometry().SectorSize
	so.Unordered = newFile(w)
	t := openTransform(c.data, c.g, a, &bad)
	if !o.AllowCorrupt {
		t = stopOnBad(t, &bad)
	}
	err = sectors.Run(ctx, w, c.data, authExtents(c.g), t, so)
	if errors.Is(err, errBadSector) {
		// Stopped at a bad sector: chunks before it that were cancelled
		// unchecked may hold an earlier one, so the report comes from a
		// verification up to there.
		return c.firstBad(ctx, a, &bad, p)
	}
	if err != nil {
		return err
	}
	return bad.err()
}

// stream: the workers read the areas' data themselves, in parallel (a
// chunk never spans two areas: each is an extent); only the writes to w
// keep order, and the first failed chunk in that order stops them.
func (c *integrityContainer) stream(ctx context.Context, w io.Writer, k *Key, p Pipeline, allowCorrupt bool) (int64, error) {
	a, err := authCipher(k)
	if err != nil {
		return 0, err
	}
	var bad badList
	t := openTransform(c.data, c.g, a, &bad)
	if !allowCorrupt {
		t = stopOnBad(t, &bad)
	}
	size := c.size()
	so := p.options(size, false)
	so.SectorSize = a.Geometry().SectorSize
	sw := &streamAt{w: w}
	err = sectors.Run(ctx, sw, c.data, authExtents(c.g), t, so)
	n := sw.off
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return n, fmt.Errorf("image: %w: %w", ErrTruncated, err)
	}
	if errors.Is(err, errBadSector) {
		return n, c.firstBad(ctx, a, &bad, p)
	}
	if err != nil {
		return n, err
	}
	if n != size {
		return n, fmt.Errorf("image: internal error: streamed %d of %d bytes", n, size)
	}
	return n, bad.err()
}

// firstBad verifies the image up to the lowest bad sector seen and
// returns the *CorruptError of everything found below and at it.
func (c *integrityContainer) firstBad(ctx context.Context, a cipher.AuthSector, bad *badList, p Pipeline) error {
	err := bad.err().(*CorruptError)
	first := err.Sectors[0]
	var before badList
	var ext []sectors.Extent
	for _, x := range authExtents(c.g) {
		if x.Sector >= first {
			break
		}
		x.Length = min(x.Length, int64(first-x.Sector)*512)
		ext = append(ext, x)
	}
	so := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: a.Geometry().SectorSize, Unordered: true}
	if err := sectors.Run(ctx, discard{}, c.data, ext, checkTransform(c.data, c.g, a, &before), so); err != nil {
		return err
	}
	if found := before.err(); found != nil {
		return found
	}
	return &CorruptError{Sectors: []uint64{first}, Count: 1}
}

func (c *integrityContainer) verify(ctx context.Context, k *Key, p Pipeline) (*VerifyReport, error) {
	a, err := authCipher(k)
	if err != nil {
		return nil, err
	}
	size := c.size()
	var bad badList
	so := p.options(size, false)
	so.SectorSize = a.Geometry().SectorSize
	so.Unordered = true // nothing is written: no order to keep
	if err := sectors.Run(ctx, discard{}, c.data, authExtents(c.g), checkTransform(c.data, c.g, a, &bad), so); err != nil {
		return nil, err
	}
	r := &VerifyReport{Sectors: uint64(size / 512), Bytes: size}
	if err := bad.err(); err != nil {
		r.Corrupt = err.(*CorruptError)
	}
	return r, nil
}

func (c *integrityContainer) view(f *os.File, k *Key, readOnly bool) (View, error) {
	return newAuthView(f, k.Auth, c.g, readOnly), nil
}

func (c *integrityContainer) resize(*Encrypted, File, int64, ResizeOptions) error {
	return fmt.Errorf("resizing: %w (the integrity tags and journal would have to be laid out again)", ErrAuthenticatedUnsupported)
}

// integrityOutput writes an authenticated raw image: the header area
// (unless detached), the integrity superblock and a fresh journal, and
// every sector of the plaintext sealed with its tag. It is rawOutput's for
// an authenticated header.
type integrityOutput struct{}

func (integrityOutput) encrypt(ctx context.Context, dst *os.File, src *Plain, f *Formatted, o EncryptOptions) error {
	a := f.Key.Auth
	if a == nil {
		return errors.New("image: internal error: an authenticated header without its cipher")
	}
	ss := a.Geometry().SectorSize
	// dm-integrity's data sectors come in 4096-byte multiples.
	if src.Size%4096 != 0 || src.Size == 0 {
		return fmt.Errorf("%w: an image with integrity holds whole 4096-byte blocks, the input is %d bytes", ErrUnaligned, src.Size)
	}
	payload := f.Header.Info().PayloadOffset
	d, g, err := authDeviceSectors(uint64(payload/512), uint64(src.Size/512), a.TagSize(), ss)
	if err != nil {
		return err
	}
	if payload > 0 {
		if err := writeArea(dst, f.Area); err != nil {
			return err
		}
	}
	if err := dst.Truncate(int64(d) * 512); err != nil {
		return fmt.Errorf("failed to size output: %w", err)
	}
	if err := g.WriteMetadata(dst); err != nil {
		return fmt.Errorf("failed to write the integrity metadata: %w", err)
	}
	so := o.Pipeline.options(src.Size, false)
	so.SectorSize = ss
	so.Unordered = true // a new file: data and tag areas apart, written in any order
	return sectors.Run(ctx, dst, src.guest, toFile(authExtents(g)), sealTransform(dst, g, a), so)
}

// authDeviceSectors is the smallest device, in 512-byte sectors from the
// start of the file, whose integrity device at segment offset start holds
// exactly data sectors (a multiple of 8), and its geometry. The journal
// grows with the device, so the size is found from below: each step adds
// the missing data sectors, and since a larger device never gets a smaller
// journal, no step overshoots.
func authDeviceSectors(start, data uint64, tagSize, sectorSize int) (uint64, *integrity.Geometry, error) {
	d := start + data + 8
	var lastErr error
	for range 1 << 20 {
		g, err := integrity.New(d, start, tagSize, sectorSize)
		if err != nil {
			lastErr = err // too small for the metadata: grow
			d += 8
			continue
		}
		p := g.DataSectors()
		switch {
		case p == data:
			return d, g, nil
		case p > data:
			return 0, nil, fmt.Errorf("image: internal error: a %d-sector device holds %d data sectors, more than %d", d, p, data)
		}
		d += data - p
	}
	return 0, nil, fmt.Errorf("image: internal error: no integrity geometry for %d data sectors: %v", data, lastErr)
}
