// Package cipher parses cryptsetup cipher specifications ("aes-xts-plain64",
// "aes-cbc-essiv:sha256", ...) and builds the sector ciphers they name. It is
// the one place that knows which specifications cryptimg supports: each
// cipher mode lives in a file of its own and registers itself here, so a new
// mode is a new file and nothing else.
//
// Sector numbers ("IV sectors") are given by the caller: they count 512-byte
// units, as dm-crypt does without iv_large_sectors, also when a sector is
// larger than 512 bytes. Which number a sector gets is the container's
// business (package image), never this package's.
package cipher

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Sector encrypts and decrypts runs of consecutive disk sectors.
//
// EncryptSectors encrypts len(src)/sectorSize sectors; the first has IV
// sector firstSector and each next one sectorSize/512 more. sectorSize is
// 512 or a larger power of two up to 4096; len(src) is a multiple of it; dst
// is at least as long as src and the two overlap entirely or not at all.
// Violations are programming errors and panic. Implementations are safe for
// concurrent use and make no allocations per call.
type Sector interface {
	EncryptSectors(dst, src []byte, firstSector uint64, sectorSize int)
	DecryptSectors(dst, src []byte, firstSector uint64, sectorSize int)
	// Clear overwrites the expanded keys; the cipher is unusable afterwards.
	Clear()
}

// Mode is one registered cipher mode of a cipher name, such as "xts-plain64"
// of "aes".
type Mode struct {
	Name     string // cipher name, "aes"
	Mode     string // cipher mode, "xts-plain64"
	KeyBytes []int  // accepted volume key sizes, ascending
	// DefaultKeyBytes is what cryptsetup luksFormat --type luks1 uses when no
	// --key-size is given.
	DefaultKeyBytes int
	// New returns the cipher for a key of one of the KeyBytes sizes. The key
	// slice is not retained.
	New func(key []byte) (Sector, error)
}

// Spec is the cryptsetup form, "aes-xts-plain64".
func (m *Mode) Spec() string { return m.Name + "-" + m.Mode }

// ValidKey reports whether n bytes is a key size of this mode.
func (m *Mode) ValidKey(n int) bool {
	for _, k := range m.KeyBytes {
		if k == n {
			return true
		}
	}
	return false
}

// KeyBits lists the accepted key sizes in bits, "256, 384 or 512".
func (m *Mode) KeyBits() string {
	var s []string
	for _, k := range m.KeyBytes {
		s = append(s, strconv.Itoa(k*8))
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

var registry = map[string]*Mode{}

// register adds a mode; each mode's file calls it from init.
func register(m *Mode) {
	if _, dup := registry[m.Spec()]; dup {
		panic("cipher: " + m.Spec() + " registered twice")
	}
	registry[m.Spec()] = m
}

// Supported lists the supported specifications, sorted.
func Supported() []string {
	var s []string
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ErrUnsupported is wrapped by every *UnsupportedError.
var ErrUnsupported = errors.New("unsupported cipher")

// UnsupportedError reports a cipher specification that is not registered.
type UnsupportedError struct {
	Spec string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("unsupported cipher %q (supported: %s)", e.Spec, strings.Join(Supported(), ", "))
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }

// Lookup finds the mode for a LUKS1 cipher-name and cipher-mode pair. Names
// are matched exactly, as the kernel's crypto API does.
func Lookup(name, mode string) (*Mode, error) {
	if m, ok := registry[name+"-"+mode]; ok {
		return m, nil
	}
	return nil, &UnsupportedError{Spec: name + "-" + mode}
}

// Parse finds the mode for a cryptsetup --cipher specification,
// "aes-xts-plain64".
func Parse(spec string) (*Mode, error) {
	if m, ok := registry[spec]; ok {
		return m, nil
	}
	return nil, &UnsupportedError{Spec: spec}
}

// KeySizeError reports a key of a size its mode does not take.
type KeySizeError struct {
	Mode *Mode
	Size int // bytes
}

func (e *KeySizeError) Error() string {
	return fmt.Sprintf("%d-bit key is invalid for %s (want %s)", e.Size*8, e.Mode.Spec(), e.Mode.KeyBits())
}

// NewSector returns the sector cipher of mode m for key, checking its size.
func (m *Mode) NewSector(key []byte) (Sector, error) {
	if !m.ValidKey(len(key)) {
		return nil, &KeySizeError{Mode: m, Size: len(key)}
	}
	return m.New(key)
}

// check panics on misuse of a Sector method, with the same checks and order
// everywhere.
func check(prefix string, dst, src []byte, sectorSize int) {
	if sectorSize < 512 || sectorSize > 4096 || sectorSize&(sectorSize-1) != 0 {
		panic(prefix + ": invalid sector size " + strconv.Itoa(sectorSize))
	}
	if len(src)%sectorSize != 0 {
		panic(prefix + ": input not full sectors")
	}
	if len(dst) < len(src) {
		panic(prefix + ": output smaller than input")
	}
	if inexactOverlap(dst[:len(src)], src) {
		panic(prefix + ": invalid buffer overlap")
	}
}
