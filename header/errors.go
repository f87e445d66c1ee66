package header

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cryptimg/cryptimg/header/cipher"
)

var (
	// ErrNotLUKS reports data that does not start with the LUKS magic.
	ErrNotLUKS = errors.New("not a LUKS device (bad magic)")

	// ErrCorrupt reports a structurally invalid header or key slot area, or
	// one that does not fit in the file. A *ParseError wraps it.
	ErrCorrupt = errors.New("corrupt LUKS header")

	// ErrNoMatchingKeyslot reports that the passphrase opened none of the
	// active key slots tried.
	ErrNoMatchingKeyslot = errors.New("no key available with this passphrase")

	// ErrNoActiveKeyslot reports that no key slot that could be tried is
	// active.
	ErrNoActiveKeyslot = errors.New("no active key slot")

	// ErrInvalidUUID reports a UUID that is not in the canonical
	// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form (cryptsetup's wording).
	ErrInvalidUUID = errors.New("wrong LUKS UUID format provided")
)

// ParseError describes a structurally invalid header. It matches ErrCorrupt
// with errors.Is.
type ParseError struct {
	Field string // the offending field, e.g. "version" or "key slot 3: stripes"
	Err   error  // what is wrong with it
}

func (e *ParseError) Error() string {
	return "invalid LUKS header: " + e.Field + ": " + e.Err.Error()
}

// Unwrap returns the underlying error.
func (e *ParseError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *ParseError) Is(target error) bool { return target == ErrCorrupt }

func parseErrorf(field, format string, args ...any) error {
	return &ParseError{Field: field, Err: fmt.Errorf(format, args...)}
}

// UnsupportedCipherError reports a cipher specification this package cannot
// handle.
type UnsupportedCipherError struct {
	Spec string // e.g. "aes-xts-plain64"
}

func (e *UnsupportedCipherError) Error() string {
	return fmt.Sprintf("unsupported cipher %q (supported: %s)", e.Spec, strings.Join(cipher.Supported(), ", "))
}

// UnsupportedHashError reports a hash this package cannot use for PBKDF2 and
// the AF splitter.
type UnsupportedHashError struct {
	Hash string
}

func (e *UnsupportedHashError) Error() string {
	return fmt.Sprintf("unsupported hash %q (supported: sha1, sha256, sha512)", e.Hash)
}
