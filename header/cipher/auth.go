package cipher

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Authenticated sector modes: LUKS2 with integrity (cryptsetup luksFormat
// --integrity), where every sector carries a tag that dm-integrity stores
// beside it and dm-crypt checks on every read. A mode is a cipher
// specification ("aes-cbc-essiv:sha256") together with a LUKS2 segment
// integrity type ("hmac(sha256)", or "aead" for the modes that
// authenticate by themselves), and lives in a file of its own, as the
// plain modes do.
//
// What a tag covers is dm-crypt's rule (drivers/md/dm-crypt.c,
// crypt_convert_block_aead): the associated data is le64(N) followed by the
// sector's IV, where N is the 512-byte unit of the sector (the unit the
// caller passes, before Geometry.IVOffset), and the IV is the mode's IV of
// unit N+IVOffset.

// AuthMode is one registered authenticated mode.
type AuthMode struct {
	Spec      string // cryptsetup cipher specification, "aes-cbc-essiv:sha256"
	Integrity string // LUKS2 segment integrity type, "hmac(sha256)" or "aead"
	// Option is cryptsetup's --integrity name for Integrity, "hmac-sha256"
	// or "aead".
	Option string
	// CipherKeyBytes are the accepted sizes of the encryption key alone
	// (cryptsetup's --key-size), ascending; DefaultCipherKeyBytes is
	// cryptsetup's default.
	CipherKeyBytes        []int
	DefaultCipherKeyBytes int
	// MACKeyBytes is the size of the MAC key that follows the encryption
	// key in the volume key: 32 for hmac(sha256), 0 for an AEAD.
	MACKeyBytes int
	// TagSize is the on-disk bytes per sector (dm-integrity's tag size):
	// the MAC, followed by the IV for the random-IV modes.
	TagSize int
	// new returns the kernel for a whole volume key (encryption key, then
	// MAC key) of a valid size. The key slice is not retained.
	new func(key []byte) (authKernel, error)
}

// authKernel is what an authenticated mode's file provides, for calls that
// authSector has checked: n = len(src)/sectorSize sectors, units unit,
// unit+step, ... (already including the IV offset in iv), tags TagSize
// bytes each.
type authKernel interface {
	// seal encrypts src into dst and writes each sector's tag. aadUnit is
	// the first sector's N for the associated data, iv its IV number.
	seal(dst, tags, src []byte, aadUnit, iv uint64, sectorSize int) error
	// open checks and decrypts; it calls bad with the index of each sector
	// whose tag does not match (that sector of dst is then zeroed), in
	// order, and decrypts the others. With dst nil it only checks: bad is
	// called as before and no plaintext is made where the tag alone
	// tells (the HMAC modes authenticate the ciphertext).
	open(dst, src, tags []byte, aadUnit, iv uint64, sectorSize int, bad func(i int))
	clear()
}

// KeyBytes lists the accepted volume key sizes: each cipher key size plus
// the MAC key.
func (m *AuthMode) KeyBytes() []int {
	s := make([]int, len(m.CipherKeyBytes))
	for i, k := range m.CipherKeyBytes {
		s[i] = k + m.MACKeyBytes
	}
	return s
}

// ValidKey reports whether a volume key of n bytes fits this mode.
func (m *AuthMode) ValidKey(n int) bool {
	for _, k := range m.KeyBytes() {
		if k == n {
			return true
		}
	}
	return false
}

// Name is how cryptsetup's luksDump shows the pair,
// "aes-cbc-essiv:sha256 + hmac(sha256)".
func (m *AuthMode) Name() string { return m.Spec + " + " + m.Integrity }

// CipherKeyBits lists the accepted --key-size values, "128, 192 or 256".
func (m *AuthMode) CipherKeyBits() string {
	var s []string
	for _, k := range m.CipherKeyBytes {
		s = append(s, strconv.Itoa(k*8))
	}
	if len(s) == 1 {
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

var authRegistry = map[string]*AuthMode{}

// registerAuth adds an authenticated mode; each mode's file calls it from
// init.
func registerAuth(m *AuthMode) {
	k := m.Spec + "|" + m.Integrity
	if _, dup := authRegistry[k]; dup {
		panic("cipher: " + m.Name() + " registered twice")
	}
	authRegistry[k] = m
}

// SupportedAuth lists the authenticated modes, "spec + integrity", sorted.
func SupportedAuth() []string {
	var s []string
	for _, m := range AuthModes() {
		s = append(s, m.Name())
	}
	return s
}

// AuthModes returns the authenticated modes, sorted by Name.
func AuthModes() []*AuthMode {
	var ms []*AuthMode
	for _, m := range authRegistry {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name() < ms[j].Name() })
	return ms
}

// ParseAuth finds the authenticated mode for a cipher specification and a
// LUKS2 integrity type ("hmac(sha256)", "aead").
func ParseAuth(spec, integrity string) (*AuthMode, error) {
	if m, ok := authRegistry[spec+"|"+integrity]; ok {
		return m, nil
	}
	return nil, &UnsupportedError{Spec: spec + " + " + integrity, Auth: true}
}

// IntegrityType maps cryptsetup's --integrity option ("hmac-sha256",
// "aead") to the LUKS2 segment's integrity type ("hmac(sha256)", "aead").
func IntegrityType(option string) (string, error) {
	for _, m := range authRegistry {
		if m.Option == option {
			return m.Integrity, nil
		}
	}
	return "", fmt.Errorf("%w: integrity %q (supported: %s)", ErrUnsupported, option, strings.Join(IntegrityOptions(), ", "))
}

// IntegrityOptions lists the --integrity options, sorted.
func IntegrityOptions() []string {
	var s []string
	for _, m := range authRegistry {
		if !slices.Contains(s, m.Option) {
			s = append(s, m.Option)
		}
	}
	sort.Strings(s)
	return s
}

// AuthSector encrypts and authenticates runs of consecutive sectors of one
// Geometry, each with a TagSize-byte tag. The unit rules are Sector's; the
// tags of a run are stored back to back, as dm-integrity keeps them.
// Implementations are safe for concurrent use.
type AuthSector interface {
	Geometry() Geometry
	TagSize() int
	// Seal encrypts len(src)/SectorSize sectors into dst and writes their
	// tags to tags (at least TagSize bytes per sector). The error is a
	// failure of the random source (random-IV modes).
	Seal(dst, tags, src []byte, unit uint64) error
	// Open checks each sector against its tag and decrypts it into dst.
	// Sectors whose tag does not match are zeroed in dst and listed in the
	// returned *TagError; the others are decrypted all the same.
	Open(dst, src, tags []byte, unit uint64) error
	// Check is Open without the plaintext: it checks each sector against
	// its tag and returns the *TagError of those that fail, writing
	// nothing (what cryptimg verify needs).
	Check(src, tags []byte, unit uint64) error
	// Reseal is Seal with a random-IV mode's IVs taken from tags, as an
	// earlier Seal wrote them: the same key and plaintext give the same
	// ciphertext and tags (the redo of an interrupted reencryption).
	Reseal(dst, tags, src []byte, unit uint64) error
	// Clear overwrites the keys; the cipher is unusable afterwards.
	Clear()
}

// ErrTag is matched by every *TagError.
var ErrTag = errors.New("integrity tag mismatch")

// TagError lists the sectors of one call whose tags did not match, by
// their 512-byte unit N: the number dm-crypt logs as "INTEGRITY AEAD ERROR,
// sector N".
type TagError struct {
	Units []uint64
}

func (e *TagError) Error() string {
	if len(e.Units) == 1 {
		return fmt.Sprintf("integrity tag mismatch in sector %d", e.Units[0])
	}
	return fmt.Sprintf("integrity tag mismatch in %d sectors, the first %d", len(e.Units), e.Units[0])
}

func (e *TagError) Unwrap() error { return ErrTag }

// NewSector returns the authenticated sector cipher of m for a volume key
// and geometry, checking both.
func (m *AuthMode) NewSector(key []byte, g Geometry) (AuthSector, error) {
	if !m.ValidKey(len(key)) {
		return nil, &AuthKeySizeError{Mode: m, Size: len(key)}
	}
	if err := g.check(); err != nil {
		return nil, err
	}
	if g.LargeIV {
		return nil, errors.New("authenticated sectors with iv_large_sectors are not supported")
	}
	k, err := m.new(key)
	if err != nil {
		return nil, err
	}
	return &authSector{k: k, g: g, tag: m.TagSize, prefix: "cipher: " + m.Name()}, nil
}

// AuthKeySizeError reports a volume key of a size its mode does not take.
type AuthKeySizeError struct {
	Mode *AuthMode
	Size int // bytes
}

func (e *AuthKeySizeError) Error() string {
	return fmt.Sprintf("%d-bit volume key is invalid for %s (want a %s-bit cipher key plus a %d-bit MAC key)",
		e.Size*8, e.Mode.Name(), e.Mode.CipherKeyBits(), e.Mode.MACKeyBytes*8)
}

type authSector struct {
	k      authKernel
	g      Geometry
	tag    int
	prefix string
}

func (s *authSector) Geometry() Geometry { return s.g }
func (s *authSector) TagSize() int       { return s.tag }
func (s *authSector) Clear()             { s.k.clear() }

func (s *authSector) checkTags(src, tags []byte) {
	if len(tags) < len(src)/s.g.SectorSize*s.tag {
		panic(s.prefix + ": tag buffer too small")
	}
}

func (s *authSector) Seal(dst, tags, src []byte, unit uint64) error {
	check(s.prefix, dst, src, s.g.SectorSize)
	s.checkTags(src, tags)
	if len(src) == 0 {
		return nil
	}
	return s.k.seal(dst, tags, src, unit, unit+s.g.IVOffset, s.g.SectorSize)
}

func (s *authSector) Open(dst, src, tags []byte, unit uint64) error {
	check(s.prefix, dst, src, s.g.SectorSize)
	return s.open(dst, src, tags, unit)
}

func (s *authSector) Check(src, tags []byte, unit uint64) error {
	check(s.prefix, src, src, s.g.SectorSize)
	return s.open(nil, src, tags, unit)
}

// open is Open and, with dst nil, Check.
func (s *authSector) open(dst, src, tags []byte, unit uint64) error {
	s.checkTags(src, tags)
	if len(src) == 0 {
		return nil
	}
	var te *TagError
	step := uint64(s.g.SectorSize / UnitSize)
	s.k.open(dst, src, tags, unit, unit+s.g.IVOffset, s.g.SectorSize, func(i int) {
		if te == nil {
			te = &TagError{}
		}
		te.Units = append(te.Units, unit+uint64(i)*step)
	})
	if te != nil {
		return te
	}
	return nil
}
