package image

// The container seam. An encrypted image is a LUKS header and a payload of
// encrypted sectors, kept by a container: a raw file (container_raw.go), a
// raw or integrity payload whose header is in a file of its own
// (container_detached.go), a qcow2 file (container_qcow2.go), or a
// dm-integrity device of sectors and their tags (container_integrity.go). Each says where it keeps its
// LUKS area, which extents of which file hold the payload and with which
// IV unit each begins (iv.go), and how the payload is written out,
// streamed, verified, viewed and resized. Encrypted holds one container;
// nothing outside the container files asks which kind it is. The
// in-place operations find the LUKS area and the payload through the
// same functions (findArea, newContainer) as Open.

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

// luksArea is where a container keeps its LUKS header: the file holding it
// (the image, or a detached header file), the header's byte offset there,
// and how many bytes from that offset the area may take.
type luksArea struct {
	r     io.ReaderAt
	off   int64
	limit int64
	own   bool // a header file of its own (detached), not the image
}

// container is one opened encrypted image's container.
type container interface {
	// format is the container format the image reports (Raw or Qcow2).
	format() Format
	// area is where the LUKS header lives.
	area() luksArea
	// room is how many bytes a new header area may take where the
	// current one is (the in-place header rewrites).
	room() int64
	// file is the file holding the payload.
	file() io.ReaderAt
	// payload is the byte offset of a raw payload in its file (0 where
	// the payload is not one run: qcow2) and the plaintext size.
	payload() (offset, size int64)
	// tagLayout is where the sectors' tags are (LUKS2 integrity), nil
	// for a container without tags.
	tagLayout() *integrity.Geometry
	// extents lists the encrypted data in plaintext order: SrcOffset
	// where it lies in the data file, DstOffset its plaintext offset,
	// Sector the IV unit of its first sector. Plaintext that a container
	// keeps unencrypted (qcow2's compressed clusters) is not listed.
	extents() ([]sectors.Extent, error)
	// plain is the decrypted view v of the image as a plaintext image,
	// with the map of where its data may be non-zero (Clone's input).
	plain(v View) (*Plain, error)
	// qcow2Header is the parsed qcow2 header, nil for other containers.
	qcow2Header() *qcow2.Image
	// clusterSize is the cluster size a qcow2 output of the plaintext
	// takes by default: the container's own, or 0 for the default.
	clusterSize() int64
	// decrypt writes the plaintext to w at plaintext offsets, leaving
	// zeros unwritten where w is sparse (see DecryptOptions).
	decrypt(ctx context.Context, w io.WriterAt, k *Key, o DecryptOptions) error
	// stream writes the plaintext to w in order and returns its length
	// (see DecryptAuthStream for allowCorrupt).
	stream(ctx context.Context, w io.Writer, k *Key, p Pipeline, allowCorrupt bool) (int64, error)
	// verify checks every sector's tag, making no plaintext.
	verify(ctx context.Context, k *Key, p Pipeline) (*VerifyReport, error)
	// view is the plaintext of the image in f, read and written in place.
	view(f *os.File, k *Key, readOnly bool) (View, error)
	// resize sets the plaintext size of e's image in f (e holds this
	// container), in the container's crash-safe order, and updates e.
	resize(e *Encrypted, f File, size int64, o ResizeOptions) error
}

// The containers and outputs.
var (
	_ container = (*rawContainer)(nil)
	_ container = (*detachedContainer)(nil)
	_ container = (*qcowContainer)(nil)
	_ container = (*integrityContainer)(nil)
	_ output    = rawOutput{}
	_ output    = qcowOutput{}
)

// findArea locates the LUKS area of the image r of size bytes: in a qcow2
// image where its full-disk-encryption header extension points (im is then
// the parsed qcow2 header), else at the start of the file, the whole file
// being its limit. It is the only place that knows where an image keeps its
// LUKS area.
func findArea(r io.ReaderAt, size int64) (a luksArea, im *qcow2.Image, err error) {
	if !qcow2.IsQcow2(r) {
		return luksArea{r: r, limit: size}, nil, nil
	}
	if im, err = qcow2.Open(r, size); err != nil {
		return luksArea{}, nil, err
	}
	if im.CryptMethod != qcow2.CryptLUKS {
		return luksArea{}, nil, fmt.Errorf("%w: qcow2 image with crypt method %d (want LUKS)", ErrNotEncrypted, im.CryptMethod)
	}
	return luksArea{r: r, off: im.CryptOffset, limit: im.CryptLength}, im, nil
}

// newContainer is the container of the image whose LUKS area is a (found
// by findArea, or a detached header file) and whose header is h: im is the
// qcow2 header findArea gave, data the file holding the payload, of
// dataSize bytes, named dataName in messages ("file" for the image itself).
func newContainer(a luksArea, im *qcow2.Image, h header.Header, data io.ReaderAt, dataSize int64, dataName string) (container, error) {
	if im != nil {
		return newQcowContainer(a, im, h)
	}
	if a.own {
		return newDetached(a, h, data, dataSize, dataName)
	}
	base, err := attachedPayload(h)
	if err != nil {
		return nil, err
	}
	return newPayload(a, h, data, base, dataSize, dataName)
}

// newPayload is the container of a payload that starts at byte base of
// data (dataSize bytes) and runs to its end or the header's fixed size:
// plain sectors, or a dm-integrity device when the header says so.
func newPayload(a luksArea, h header.Header, data io.ReaderAt, base, dataSize int64, dataName string) (container, error) {
	its := "" // under a detached header: "its payload"
	if a.own {
		its = "its "
	}
	if dataSize < base {
		return nil, fmt.Errorf("%w: %s is %d bytes, %spayload starts at %d", ErrTruncated, dataName, dataSize, its, base)
	}
	i := h.Info()
	size := dataSize - base
	if i.PayloadSize != 0 {
		if i.PayloadSize > size {
			return nil, fmt.Errorf("%w: %s is %d bytes, %spayload ends at %d", ErrTruncated, dataName, dataSize, its, base+i.PayloadSize)
		}
		size = i.PayloadSize
	}
	if i.Integrity != "" {
		// The integrity superblock says what the payload holds.
		return newIntegrity(a, h, data, base, dataSize)
	}
	if size%int64(i.SectorSize) != 0 {
		return nil, fmt.Errorf("%w: payload of %d bytes is not a whole number of %d-byte sectors", ErrTruncated, size, i.SectorSize)
	}
	return &rawContainer{luks: a, data: data, base: base, size: size}, nil
}

// attachedPayload returns the payload offset of h, in bytes, refusing a
// detached header (payload offset 0), whose data lives elsewhere.
func attachedPayload(h header.Header) (int64, error) {
	p := h.Info().PayloadOffset
	if p == 0 {
		return 0, ErrDetached
	}
	return p, nil
}

// newEncrypted wraps a container and its header as an Encrypted.
func newEncrypted(c container, h header.Header, fileSize int64) *Encrypted {
	e := &Encrypted{Header: h, FileSize: fileSize}
	e.set(c)
	return e
}

// set makes c e's container and its exported fields c's.
func (e *Encrypted) set(c container) {
	e.c = c
	e.Format = c.format()
	e.HeaderOffset = c.area().off
	e.PayloadOffset, e.PayloadSize = c.payload()
	e.Qcow2 = c.qcow2Header()
}

// output is how a new image of one container format is laid out and
// written (Encrypt, EncryptTo).
type output interface {
	// params adjusts the parameters of the new header to the container,
	// for size bytes of plaintext, or refuses them.
	params(p *header.Params, size int64, detached bool) error
	// encrypt writes src under the header and key of f to dst, an empty
	// file. A detached header (payload offset 0) is the caller's to store.
	encrypt(ctx context.Context, dst *os.File, src *Plain, f *Formatted, o EncryptOptions) error
	// create writes a new image of size bytes of zero plaintext (Create).
	create(ctx context.Context, dst *os.File, size int64, o EncryptOptions) (header.Header, error)
}

// outputOf is the output of format. A raw output of an authenticated
// header is a dm-integrity device (integrityOutput).
func outputOf(format Format) (output, error) {
	switch format {
	case Raw:
		return rawOutput{}, nil
	case Qcow2:
		return qcowOutput{}, nil
	}
	return nil, fmt.Errorf("unknown output format %q (want raw or qcow2)", format)
}

// toFile turns extents as container.extents lists them (from the file to
// the plaintext) around: from plaintext offset SrcOffset to the file at
// DstOffset, for writing a new image.
func toFile(ext []sectors.Extent) []sectors.Extent {
	out := make([]sectors.Extent, len(ext))
	for i, x := range ext {
		x.SrcOffset, x.DstOffset = x.DstOffset, x.SrcOffset
		out[i] = x
	}
	return out
}

// packed lists extents as the in-place operations walk them: SrcOffset
// the position in the stream of all encrypted bytes, in order, and
// DstOffset where they lie in the file. It returns their total length.
func packed(ext []sectors.Extent) ([]sectors.Extent, int64) {
	out := make([]sectors.Extent, 0, len(ext))
	var pos int64
	for _, x := range ext {
		out = append(out, sectors.Extent{SrcOffset: pos, DstOffset: x.SrcOffset, Length: x.Length, Sector: x.Sector})
		pos += x.Length
	}
	return out, pos
}

// located is an image's LUKS area as the in-place operations find it:
// findArea's, or a detached header file's. The header is read apart
// (readPhdr accepts a marked one), and the container only from a header
// that is whole: an operation that finishes may find its header half
// written.
type located struct {
	img  File
	hf   File // the file holding the header: img, or a detached header file
	area luksArea
	qcow *qcow2.Image
}

// locate is locateLUKS, or the detached header file hdr when it is set.
func locate(img, hdr File) (*located, error) {
	if hdr == nil {
		return locateLUKS(img)
	}
	size, err := storageSize(hdr)
	if err != nil {
		return nil, err
	}
	return &located{img: img, hf: hdr, area: luksArea{r: hdr, limit: size, own: true}}, nil
}

// locateLUKS finds the LUKS area of img (findArea).
func locateLUKS(img File) (*located, error) {
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	a, im, err := findArea(img, size)
	if err != nil {
		return nil, err
	}
	return &located{img: img, hf: img, area: a, qcow: im}, nil
}

// readPhdr reads the header, accepting the marking of an unfinished
// operation.
func (l *located) readPhdr() (header.Header, error) {
	return header.ReadMarked(l.hf, l.area.off, l.area.limit)
}

// container is the image's container under its header h.
func (l *located) container(h header.Header) (container, error) {
	size, err := storageSize(l.img)
	if err != nil {
		return nil, err
	}
	return newContainer(l.area, l.qcow, h, l.img, size, "file")
}

// format is the container format of the image.
func (l *located) format() Format {
	if l.qcow != nil {
		return Qcow2
	}
	return Raw
}

// convertible refuses a conversion of the header to LUKS version where
// the container cannot hold that version.
func (l *located) convertible(version int) error {
	if l.qcow != nil {
		return qcowConvertible(version)
	}
	return nil
}

// inPlaceExtents are the encrypted extents of c in the order the in-place
// operations walk them (packed), with their total length.
func inPlaceExtents(c container) ([]sectors.Extent, int64, error) {
	ext, err := c.extents()
	if err != nil {
		return nil, 0, err
	}
	out, total := packed(ext)
	return out, total, nil
}

// restoreArea is where a header restore writes into the image f of size
// bytes: the LUKS area's offset and, where the container gives the area
// a size of its own (qcow2), that size; else -1, the area ending at the
// payload the backup names. It needs no readable header.
func restoreArea(f io.ReaderAt, size int64) (off, limit int64, err error) {
	a, im, err := findArea(f, size)
	switch {
	case errors.Is(err, ErrNotEncrypted):
		return 0, 0, fmt.Errorf("%w: qcow2 image is not LUKS-encrypted", header.ErrNotLUKS)
	case err != nil:
		return 0, 0, fmt.Errorf("cannot locate the LUKS area: %w", err)
	case im == nil:
		return a.off, -1, nil
	}
	return a.off, a.limit, nil
}
