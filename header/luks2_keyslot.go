package header

// LUKS2 keyslots: unlock (cryptsetup lib/luks2/luks2_keyslot_luks2.c,
// luks2_digest_pbkdf2.c) and the Header methods.

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// priority is a keyslot's priority: 0 ignore (tried only when named), 1
// normal (the default), 2 prefer.
func (k *Keyslot) priority() int {
	if k.Priority == nil {
		return 1
	}
	return *k.Priority
}

// derive runs the keyslot's KDF on passphrase.
func (k *Keyslot) derive(passphrase []byte) ([]byte, error) {
	switch k.KDF.Type {
	case "pbkdf2":
		return deriveKey(k.KDF.Hash, passphrase, k.KDF.Salt, k.KDF.Iterations, k.Area.KeySize)
	case "argon2i", "argon2id":
		return argon2Key(k.KDF.Type, passphrase, k.KDF.Salt, k.KDF.Time, k.KDF.Memory, k.KDF.CPUs, uint32(k.Area.KeySize)), nil
	}
	return nil, fmt.Errorf("unsupported kdf %q", k.KDF.Type)
}

// openSlot recovers the volume key from keyslot n: KDF, the area decrypted
// with the area cipher (512-byte sectors, IV sector 0 at the area start),
// the AF merge, and the digest check.
func (h *LUKS2) openSlot(r io.ReaderAt, base int64, passphrase []byte, n int) ([]byte, error) {
	k := h.Keyslots[n]
	null := cipher.IsNull(k.Area.Encryption) // allowed, or slotErr refused it
	if null && len(passphrase) > 0 {
		// cryptsetup 2.8.1 opens a null-cipher keyslot only with an
		// empty passphrase (luks2_keyslot_luks2.c luks2_keyslot_get_key).
		return nil, ErrNoMatchingKeyslot
	}
	if len(k.KDF.Salt) != 32 {
		return nil, fmt.Errorf("keyslot %d: kdf salt of %d bytes, want 32", n, len(k.KDF.Salt))
	}
	material := make([]byte, afSectors(uint64(k.KeySize), Stripes)*SectorSize)
	defer clear(material)
	if n, err := r.ReadAt(material, base+int64(k.Area.Offset)); n < len(material) {
		if err == nil || err == io.EOF {
			return nil, parseErrorf(fmt.Sprintf("keyslot %d", n), "key material lies beyond the end of the file")
		}
		return nil, fmt.Errorf("reading keyslot %d: %w", n, err)
	}
	if !null {
		if _, err := cipher.Parse(k.Area.Encryption); err != nil {
			return nil, &UnsupportedCipherError{Spec: k.Area.Encryption} // before the KDF's cost
		}
		dk, err := k.derive(passphrase)
		if err != nil {
			return nil, fmt.Errorf("keyslot %d: %w", n, err)
		}
		if err := cryptMaterial(k.Area.Encryption, dk, material, false); err != nil {
			return nil, fmt.Errorf("keyslot %d: %w", n, err)
		}
	}
	vk, err := AFMerge(material, k.KeySize, Stripes, k.AF.Hash)
	if err != nil {
		return nil, fmt.Errorf("keyslot %d: %w", n, err)
	}
	d := h.Digests[h.digestOf("keyslots", n)]
	if !d.verify(vk) {
		clear(vk)
		return nil, ErrNoMatchingKeyslot
	}
	return vk, nil
}

// verify reports whether vk matches the digest, in constant time.
func (d *Digest) verify(vk []byte) bool {
	got, err := deriveKey(d.Hash, vk, d.Salt, d.Iterations, len(d.Digest))
	if err != nil {
		return false
	}
	defer clear(got)
	return subtle.ConstantTimeCompare(got, d.Digest) == 1
}

// dataSlots lists the luks2 keyslots that unlock the data segment, in the
// order cryptsetup tries them: priority 2 first, then 1; 0 only if named.
func (h *LUKS2) dataSlots() []int {
	var out []int
	for _, prio := range []int{2, 1} {
		for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
			k := h.Keyslots[n]
			if k.Type == "luks2" && k.priority() == prio && h.digestOf("keyslots", n) == h.digest {
				out = append(out, n)
			}
		}
	}
	return out
}

// Unlock tries passphrase on keyslot slot, or with slot -1 on every keyslot
// of the data segment in cryptsetup's priority order. With slot -1, a
// keyslot cryptimg cannot open (slotErr) is passed over and the others are
// tried; when none opens, the error also names those passed over.
func (h *LUKS2) Unlock(r io.ReaderAt, base int64, passphrase []byte, slot int) ([]byte, int, error) {
	if err := h.unfinished(); err != nil {
		return nil, -1, err
	}
	if err := h.dataErr(); err != nil {
		return nil, -1, err
	}
	if err := h.checkDataCipher(); err != nil {
		return nil, -1, err
	}
	try := h.dataSlots()
	if slot != -1 {
		if err := h.CheckSlot(slot); err != nil {
			return nil, -1, err
		}
		k := h.Keyslots[slot]
		if k != nil && (k.Type != "luks2" || h.digestOf("keyslots", slot) == h.digest) {
			if err := h.slotErr(slot); err != nil {
				return nil, -1, err
			}
		}
		if k == nil || k.Type != "luks2" || h.digestOf("keyslots", slot) != h.digest {
			return nil, -1, fmt.Errorf("key slot %d: %w", slot, ErrNoActiveKeyslot)
		}
		try = []int{slot}
	}
	if len(try) == 0 {
		return nil, -1, ErrNoActiveKeyslot
	}
	var passed []error
	for _, n := range try {
		if err := h.slotErr(n); err != nil {
			passed = append(passed, err)
			continue
		}
		vk, err := h.openSlot(r, base, passphrase, n)
		if err == nil {
			return vk, n, nil
		}
		if err != ErrNoMatchingKeyslot {
			return nil, -1, err
		}
	}
	switch {
	case len(passed) == len(try):
		return nil, -1, passed[0]
	case len(passed) > 0:
		return nil, -1, fmt.Errorf("%w (not tried: %w)", ErrNoMatchingKeyslot, errors.Join(passed...))
	}
	return nil, -1, ErrNoMatchingKeyslot
}

// slotErr says why keyslot n cannot be opened, or nil: a type, KDF,
// digest or cipher cryptimg does not know, a kernel crypto API cipher name,
// or the null cipher unless allowed.
func (h *LUKS2) slotErr(n int) error {
	k := h.Keyslots[n]
	where := fmt.Sprintf("keyslot %d", n)
	unusable := func(format string, args ...any) error {
		return &UnusableError{Object: where, Reason: fmt.Sprintf(format, args...)}
	}
	if k.Type != "luks2" {
		return unusable("type %q is not one cryptimg can open", k.Type)
	}
	if d := h.Digests[h.digestOf("keyslots", n)]; d != nil && d.Type != "pbkdf2" {
		return unusable("its digest %d has type %q, which cryptimg does not know", h.digestOf("keyslots", n), d.Type)
	}
	switch k.KDF.Type {
	case "pbkdf2", "argon2i", "argon2id":
	default:
		return unusable("kdf %q is not one cryptimg knows (pbkdf2, argon2i, argon2id)", k.KDF.Type)
	}
	if cipher.IsCAPI(k.Area.Encryption) {
		// cryptsetup refuses capi: names for keyslots
		// (luks2_keyslot.c LUKS2_keyslot_cipher_incompatible).
		return unusable("cipher %q is a kernel crypto API name, which a keyslot may not use", k.Area.Encryption)
	}
	if cipher.IsNull(k.Area.Encryption) {
		if !h.allowNull {
			return &NullCipherError{Object: where, Spec: k.Area.Encryption}
		}
	} else if _, err := cipher.Parse(k.Area.Encryption); err != nil {
		return fmt.Errorf("%s: %w", where, &UnsupportedCipherError{Spec: k.Area.Encryption})
	}
	return nil
}

// dataErr says why the data segment cannot be read, or nil: a type or
// digest cryptimg does not know, a size beyond 2^63 bytes, a kernel crypto
// API cipher name, or the null cipher unless allowed.
func (h *LUKS2) dataErr() error {
	s := h.data()
	where := fmt.Sprintf("segment %d", h.seg)
	switch {
	case s.Type != "crypt":
		return &UnusableError{Object: where, Reason: fmt.Sprintf("type %q is not one cryptimg can read", s.Type)}
	case s.beyond:
		return &UnusableError{Object: where, Reason: fmt.Sprintf("offset %d and size %d reach beyond 2^63 bytes, past the end of any file", s.Offset, s.size)}
	case h.dataDigest().Type != "pbkdf2":
		return &UnusableError{Object: fmt.Sprintf("digest %d", h.digest), Reason: fmt.Sprintf("type %q is not one cryptimg knows", h.dataDigest().Type)}
	case cipher.IsCAPI(s.Encryption):
		return &UnusableError{Object: where, Reason: fmt.Sprintf("cipher %q is a kernel crypto API name, which cryptimg refuses", s.Encryption)}
	case cipher.IsNull(s.Encryption) && !h.allowNull:
		return &NullCipherError{Object: where, Spec: s.Encryption}
	}
	return nil
}

// Problems lists, one sentence each, the parts of the header that cryptimg
// keeps and shows but will not use: what slotErr and dataErr refuse
// (the null cipher whether allowed or not), and segments of types it does
// not know. The header itself is valid, as cryptsetup reads it.
func (h *LUKS2) Problems() []string {
	var out []string
	strict := *h
	strict.allowNull = false
	if err := strict.dataErr(); err != nil {
		out = append(out, err.Error())
	}
	for _, n := range slices.Sorted(maps.Keys(h.Segments)) {
		if s := h.Segments[n]; n != h.seg && s.Type != "crypt" && s.Type != "linear" {
			out = append(out, fmt.Sprintf("segment %d: type %q is not one cryptimg knows", n, s.Type))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
		if k := h.Keyslots[n]; k.Type == "reencrypt" {
			continue
		}
		if err := strict.slotErr(n); err != nil {
			out = append(out, err.Error())
		}
	}
	for _, n := range slices.Sorted(maps.Keys(h.Digests)) {
		if d := h.Digests[n]; d.Type != "pbkdf2" && n != h.digest {
			out = append(out, fmt.Sprintf("digest %d: type %q is not one cryptimg knows", n, d.Type))
		}
	}
	return out
}

// AllowNullCipher returns h allowing what it refuses by default: opening a
// LUKS2 keyslot whose key material is not encrypted (cipher_null; only with
// an empty passphrase, as cryptsetup 2.8.1) and reading and writing a data
// segment under the null cipher. Other headers come back as they are.
func AllowNullCipher(h Header) Header {
	if l2, ok := h.(*LUKS2); ok {
		c := *l2
		c.allowNull = true
		return &c
	}
	return h
}

func (h *LUKS2) data() *Segment { return h.Segments[h.seg] }

// dataDigest is the data segment's digest, or an empty one where no
// digest names the segment (one of a type that needs none).
func (h *LUKS2) dataDigest() *Digest {
	if d := h.Digests[h.digest]; d != nil {
		return d
	}
	return &Digest{}
}

// Bound reports whether keyslot n unlocks the data segment (cryptsetup's
// luksDump calls the others "unbound").
func (h *LUKS2) Bound(n int) bool { return h.digest >= 0 && h.digestOf("keyslots", n) == h.digest }

// keyBytes is the volume key size: that of the data segment's keyslots
// (all the same, as one digest covers them), or 0 with none.
func (h *LUKS2) keyBytes() int {
	for _, n := range h.dataSlots() {
		return h.Keyslots[n].KeySize
	}
	return 0
}

// Info returns the header's summary; the cipher and geometry are those of
// the data segment.
func (h *LUKS2) Info() Info {
	s := h.data()
	// A data segment cryptimg cannot read (dataErr) still has a place:
	// 512-byte sectors where its type has none, and its size, where it
	// reaches beyond 2^63 bytes, left open (0) so that the image opens
	// for dump; every use of its data is refused.
	ss, size := s.SectorSize, int64(s.size)
	if ss == 0 {
		ss = SectorSize
	}
	if s.beyond {
		size = 0
	}
	return Info{
		Version: 2, UUID: h.bin.UUID, Cipher: s.Encryption, KeyBytes: h.keyBytes(), Hash: h.dataDigest().Hash,
		SectorSize: ss, PayloadOffset: int64(s.Offset), PayloadSize: size, Integrity: h.integrityType(),
		AreaSize: 2*h.bin.HdrSize + int64(h.Config.KeyslotsSize),
	}
}

// Label, Subsystem, SeqID and MetadataSize are the binary header's fields;
// JSON is the metadata text as stored.
func (h *LUKS2) Label() string       { return h.bin.Label }
func (h *LUKS2) Subsystem() string   { return h.bin.Subsystem }
func (h *LUKS2) SeqID() uint64       { return h.bin.SeqID }
func (h *LUKS2) MetadataSize() int64 { return h.bin.HdrSize }
func (h *LUKS2) JSON() []byte        { return h.bin.JSON }
func (h *LUKS2) ChecksumAlg() string { return h.bin.CsumAlg }

// NumSlots is 32.
func (h *LUKS2) NumSlots() int { return luks2MaxSlots }

// SlotActive reports whether keyslot slot exists.
func (h *LUKS2) SlotActive(slot int) bool { return h.Keyslots[slot] != nil }

// ActiveSlots counts the keyslots.
func (h *LUKS2) ActiveSlots() int { return len(h.Keyslots) }

// FirstFreeSlot is the lowest unused keyslot number, or -1.
func (h *LUKS2) FirstFreeSlot() int {
	for i := range luks2MaxSlots {
		if h.Keyslots[i] == nil {
			return i
		}
	}
	return -1
}

// CheckSlot returns an error for a slot outside 0..31.
func (h *LUKS2) CheckSlot(slot int) error { return checkSlotRange(slot, luks2MaxSlots) }

// VerifyVolumeKey checks vk against the data segment's digest.
func (h *LUKS2) VerifyVolumeKey(vk []byte) bool {
	d := h.Digests[h.digest]
	return h.reencrypt == "" && d != nil && d.Type == "pbkdf2" && len(vk) == h.keyBytes() && d.verify(vk)
}

// NewSectorCipher is the data segment's cipher: its sector size, and its
// iv_tweak as dm-crypt's IV offset.
func (h *LUKS2) NewSectorCipher(volumeKey []byte) (cipher.Sector, error) {
	if err := h.unfinished(); err != nil {
		return nil, err
	}
	if err := h.dataErr(); err != nil {
		return nil, err
	}
	s := h.data()
	if s.integrity != nil {
		return nil, ErrAuthenticated
	}
	g := cipher.Geometry{SectorSize: s.SectorSize, IVOffset: uint64(s.IVTweak)}
	if cipher.IsNull(s.Encryption) { // allowed, or dataErr refused it
		return cipher.NewNullSector(g)
	}
	m, err := cipher.Parse(s.Encryption)
	if err != nil {
		return nil, &UnsupportedCipherError{Spec: s.Encryption}
	}
	return m.NewSector(volumeKey, g)
}

// BackupSize is what cryptsetup luksHeaderBackup writes for LUKS2: both
// metadata copies and the keyslots area.
func (h *LUKS2) BackupSize() int64 { return h.Info().AreaSize }

// Backup leaves the area as it is, a byte copy, when both metadata copies
// are good. When one is damaged, lost or older (Warning), both copies in
// the backup are made anew from the one in use, with the same seqid: the
// backup of a header that cryptsetup would have repaired on reading it
// (lib/luks2/luks2_disk_metadata.c LUKS2_disk_hdr_read) is the repaired
// header, which restores without a warning.
func (h *LUKS2) Backup(area []byte) {
	if h.Warning == "" || int64(len(area)) < 2*h.bin.HdrSize {
		return
	}
	if meta, err := h.marshalCopies(nil); err == nil {
		copy(area, meta)
	}
}

// SlotKDF is the KDF of a new keyslot: argon2id unless o says otherwise,
// benchmarked or forced as cryptsetup does.
func (h *LUKS2) SlotKDF(o KDFOptions) (KDF, error) {
	if err := h.dataErr(); err != nil {
		return KDF{}, err
	}
	return luks2KDF(o, h.Digests[h.digest].Hash, h.keyBytes())
}

var _ Header = (*LUKS2)(nil)
