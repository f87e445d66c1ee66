package header

import "bytes"

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
