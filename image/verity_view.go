package image

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cryptimg/cryptimg/image/verity"
)

// verityView is the read-only View of data under a dm-verity tree: every
// read goes through a verity.Reader, which checks the blocks it returns,
// so a block that does not match its hash fails the read with a
// *verity.CorruptError, as dm-verity fails it with EIO.
type verityView struct {
	r      *verity.Reader
	close  func() error
	closed atomic.Bool
}

// VerityView returns a read-only View of what r reads: the data blocks its
// tree covers, each checked as it is read. Writes fail with ErrReadOnly.
// Close calls closeFn, if not nil, once: it releases what r reads from
// (the plaintext View of an encrypted image, say).
func VerityView(r *verity.Reader, closeFn func() error) View {
	return &verityView{r: r, close: closeFn}
}

func (v *verityView) ReadAt(p []byte, off int64) (int, error) {
	if v.closed.Load() {
		return 0, ErrClosed
	}
	if off < 0 {
		return 0, fmt.Errorf("image: negative offset %d", off)
	}
	n, err := v.r.ReadAt(p, off)
	if errors.Is(err, verity.ErrCorrupt) {
		err = fmt.Errorf("dm-verity: %w", err)
	}
	return n, err
}

func (v *verityView) WriteAt(p []byte, off int64) (int, error) { return 0, ErrReadOnly }

func (v *verityView) Size() int64 { return v.r.Size() }

func (v *verityView) Sync() error {
	if v.closed.Load() {
		return ErrClosed
	}
	return nil
}

func (v *verityView) Close() error {
	if v.closed.Swap(true) || v.close == nil {
		return nil
	}
	return v.close()
}

// readWriterAt is what a plainStore reads and writes the ciphertext
// through: the image file, or a reader of it that refuses writes.
type readWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// readOnlyAt refuses writes to a reader.
type readOnlyAt struct{ io.ReaderAt }

func (readOnlyAt) WriteAt([]byte, int64) (int, error) { return 0, ErrReadOnly }

// ViewOver is a read-only View of the plaintext of a raw LUKS image e
// whose file is read through r instead of the file itself: r holds the
// file's bytes at the same offsets, typically a *verity.Reader that checks
// each block of the file against its dm-verity tree before it is
// decrypted, as a crypt mapping stacked on a verity one reads. A read
// that r fails fails with r's error. If r has a Size method, the view
// ends where r does, as a crypt device on a smaller verity device. Only raw images with the header in
// the file or detached (not qcow2, not integrity) are supported.
func (e *Encrypted) ViewOver(r io.ReaderAt, k *Key) (View, error) {
	if k == nil || k.Cipher == nil {
		panic("image: ViewOver with a nil key")
	}
	c, ok := e.c.(*rawContainer)
	if !ok {
		return nil, errors.New("image: only a raw LUKS image without integrity can be read through another reader")
	}
	size := c.size
	if sr, ok := r.(interface{ Size() int64 }); ok {
		size = max(0, min(size, sr.Size()-c.base))
	}
	ss := k.Cipher.Geometry().SectorSize
	v := &rawView{store: plainStore{f: readOnlyAt{r}, c: k.Cipher, base: c.base}, ss: int64(ss)}
	v.viewCore = viewCore{size: size &^ int64(ss-1), readOnly: true, flush: func() error { return nil }}
	v.bufs.size = viewChunk + 2*ss
	return v, nil
}
