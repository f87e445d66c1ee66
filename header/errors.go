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

// ErrNullCipher is wrapped by every *NullCipherError.
var ErrNullCipher = errors.New("null cipher refused")

// NullCipherError reports a LUKS2 keyslot or data segment whose cipher is
// the null cipher: its key material or data is not encrypted, so anyone who
// could write the header could have written it. It is refused unless the
// caller allows it ([AllowNullCipher]).
type NullCipherError struct {
	Object string // "keyslot 0", "segment 0"
	Spec   string // "cipher_null-ecb"
}

func (e *NullCipherError) Error() string {
	return fmt.Sprintf("%s is not encrypted (cipher %q): refused", e.Object, e.Spec)
}

func (e *NullCipherError) Unwrap() error { return ErrNullCipher }

// ErrUnusable is wrapped by every *UnusableError.
var ErrUnusable = errors.New("a part of the header that cryptimg cannot use")

// UnusableError reports a part of a LUKS2 header that cryptimg reads,
// shows and keeps, but cannot use: a keyslot, digest or segment of a type or
// with a KDF it does not know, or with a kernel crypto API cipher name. As
// in cryptsetup, the header loads and only what needs that part fails.
type UnusableError struct {
	Object string // "keyslot 0", "segment 0", "digest 1"
	Reason string
}

func (e *UnusableError) Error() string { return e.Object + ": " + e.Reason }

func (e *UnusableError) Unwrap() error { return ErrUnusable }
