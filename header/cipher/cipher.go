// Package cipher parses cryptsetup cipher specifications ("aes-xts-plain64",
// "aes-cbc-essiv:sha256", ...) and builds the sector ciphers they name. It is
// the one place that knows which specifications cryptimg supports: each
// cipher mode lives in a file of its own and registers itself here, so a new
// mode is a new file and nothing else. A [Mode] gives a [Sector]; an
// authenticated mode ([AuthMode]: a specification with a LUKS2 integrity
// type, cryptsetup's --integrity) gives an [AuthSector], which writes and
// checks a tag per sector. The null cipher and kernel crypto API names
// ("capi:...") are recognised ([IsNull], [IsCAPI]) but are no registered
// mode.
//
// A sector cipher is made for one [Geometry]: its sector size and how its
// IVs are numbered. Callers give each run of sectors the 512-byte unit
// number of its first sector; which number that is is the container's
// business (package image), never this package's. The cipher maps it to the
// IV as dm-crypt does: unchanged, or divided by the sectors' 512-byte units
// with iv_large_sectors.
package cipher

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Geometry is how a container cuts its encrypted data into sectors and
// numbers their IVs.
type Geometry struct {
	// SectorSize is the encryption unit in bytes: 512 (LUKS1, qcow2) or a
	// larger power of two up to 4096 (LUKS2's sector_size).
	SectorSize int
	// LargeIV numbers IVs by sector instead of by 512-byte unit, as
	// dm-crypt's iv_large_sectors option does. cryptsetup never sets it
	// for LUKS (only for BitLocker), so a LUKS2 4096-byte sector's IV
	// steps by 8.
	LargeIV bool
	// IVOffset is added to every unit before it becomes an IV: dm-crypt's
	// iv_offset, LUKS2's iv_tweak.
	IVOffset uint64
}

// UnitSize is the 512-byte unit that IVs and sector numbers count, whatever
// the encryption sector size (dm-crypt's sector, linux SECTOR_SHIFT 9), and
// the smallest encryption sector: LUKS1's and qcow2's only one.
const UnitSize = 512

// MaxSectorSize is the largest encryption sector, 4096 bytes: dm-crypt
// takes no sector larger than a page, and cryptsetup formats none larger
// (lib/libcryptsetup_macros.h MAX_SECTOR_SIZE).
const MaxSectorSize = 4096

// ValidSectorSize reports whether n is an encryption sector size: a power
// of two from UnitSize to MaxSectorSize (dm-crypt's sector_size option,
// LUKS2's segment sector_size).
func ValidSectorSize(n int) bool {
	return n >= UnitSize && n <= MaxSectorSize && n&(n-1) == 0
}

// SectorSizes lists every valid encryption sector size, ascending: 512,
// 1024, 2048 and 4096.
func SectorSizes() []int {
	var s []int
	for n := UnitSize; n <= MaxSectorSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

// LUKS1 is the geometry of LUKS1 and of qcow2's LUKS: 512-byte sectors.
var LUKS1 = Geometry{SectorSize: UnitSize}

func (g Geometry) check() error {
	if !ValidSectorSize(g.SectorSize) {
		return fmt.Errorf("invalid sector size %d (want %s)", g.SectorSize, SectorSizesText())
	}
	return nil
}

// SectorSizesText is SectorSizes for a message: "512, 1024, 2048 or 4096".
func SectorSizesText() string {
	s := SectorSizes()
	t := make([]string, len(s))
	for i, n := range s {
		t[i] = strconv.Itoa(n)
	}
	return strings.Join(t[:len(t)-1], ", ") + " or " + t[len(t)-1]
}

// Sector encrypts and decrypts runs of consecutive sectors of one Geometry.
//
// EncryptSectors encrypts len(src)/SectorSize sectors. unit is the 512-byte
// unit the container numbers the first sector with (its IV rule, package
// image); each next sector is SectorSize/512 units on. The cipher turns
// that into the IV: the unit itself, or unit/(SectorSize/512) with
// LargeIV (rounded down, as dm-crypt shifts it). len(src) is a multiple of
// the sector size; dst is at least as long as src and the two overlap
// entirely or not at all. Violations are programming errors
// and panic. No Sector fails: the error result is there so that the methods
// are a sectors.Transform as they are. Sectors with tags are an
// [AuthSector]'s. Implementations are safe for concurrent use and make no
// allocations per call.
type Sector interface {
	Geometry() Geometry
	EncryptSectors(dst, src []byte, unit uint64) error
	DecryptSectors(dst, src []byte, unit uint64) error
	// Clear overwrites the expanded keys; the cipher is unusable afterwards.
	Clear()
}

// kernel is what a mode's file provides: the transform of sectors of
// sectorSize bytes, the first with IV number iv and each next one
// sectorSize/512 on (dm-crypt's numbering without iv_large_sectors).
type kernel interface {
	EncryptSectors(dst, src []byte, iv uint64, sectorSize int)
	DecryptSectors(dst, src []byte, iv uint64, sectorSize int)
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
	// new returns the kernel for a key of one of the KeyBytes sizes. The
	// key slice is not retained.
	new func(key []byte) (kernel, error)
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
	// Auth marks a pair of a specification and an integrity type, which
	// only the authenticated modes could take.
	Auth bool
}

func (e *UnsupportedError) Error() string {
	if e.Auth {
		return fmt.Sprintf("unsupported cipher %q (supported with integrity: %s)", e.Spec, strings.Join(SupportedAuth(), ", "))
	}
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

// NewSector returns the sector cipher of mode m for key and geometry g,
// checking both.
func (m *Mode) NewSector(key []byte, g Geometry) (Sector, error) {
	if !m.ValidKey(len(key)) {
		return nil, &KeySizeError{Mode: m, Size: len(key)}
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	k, err := m.new(key)
	if err != nil {
		return nil, err
	}
	return &sector{k: k, g: g, prefix: "cipher: " + m.Mode, step: uint64(g.SectorSize / UnitSize)}, nil
}

// sector binds a kernel to a geometry: it checks every call and maps units
// to IVs.
type sector struct {
	k      kernel
	g      Geometry
	prefix string // for panics
	step   uint64 // 512-byte units per sector
}

func (s *sector) Geometry() Geometry { return s.g }

func (s *sector) EncryptSectors(dst, src []byte, unit uint64) error {
	s.run(dst, src, unit, s.k.EncryptSectors)
	return nil
}

func (s *sector) DecryptSectors(dst, src []byte, unit uint64) error {
	s.run(dst, src, unit, s.k.DecryptSectors)
	return nil
}

func (s *sector) run(dst, src []byte, unit uint64, f func(dst, src []byte, iv uint64, sectorSize int)) {
	ss := s.g.SectorSize
	check(s.prefix, dst, src, ss)
	if len(src) == 0 {
		return
	}
	unit += s.g.IVOffset
	if !s.g.LargeIV || s.step == 1 {
		f(dst, src, unit, ss)
		return
	}
	// The kernels step IVs by 512-byte units, so with iv_large_sectors
	// each sector is a call of its own, numbered as dm-crypt shifts it.
	iv := unit / s.step
	for off := 0; off < len(src); off += ss {
		f(dst[off:off+ss], src[off:off+ss], iv, ss)
		iv++
	}
}

func (s *sector) Clear() { s.k.Clear() }

// check panics on misuse of a Sector method, with the same checks and order
// everywhere.
func check(prefix string, dst, src []byte, sectorSize int) {
	if !ValidSectorSize(sectorSize) {
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
