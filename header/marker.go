package header

import (
	"bytes"
	"io"
)

// markedMagic is the magic cryptsetup writes over a LUKS1 header while it
// reencrypts the device (cryptsetup-reencrypt, LUKS1), so that nothing
// opens the half-converted data as a normal LUKS device. cryptimg uses the
// same marking for its own unfinished operations.
var markedMagic = [6]byte{'L', 'U', 'K', 'S', 0xDE, 0xAD}

// ErrMarked reports a header whose magic is LUKS\xde\xad: an unfinished
// reencryption, in-place encryption or decryption. It also matches
// ErrNotLUKS with errors.Is, since cryptsetup treats such a header as not
// LUKS.
var ErrMarked error = markedError{}

type markedError struct{}

func (markedError) Error() string {
	return "busy: the image is marked by an unfinished reencryption, in-place encryption or decryption (magic LUKS\\xde\\xad); running the same operation again finishes it"
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
	return Read(unmarkReader{r: r, base: base}, base, size)
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
