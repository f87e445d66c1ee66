package header

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// LUKS2 segments with integrity (cryptsetup luksFormat --integrity): the
// data segment holds a dm-integrity device (package image/integrity) whose
// sectors dm-crypt encrypts with an authenticated mode (cipher.AuthMode),
// every sector with a tag. What the header records is the segment's
// "integrity" object (cryptsetup lib/luks2/luks2_json_format.c,
// json_segment_create_crypt; validated by luks2_json_metadata.c,
// hdr_validate_crypt_segment) and a volume key that is the cipher key
// followed by the MAC key.

// SegmentIntegrity is a crypt segment's integrity object.
type SegmentIntegrity struct {
	Type              string `json:"type"` // "hmac(sha256)", "aead"
	JournalEncryption string `json:"journal_encryption"`
	JournalIntegrity  string `json:"journal_integrity"`
}

// ErrAuthenticated refuses the untagged sector path on a segment with
// integrity: its sectors cannot be read or written without their tags.
var ErrAuthenticated = errors.New("the data segment is authenticated (integrity): its sectors need their tags")

// ErrNotAuthenticated is NewAuthSector's answer for a header without
// integrity.
var ErrNotAuthenticated = errors.New("the data segment has no integrity protection")

// parseIntegrity checks a crypt segment's integrity object as cryptsetup
// does: an object with the three string fields.
func parseIntegrity(where string, raw json.RawMessage) (*SegmentIntegrity, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, parseErrorf(where, "integrity is not an object")
	}
	var si SegmentIntegrity
	for _, f := range []struct {
		name string
		dst  *string
	}{{"type", &si.Type}, {"journal_encryption", &si.JournalEncryption}, {"journal_integrity", &si.JournalIntegrity}} {
		v, ok := fields[f.name]
		if !ok || json.Unmarshal(v, f.dst) != nil {
			return nil, parseErrorf(where, "integrity %s is missing or not a string", f.name)
		}
	}
	return &si, nil
}

// integrity is the data segment's integrity object, or nil.
func (h *LUKS2) integrity() *SegmentIntegrity { return h.data().integrity }

// authMode is the data segment's authenticated mode, refusing the journal
// options cryptsetup 2.6.1 refuses to activate (LUKS2_integrity_compatible:
// "Unsupported device integrity configuration").
func (s *Segment) authMode() (*cipher.AuthMode, error) {
	si := s.integrity
	if si.JournalEncryption != "none" || si.JournalIntegrity != "none" {
		return nil, fmt.Errorf("%w: integrity journal encryption %q and integrity %q (only \"none\" is supported, as cryptsetup)",
			cipher.ErrUnsupported, si.JournalEncryption, si.JournalIntegrity)
	}
	m, err := cipher.ParseAuth(s.Encryption, si.Type)
	if err != nil {
		return nil, &UnsupportedCipherError{Spec: s.Encryption + " with integrity " + si.Type}
	}
	return m, nil
}

// checkDataCipher refuses a data segment whose cipher cryptimg lacks,
// before any key derivation.
func (h *LUKS2) checkDataCipher() error {
	s := h.data()
	if s.integrity != nil {
		_, err := s.authMode()
		return err
	}
	if cipher.IsNull(s.Encryption) { // dataErr decides
		return nil
	}
	if _, err := cipher.Parse(s.Encryption); err != nil {
		return &UnsupportedCipherError{Spec: s.Encryption}
	}
	return nil
}

// NewAuthSector is the data segment's authenticated cipher, for a segment
// with integrity.
func (h *LUKS2) NewAuthSector(volumeKey []byte) (cipher.AuthSector, error) {
	if err := h.unfinished(); err != nil {
		return nil, err
	}
	if err := h.dataErr(); err != nil {
		return nil, err
	}
	s := h.data()
	if s.integrity == nil {
		return nil, ErrNotAuthenticated
	}
	m, err := s.authMode()
	if err != nil {
		return nil, err
	}
	return m.NewSector(volumeKey, cipher.Geometry{SectorSize: s.SectorSize, IVOffset: uint64(s.IVTweak)})
}

// NewAuthSector: LUKS1 has no integrity.
func (h *LUKS1) NewAuthSector([]byte) (cipher.AuthSector, error) { return nil, ErrNotAuthenticated }

// keyslotCipher is the area cipher of a new keyslot for a volume key of
// keyBytes: the segment's own cipher and key size, or, for an
// authenticated segment (whose tags a keyslot cannot carry), cryptsetup's
// default keyslot cipher aes-xts-plain64 with a 512-bit key (cryptsetup
// lib/luks2/luks2_keyslot.c, LUKS2_keyslot_cipher_incompatible and
// crypt_keyslot_get_encryption).
func keyslotCipher(encryption string, authenticated bool, keyBytes int) (string, int) {
	// cryptsetup's keyslot cipher where the segment's cannot serve
	// (luks2_keyslot.c LUKS2_keyslot_cipher_incompatible): an
	// authenticated segment, or the null cipher, which a new keyslot
	// never gets.
	if authenticated || cipher.IsNull(encryption) {
		return "aes-xts-plain64", 64
	}
	return encryption, keyBytes
}

// integrityParams checks p's cipher and key size for an authenticated
// format and fills the default key size: the mode's cipher key plus its
// MAC key.
func (p *Params) integrityParams() error {
	if p.Version != 2 {
		return errors.New("integrity protection needs a LUKS2 header")
	}
	m, err := cipher.ParseAuth(p.Cipher, p.Integrity)
	if err != nil {
		return err
	}
	if p.KeyBytes == 0 {
		p.KeyBytes = m.DefaultCipherKeyBytes + m.MACKeyBytes
	}
	if !m.ValidKey(p.KeyBytes) {
		return &cipher.AuthKeySizeError{Mode: m, Size: p.KeyBytes}
	}
	return nil
}

// segmentIntegrity is the integrity object a new authenticated segment
// gets, in cryptsetup's field order.
func segmentIntegrity(typ string) (json.RawMessage, *SegmentIntegrity) {
	si := &SegmentIntegrity{Type: typ, JournalEncryption: "none", JournalIntegrity: "none"}
	raw, _ := json.Marshal(si) // strings only: cannot fail
	return raw, si
}

// integrityType is the data segment's integrity type, or "".
func (h *LUKS2) integrityType() string {
	if si := h.integrity(); si != nil {
		return si.Type
	}
	return ""
}

// IntegrityObject is the segment's parsed integrity object, or nil.
func (s *Segment) IntegrityObject() *SegmentIntegrity { return s.integrity }

// rekeyIntegrity checks a reencryption's parameters against the data
// segment's integrity: the dm-integrity layout stays, so an authenticated
// segment takes an authenticated mode with the same tag size (p.Integrity
// defaults to the segment's), and a plain one stays plain.
func (h *LUKS2) rekeyIntegrity(p *Params) error {
	si := h.integrity()
	if si == nil {
		if p.Integrity != "" {
			return errors.New("reencryption cannot add integrity protection: the data would have to move")
		}
		return nil
	}
	old, err := h.data().authMode()
	if err != nil {
		return err
	}
	if p.Integrity == "" {
		p.Integrity = si.Type
	}
	p.Version = 2
	m, err := cipher.ParseAuth(p.Cipher, p.Integrity)
	if err != nil {
		return err
	}
	if m.TagSize != old.TagSize {
		return fmt.Errorf("reencryption keeps the integrity layout: %s has %d-byte tags, %s %d",
			m.Name(), m.TagSize, old.Name(), old.TagSize)
	}
	return nil
}
