package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// qcowContainer is a qcow2+LUKS image (qemu's encrypt.format=luks): the
// LUKS1 header lives in the area the full-disk-encryption header extension
// points to (findArea), its key-material offsets counting from the start
// of that area; the payload is the allocated data clusters, each
// host-contiguous run with IV unit host offset / 512 (qcowIV). Compressed
// clusters hold plaintext (qemu never encrypts them).
type qcowContainer struct {
	luks luksArea
	data io.ReaderAt
	im   *qcow2.Image
}

// newQcowContainer is the container of the qcow2 image im whose LUKS area
// a holds h: qemu writes and reads only LUKS1 there.
func newQcowContainer(a luksArea, im *qcow2.Image, h header.Header) (container, error) {
	if v := h.Info().Version; v != 1 {
		return nil, fmt.Errorf("%w: qcow2 with a LUKS%d header (qemu writes and reads only LUKS1)", header.ErrCorrupt, v)
	}
	return &qcowContainer{luks: a, data: a.r, im: im}, nil
}

func (c *qcowContainer) format() Format                 { return Qcow2 }
func (c *qcowContainer) file() io.ReaderAt              { return c.data }
func (c *qcowContainer) area() luksArea                 { return c.luks }
func (c *qcowContainer) room() int64                    { return c.luks.limit }
func (c *qcowContainer) payload() (int64, int64)        { return 0, c.im.Size }
func (c *qcowContainer) tagLayout() *integrity.Geometry { return nil }
func (c *qcowContainer) qcow2Header() *qcow2.Image      { return c.im }
func (c *qcowContainer) clusterSize() int64             { return c.im.ClusterSize }

func (c *qcowContainer) extents() ([]sectors.Extent, error) {
	ext, err := c.im.Extents(c.data)
	if err != nil {
		return nil, err
	}
	var out []sectors.Extent
	for _, x := range ext {
		if x.Kind == qcow2.Data {
			out = append(out, sectors.Extent{SrcOffset: x.HostOffset, DstOffset: x.GuestOffset, Length: x.Length, Sector: qcowIV(x.HostOffset)})
		}
	}
	return out, nil
}

// plain: the encrypted source's map says which guest clusters hold data;
// the qcow2 output path then keeps the holes without reading them.
func (c *qcowContainer) plain(v View) (*Plain, error) {
	p := &Plain{Format: Qcow2, Size: v.Size(), guest: v, mapped: true}
	ext, err := c.im.Extents(c.data)
	if err != nil {
		return nil, err
	}
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

// decrypt decrypts the allocated data into w, at guest offsets. Each data
// run is host-contiguous, so its IV units advance by one per 512 bytes
// from host offset / 512. Compressed clusters are only inflated.
func (c *qcowContainer) decrypt(ctx context.Context, w io.WriterAt, k *Key, do DecryptOptions) error {
	p := do.Pipeline
	ext, err := c.im.Extents(c.data)
	if err != nil {
		return err
	}
	var runs []sectors.Extent
	var total int64
	var compressed []qcow2.Extent
	for _, x := range ext {
		switch x.Kind {
		case qcow2.Data:
			runs = append(runs, sectors.Extent{SrcOffset: x.HostOffset, DstOffset: x.GuestOffset, Length: x.Length, Sector: qcowIV(x.HostOffset)})
			total += x.Length
		case qcow2.Compressed:
			compressed = append(compressed, x)
			total += x.Length
		}
	}
	o := p.options(total, true)
	o.Unordered = newFile(w) // a raw output; a qcow2 one allocates in order
	if err := sectors.Run(ctx, w, c.data, runs, k.Cipher.DecryptSectors, o); err != nil {
		return err
	}
	var done int64
	for _, r := range runs {
		done += r.Length
	}
	buf := make([]byte, c.im.ClusterSize)
	for _, x := range compressed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.im.ReadCompressed(c.data, x, buf); err != nil {
			return err
		}
		if _, err := w.WriteAt(buf[:x.Length], x.GuestOffset); err != nil {
			return &sectors.IOError{Op: "write output", Offset: x.GuestOffset, Err: err}
		}
		done += x.Length
		if p.Progress != nil {
			p.Progress(done, total)
		}
	}
	return nil
}

func (c *qcowContainer) stream(context.Context, io.Writer, *Key, Pipeline, bool) (int64, error) {
	return 0, fmt.Errorf("image: DecryptFileStream of a %s image with integrity %v", Qcow2, false)
}

func (c *qcowContainer) verify(context.Context, *Key, Pipeline) (*VerifyReport, error) {
	return nil, header.ErrNotAuthenticated
}

func (c *qcowContainer) view(f *os.File, k *Key, readOnly bool) (View, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return newQcowView(f, k.Cipher, st.Size(), readOnly)
}

// resize is qcow2.Editor.Resize: a new L1 table, if needed, written and
// synced before the one header write that switches size and table.
func (c *qcowContainer) resize(e *Encrypted, f File, size int64, o ResizeOptions) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	ed, err := qcow2.OpenEdit(f, st.Size())
	if err != nil {
		return err
	}
	old := c.im.Size
	if size < old {
		if !o.DataLoss {
			if at, ok, err := storedFrom(ed, size); err != nil {
				return err
			} else if ok {
				return fmt.Errorf("%w (data at guest offset %d, the new size is %d)", ErrDataLoss, at, size)
			}
		}
		err = ed.Resize(size, f.Truncate)
	} else {
		if err := zeroTail(ed, f, o.Key); err != nil {
			return err
		}
		err = ed.Resize(size, nil)
	}
	if err != nil {
		return err
	}
	if st, err = f.Stat(); err != nil {
		return err
	}
	im, err := qcow2.Open(f, st.Size())
	if err != nil {
		return fmt.Errorf("image: the resized qcow2 image does not read back: %w", err)
	}
	c.im = im
	e.Qcow2, e.PayloadSize, e.FileSize = im, im.Size, st.Size()
	return nil
}

// storedFrom reports the first guest offset at or after from that holds
// stored data (a data or compressed cluster).
func storedFrom(ed *qcow2.Editor, from int64) (int64, bool, error) {
	size := ed.Image().Size
	for pos := from; pos < size; {
		m, err := ed.Lookup(pos, size-pos)
		if err != nil {
			return 0, false, err
		}
		if m.Kind == qcow2.Data || m.Kind == qcow2.Compressed {
			return max(pos, m.GuestOffset), true, nil
		}
		pos = m.GuestOffset + m.Length
	}
	return 0, false, nil
}

// zeroTail overwrites the host bytes of the last guest cluster past the
// old size with encrypted zeros, when that cluster is stored in place, so
// that a grown image reads zeros there: the bytes were never part of the
// image (qemu leaves them as they are). They are synced before the header
// makes them visible.
func zeroTail(ed *qcow2.Editor, f File, k *Key) error {
	old, cs := ed.Image().Size, ed.Image().ClusterSize
	if old%cs == 0 {
		return nil
	}
	m, err := ed.Lookup(old-1, 1)
	if err != nil {
		return err
	}
	if m.Kind != qcow2.Data || !m.InPlace {
		return nil
	}
	if k == nil {
		return ErrKeyNeeded
	}
	host := m.HostOffset + old - m.GuestOffset // the host byte of the old end
	n := cs - old%cs
	buf := make([]byte, n)
	if err := k.Cipher.EncryptSectors(buf, make([]byte, n), qcowIV(host)); err != nil {
		return err
	}
	if _, err := f.WriteAt(buf, host); err != nil {
		return fmt.Errorf("failed to write %s: %w", nameOf(f), err)
	}
	return f.Sync()
}

// qcowOutput writes a qcow2+LUKS image: the LUKS1 header in clusters of
// its own, as qemu does, and only the clusters that hold non-zero data, as
// qemu-img convert does, so the work is proportional to the data, not to
// the virtual size.
type qcowOutput struct{}

func (qcowOutput) params(p *header.Params, _ int64, detached bool) error {
	if p.AlignSectors == 0 {
		// qemu does not round the payload offset of an embedded header.
		p.AlignSectors = 8
	}
	if err := Qcow2.CarriesVersion(p.Version); err != nil {
		return err
	}
	if detached {
		return errors.New("a detached header goes with a raw output only")
	}
	return nil
}

// create writes the qcow2 metadata, and Encrypt allocates only the
// clusters the (empty) data map names: none.
func (qcowOutput) create(ctx context.Context, dst *os.File, size int64, o EncryptOptions) (header.Header, error) {
	return Encrypt(ctx, dst, zeroPlain(size), o)
}

func (qcowOutput) encrypt(ctx context.Context, dst *os.File, src *Plain, f *Formatted, o EncryptOptions) error {
	if f.Key.Auth != nil {
		return fmt.Errorf("%w: qcow2 output (qemu has no LUKS2)", ErrAuthenticatedUnsupported)
	}
	area, copied := f.wholeArea()
	if copied {
		defer clearArea(area)
	}
	w, err := qcow2.Create(dst, src.Size, qcow2.CreateOptions{ClusterSize: o.ClusterSize, CryptLength: int64(len(area))})
	if err != nil {
		return err
	}
	if _, err := dst.WriteAt(area, w.CryptOffset()); err != nil {
		return fmt.Errorf("failed to write header: %w", err)
	}
	// A qcow2 input's map already says which clusters are unallocated or
	// zero; a raw input's all-zero clusters are found by reading them, and
	// left unallocated as qemu-img convert does.
	var runs []Range
	if src.Format == Qcow2 {
		runs = clusterRuns(src.dataMap(), w.ClusterSize(), src.Size)
	} else if runs, err = nonZeroClusters(ctx, src.guest, src.dataMap(), w.ClusterSize(), src.Size); err != nil {
		return err
	}
	var ext []sectors.Extent
	var total int64
	for _, r := range runs {
		host, err := w.AllocateData(r.Offset, r.Length)
		if err != nil {
			return err
		}
		// An allocated cluster is encrypted whole, zeros included: qemu
		// decrypts every byte of it.
		ext = append(ext, sectors.Extent{SrcOffset: r.Offset, DstOffset: host, Length: r.Length, Sector: qcowIV(host)})
		total += r.Length
	}
	if err := sectors.Run(ctx, dst, src.guest, ext, f.Key.Cipher.EncryptSectors, o.Pipeline.options(total, false)); err != nil {
		return err
	}
	return w.Close()
}

// qcowConvertible refuses a conversion of a qcow2 image's header: qemu
// knows LUKS1 only there, and the header is LUKS1 already.
func qcowConvertible(version int) error {
	if err := Qcow2.CarriesVersion(version); err != nil {
		return err
	}
	return fmt.Errorf("%w to LUKS1: the header is LUKS1 already", header.ErrConvert)
}

// refuseQcow2 refuses a qcow2 image to the in-place conversions that move
// the payload (encryption and decryption with the header in the image):
// they work on raw images only.
func refuseQcow2(img io.ReaderAt) error {
	if qcow2.IsQcow2(img) {
		return ErrInPlaceQcow2
	}
	return nil
}
