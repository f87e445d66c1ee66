package header

// LUKS2 keyslots: unlock (cryptsetup lib/luks2/luks2_keyslot_luks2.c,
// luks2_digest_pbkdf2.c; reference/luks.md §11) and the Header methods.

import (
	"crypto/subtle"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/cryptimg/cryptimg/header/cipher"
	"golang.org/x/crypto/argon2"
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
	case "argon2i":
		return argon2.Key(passphrase, k.KDF.Salt, k.KDF.Time, k.KDF.Memory, uint8(k.KDF.CPUs), uint32(k.Area.KeySize)), nil
	case "argon2id":
		return argon2.IDKey(passphrase, k.KDF.Salt, k.KDF.Time, k.KDF.Memory, uint8(k.KDF.CPUs), uint32(k.Area.KeySize)), nil
	}
	return nil, fmt.Errorf("unsupported kdf %q", k.KDF.Type)
}

// openSlot recovers the volume key from keyslot n: KDF, the area decrypted
// with the area cipher (512-byte sectors, IV sector 0 at the area start),
// the AF merge, and the digest check.
func (h *LUKS2) openSlot(r io.ReaderAt, base int64, passphrase []byte, n int) ([]byte, error) {
	k := h.Keyslots[n]
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
// of the data segment in cryptsetup's priority order.
func (h *LUKS2) Unlock(r io.ReaderAt, base int64, passphrase []byte, slot int) ([]byte, int, error) {
	if err := h.unfinished(); err != nil {
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
		if k == nil || k.Type != "luks2" || h.digestOf("keyslots", slot) != h.digest {
			return nil, -1, fmt.Errorf("key slot %d: %w", slot, ErrNoActiveKeyslot)
		}
		try = []int{slot}
	}
	if len(try) == 0 {
		return nil, -1, ErrNoActiveKeyslot
	}
	for _, n := range try {
		vk, err := h.openSlot(r, base, passphrase, n)
		if err == nil {
			return vk, n, nil
		}
		if err != ErrNoMatchingKeyslot {
			return nil, -1, err
		}
	}
	return nil, -1, ErrNoMatchingKeyslot
}

func (h *LUKS2) data() *Segment { return h.Segments[h.seg] }

// Bound reports whether keyslot n unlocks the data segment (cryptsetup's
// luksDump calls the others "unbound").
func (h *LUKS2) Bound(n int) bool { return h.digestOf("keyslots", n) == h.digest }

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
	return Info{
		Version: 2, UUID: h.bin.UUID, Cipher: s.Encryption, KeyBytes: h.keyBytes(), Hash: h.Digests[h.digest].Hash,
		SectorSize: s.SectorSize, PayloadOffset: int64(s.Offset), PayloadSize: int64(s.size), Integrity: h.integrityType(),
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
	return h.reencrypt == "" && len(vk) == h.keyBytes() && h.Digests[h.digest].verify(vk)
}

// NewSectorCipher is the data segment's cipher: its sector size, and its
// iv_tweak as dm-crypt's IV offset.
func (h *LUKS2) NewSectorCipher(volumeKey []byte) (cipher.Sector, error) {
	if err := h.unfinished(); err != nil {
		return nil, err
	}
	s := h.data()
	if s.integrity != nil {
		return nil, ErrAuthenticated
	}
	m, err := cipher.Parse(s.Encryption)
	if err != nil {
		return nil, &UnsupportedCipherError{Spec: s.Encryption}
	}
	return m.NewSector(volumeKey, cipher.Geometry{SectorSize: s.SectorSize, IVOffset: uint64(s.IVTweak)})
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
	return luks2KDF(o, h.Digests[h.digest].Hash, h.keyBytes())
}

var _ Header = (*LUKS2)(nil)
