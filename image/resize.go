package image

// Changing the virtual size of an encrypted image in place, as cryptsetup
// resize (with the file's truncate) and qemu-img resize do. Each step is a
// single durable change that leaves an image of the old or of the new
// size, both readable:
//
//   - raw LUKS1, or LUKS2 whose data segment is "dynamic" (the payload runs
//     to the end of the file): the truncate, synced, is the resize;
//   - LUKS2 with a fixed-size segment: growing extends the file first (the
//     header still says the old size), then commits the new size in both
//     metadata copies (header.LUKS2.WithDataSize); shrinking commits the
//     metadata first, then cuts the file;
//   - qcow2+LUKS: qcow2.Editor.Resize (a new L1 table, if needed, written
//     and synced before the one header write that switches size and table).

import (
	"errors"
	"fmt"
)

var (
	// ErrShrink refuses a size below the current one without
	// ResizeOptions.Shrink: everything past the new size is lost.
	ErrShrink = errors.New("the new size is smaller than the image: shrinking cuts off the data past it")
	// ErrDataLoss refuses a qcow2 shrink that would drop clusters holding
	// data, without ResizeOptions.DataLoss.
	ErrDataLoss = errors.New("allocated clusters lie beyond the new size; their data would be lost")
	// ErrKeyNeeded reports a qcow2 grow that has to write encrypted zeros
	// over the tail of the last cluster (the old size ends inside it) and
	// got no key. Nothing was written.
	ErrKeyNeeded = errors.New("growing this image writes encrypted zeros after its old end, which needs its key")
)

// ResizeOptions guard a resize.
type ResizeOptions struct {
	// Shrink permits a size below the current one.
	Shrink bool
	// DataLoss permits a qcow2 shrink that drops allocated clusters.
	// Raw images have no allocation map: Shrink alone cuts them.
	DataLoss bool
	// Key is the image's unlocked key. Only growing a qcow2 image whose old
	// size ends inside an allocated cluster needs it (see ErrKeyNeeded).
	Key *Key
}

// ResizeResult says what Resize did.
type ResizeResult struct {
	OldSize, NewSize int64 // virtual (plaintext) sizes in bytes
	Format           Format
	// FixedSegment is set for a LUKS2 data segment of fixed size, whose
	// size in the metadata was updated.
	FixedSegment bool
}

// Changed reports whether the size changed.
func (r ResizeResult) Changed() bool { return r.OldSize != r.NewSize }

// Resize sets the virtual (plaintext) size of the image to size bytes, a
// positive whole number of its sectors; the same size changes nothing.
//
// Growing a raw image extends the file as a sparse hole, as truncating a
// file under cryptsetup does: the new range decrypts to whatever the cipher
// makes of zero ciphertext (not zeros) until it is written. Growing a qcow2
// image adds unallocated clusters, which read as zeros; when the old size
// ends inside an allocated cluster, the rest of that cluster is first
// overwritten with encrypted zeros (which needs o.Key), so it reads as
// zeros too.
//
// Shrinking needs o.Shrink, and for a qcow2 image with data past the new
// size also o.DataLoss; the clusters past it are released and the file cut.
// A raw image is truncated; the file of a fixed LUKS2 segment is cut only
// if it ended where the segment did.
//
// Images with integrity protection are refused: their size is the
// dm-integrity device's, whose tags and journal would have to be laid out
// again. On an image opened with OpenDetached the data file is resized and
// a fixed segment's size is written to the header file. e is updated to the
// new size.
func (e *Encrypted) Resize(size int64, o ResizeOptions) (ResizeResult, error) {
	i := e.Header.Info()
	r := ResizeResult{OldSize: e.PayloadSize, NewSize: size, Format: e.Format, FixedSegment: i.PayloadSize != 0}
	if i.Integrity != "" {
		return r, fmt.Errorf("resizing: %w (the integrity tags and journal would have to be laid out again)", ErrAuthenticatedUnsupported)
	}
	if size <= 0 {
		return r, fmt.Errorf("%w, not %d bytes", ErrEmptySize, size)
	}
	if size%int64(i.SectorSize) != 0 {
		return r, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrUnaligned, size, i.SectorSize)
	}
	f, ok := e.c.file().(File)
	if !ok {
		return r, errors.New("image: resizing needs the image opened read-write from a file")
	}
	if size == r.OldSize {
		return r, nil
	}
	if size < r.OldSize && !o.Shrink {
		return r, fmt.Errorf("%w (%d bytes now, %d asked for)", ErrShrink, r.OldSize, size)
	}
	return r, e.c.resize(e, f, size, o)
}
