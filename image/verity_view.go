package image

import (
	"errors"
	"fmt"
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
