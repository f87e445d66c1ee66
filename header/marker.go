package header

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// markedMagic is the magic cryptsetup writes over a LUKS1 header while it
// reencrypts the device (cryptsetup-reencrypt, LUKS1), so that nothing
// opens the half-converted data as a normal LUKS device. cryptimg uses the
// same marking for its own unfinished operations.
var markedMagic = [6]byte{'L', 'U', 'K', 'S', 0xDE, 0xAD}

// ErrMarked reports a header marked by an unfinished reencryption,
// in-place encryption or decryption, or conversion: the magic
// LUKS\xde\xad, or a LUKS2 header with the busy requirement. It also matches
// ErrNotLUKS with errors.Is, since cryptsetup treats such a header as not
// LUKS.
var ErrMarked error = markedError{}

type markedError struct{}

func (markedError) Error() string {
	return "busy: the image is marked by an unfinished reencryption, in-place operation or conversion (magic LUKS\\xde\\xad, or the LUKS2 requirement " + busyRequirement + "); running the same operation again finishes it"
}

// Is matches ErrNotLUKS as well as ErrMarked itself.
func (markedError) Is(target error) bool { return target == ErrNotLUKS }

// IsMarked reports whether b starts with the LUKS\xde\xad magic.
func IsMarked(b []byte) bool { return bytes.HasPrefix(b, markedMagic[:]) }

// IsLUKSMagic reports whether b starts with the normal LUKS magic.
func IsLUKSMagic(b []byte) bool { return bytes.HasPrefix(b, magic[:]) }

// Mark overwrites the magic at the start of b (a phdr or its first sector)
// with LUKS\xde\xad. It panics if b is shorter than the magic.
func Mark(b []byte) {
	if len(b) < len(markedMagic) {
		panic("header: Mark needs at least 6 bytes")
	}
	copy(b, markedMagic[:])
}

// Unmark puts the normal LUKS magic back at the start of b. It panics if b
// is shorter than the magic.
func Unmark(b []byte) {
	if len(b) < len(magic) {
		panic("header: Unmark needs at least 6 bytes")
	}
	copy(b, magic[:])
}

// ReadMarked is [Read] for a header that may carry the mark of an
// unfinished operation: a marked magic reads as the LUKS magic, so the
// header behind the mark is parsed and validated as usual.
func ReadMarked(r io.ReaderAt, base, size int64) (Header, error) {
	return read(unmarkReader{r: r, base: base}, base, size, true)
}

// Marked reports whether the header at base carries the mark of an
// unfinished operation: the LUKS\xde\xad magic, or a LUKS2 header whose
// copy in use has the busy requirement. A header that does not read is
// not marked; only I/O errors are returned.
func Marked(r io.ReaderAt, base, size int64) (bool, error) {
	var b [8]byte
	n, err := r.ReadAt(b[:], base)
	if n < len(b) {
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("reading LUKS header: %w", err)
		}
		return false, nil
	}
	if IsMarked(b[:]) {
		return true, nil
	}
	if IsLUKSMagic(b[:]) && binary.BigEndian.Uint16(b[offVersion:]) != 2 {
		return false, nil
	}
	// A LUKS2 header, or one whose primary copy is lost (Read's probe).
	h, err := readLUKS2(r, base, size)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotLUKS) {
			return false, nil
		}
		return false, err
	}
	return h.busy, nil
}

// Mark is the update that marks h in place as busy with an unfinished
// operation: h's first sector with the LUKS\xde\xad magic. Run it before
// the image stops being what h says; Install or Unmark ends the mark.
func (h *LUKS1) Mark() (*Update, error) {
	first := h.Marshal()[:SectorSize]
	Mark(first)
	return &Update{Writes: []Write{{Offset: 0, Data: first, What: "image marker", Sync: true}}, Header: h}, nil
}

// Unmark is the update that ends Mark: h's first sector as it is.
func (h *LUKS1) Unmark() (*Update, error) {
	return &Update{Writes: []Write{{Offset: 0, Data: h.Marshal()[:SectorSize], What: "header", Sync: true}}, Header: h}, nil
}

// MarkedBytes is the part of the header area Mark and Unmark write: the
// first sector.
func (h *LUKS1) MarkedBytes() int64 { return SectorSize }

// Install is the update that writes area, the complete header area of h
// (from Rekey), over a marked header: everything but the first sector,
// then the first sector still marked, then with the real magic, so the
// image is marked until the last write.
func (h *LUKS1) Install(area []byte) *Update {
	first := bytes.Clone(area[:SectorSize])
	Mark(first)
	return &Update{Writes: []Write{
		{Offset: SectorSize, Data: area[SectorSize:], What: "header"},
		{Offset: 0, Data: first, What: "header", Sync: true},
		{Offset: 0, Data: area[:SectorSize], What: "header", Sync: true},
	}, Header: h}
}

// unmarkReader reads r, with a LUKS\xde\xad magic at base read as LUKS\xba\xbe.
type unmarkReader struct {
	r    io.ReaderAt
	base int64
}

func (u unmarkReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := u.r.ReadAt(p, off)
	if off <= u.base && u.base < off+int64(n) {
		if b := p[u.base-off : n]; IsMarked(b) {
			Unmark(b)
		}
	}
	return n, err
}
