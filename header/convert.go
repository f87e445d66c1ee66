package header

// Conversion between LUKS1 and LUKS2 in place, as cryptsetup 2.6.1's
// `convert --type luks1|luks2` does it (lib/luks2/luks2_luks1_convert.c,
// LUKS2_luks1_to_luks2 and LUKS2_luks2_to_luks1; the layout below was
// measured against cryptsetup 2.6.1 on files, see header/convert_test.go and
// cmd/cryptimg/convert_test.go):
//
//   - LUKS1's key material starts at 4096 bytes, LUKS2's keyslots area at
//     2*16 KiB. Conversion moves the whole region by convertShift (28672
//     bytes), up for LUKS2 and down for LUKS1, and writes the other
//     version's header in front of it. Nothing else in the header area
//     changes, and the volume key, the slot salts and iterations and the
//     digest stay as they are.
//   - LUKS1 → LUKS2: one 16 KiB metadata size, keyslots_size = payload
//     offset − 32 KiB, each active slot a pbkdf2 keyslot with its LUKS1
//     salt, the 20-byte LUKS1 digest, 512-byte sectors, seqid 2.
//   - LUKS2 → LUKS1 only when LUKS1 can say everything the header says:
//     one pbkdf2 digest, no tokens, slots 0–7 only, pbkdf2 keyslots with
//     4000 stripes and LUKS1-sized areas, 512-byte sectors. Labels,
//     priorities and flags are dropped, as cryptsetup drops them.
//
// The move overlaps the old areas, so the change is not an ordered set of
// writes that is safe at every crash point: image.Convert keeps the new
// area in a journal while it writes it.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// convertShift is how far conversion moves the key material: from LUKS1's
// 4096 bytes to LUKS2's 2*16 KiB.
const convertShift = 2*luks2HdrSize - slotAlign*SectorSize

// ErrConvert reports a header that cannot be converted to the other LUKS
// version; the message says why.
var ErrConvert = errors.New("cannot convert")

func convertErr(version int, format string, args ...any) error {
	return fmt.Errorf("%w to LUKS%d: %s", ErrConvert, version, fmt.Sprintf(format, args...))
}

// Convert returns h, read from r at base, converted to LUKS version (1 or
// 2) as cryptsetup convert makes it: the new header and the bytes that
// replace [base, base+payload offset). A detached header (payload offset
// 0) takes the size bytes its file has, and more if the move needs them,
// as cryptsetup does with the header device. h and r are not changed.
func Convert(r io.ReaderAt, base, size int64, h Header, version int, rnd io.Reader) (Header, []byte, error) {
	if v := h.Info().Version; v == version {
		return nil, nil, convertErr(version, "the header is LUKS%d already", v)
	}
	switch h := h.(type) {
	case *LUKS1:
		if version == 2 {
			return h.toLUKS2(r, base, size, rnd)
		}
	case *LUKS2:
		if version == 1 {
			return h.toLUKS1(r, base, size)
		}
	}
	return nil, nil, fmt.Errorf("%w: unknown LUKS version %d", ErrConvert, version)
}

// readArea reads the n bytes of the header area at base.
func readArea(r io.ReaderAt, base, n int64) ([]byte, error) {
	b := make([]byte, n)
	if err := readAt(r, b, base); err != nil {
		return nil, fmt.Errorf("reading the header area: %w", err)
	}
	return b, nil
}

func (h *LUKS1) toLUKS2(r io.ReaderAt, base, size int64, rnd io.Reader) (Header, []byte, error) {
	payload := int64(h.PayloadOffset) * SectorSize
	end := payload // the bytes the header area may take
	detached := payload == 0
	// cryptsetup: the LUKS1 area rounded up to 4096 bytes, the key
	// material from exactly 4096 bytes, and room for the shift.
	l1 := int64(roundUp(uint64(h.AreaSize()), 4096))
	first := h.Slots[0].KeyMaterialOffset
	for _, s := range h.Slots {
		first = min(first, s.KeyMaterialOffset)
	}
	if first != slotAlign {
		return nil, nil, convertErr(2, "the key material starts at sector %d, not %d", first, slotAlign)
	}
	if detached {
		// A detached header's file grows by what the move needs, as
		// cryptsetup 2.6.1 grows it (measured).
		end = max(size, l1+convertShift)
	}
	if end-l1 < convertShift {
		return nil, nil, convertErr(2, "no room to move the key slot areas: they end at %d bytes, the header area may take %d, and the move needs %d more", l1, end, convertShift)
	}
	old, err := readArea(r, base, min(end, size))
	if err != nil {
		return nil, nil, err
	}
	old = append(old, make([]byte, end-int64(len(old)))...)
	if bytes.HasPrefix(old[l1:], []byte("LUKSMETA")) {
		return nil, nil, convertErr(2, "the header has LUKSMETA metadata after its key slots")
	}
	n := &LUKS2{
		bin:      &luks2Bin{HdrSize: luks2HdrSize, SeqID: 2, CsumAlg: "sha256", UUID: h.UUID},
		Keyslots: map[int]*Keyslot{},
		Segments: map[int]*Segment{0: {Type: "crypt", Offset: u64s(payload), Size: "dynamic", Encryption: h.CipherSpec(), SectorSize: SectorSize}},
		Tokens:   map[int]*Token{},
		Config:   Config{JSONSize: luks2HdrSize - luks2BinSize, KeyslotsSize: u64s(end - 2*luks2HdrSize)},
	}
	d := &Digest{Type: "pbkdf2", Segments: []string{"0"}, Hash: h.HashSpec, Iterations: h.MKDigestIter,
		Salt: bytes.Clone(h.MKDigestSalt[:]), Digest: bytes.Clone(h.MKDigest[:])}
	kb := int(h.KeyBytes)
	for i, s := range h.Slots {
		if !s.Active() {
			continue
		}
		k := &Keyslot{Type: "luks2", KeySize: kb}
		k.AF.Type, k.AF.Stripes, k.AF.Hash = "luks1", Stripes, h.HashSpec
		k.Area.Type, k.Area.Encryption, k.Area.KeySize = "raw", h.CipherSpec(), kb
		k.Area.Offset = u64s(int64(s.KeyMaterialOffset)*SectorSize + convertShift)
		k.Area.Size = u64s(keyslotAreaSize(kb))
		k.KDF.Type, k.KDF.Hash, k.KDF.Iterations, k.KDF.Salt = "pbkdf2", h.HashSpec, s.Iterations, bytes.Clone(s.Salt[:])
		n.Keyslots[i] = k
		d.Keyslots = append(d.Keyslots, strconv.Itoa(i))
	}
	n.Digests = map[int]*Digest{0: d}
	meta, err := n.marshalCopies(rnd)
	if err != nil {
		return nil, nil, err
	}
	area := bytes.Clone(old)
	copy(area[2*luks2HdrSize:], old[slotAlign*SectorSize:l1])
	copy(area, meta)
	got, err := readLUKS2(bytes.NewReader(area), 0, end)
	if err != nil {
		return nil, nil, fmt.Errorf("header: internal error: the converted LUKS2 header does not read back: %w", err)
	}
	return got, area, nil
}

func (h *LUKS2) toLUKS1(r io.ReaderAt, base, size int64) (Header, []byte, error) {
	if err := h.writable(); err != nil {
		return nil, nil, err
	}
	fail := func(format string, args ...any) (Header, []byte, error) {
		return nil, nil, convertErr(1, format, args...)
	}
	if err := h.dataErr(); err != nil {
		return nil, nil, err
	}
	d := h.Digests[h.digest]
	if len(h.Digests) != 1 || d.Type != "pbkdf2" {
		return fail("key slot digests are not LUKS1 compatible")
	}
	if len(h.Segments) != 1 {
		return fail("the header has %d segments", len(h.Segments))
	}
	s := h.data()
	switch {
	case s.SectorSize != SectorSize:
		return fail("default segment encryption sector size is not 512 bytes")
	case s.IVTweak != 0:
		return fail("the data segment has an IV offset (iv_tweak %d)", s.IVTweak)
	case s.Size != "dynamic":
		return fail("the data segment has a fixed size, which LUKS1 cannot record")
	case s.Integrity != nil:
		return fail("the data segment has integrity protection")
	case len(h.Tokens) > 0:
		return fail("LUKS2 header contains %d token(s)", len(h.Tokens))
	case len(d.Digest) < DigestSize || len(d.Salt) != SaltSize:
		return fail("the digest is not LUKS1 compatible")
	case uint64(s.Offset)/SectorSize > 1<<32-1:
		return fail("the data offset %d is too large", s.Offset)
	}
	name, mode, ok := strings.Cut(s.Encryption, "-")
	if !ok || len(name) >= stringSize || len(mode) >= stringSize || len(d.Hash) >= stringSize {
		return fail("cipher %q or hash %q does not fit a LUKS1 header", s.Encryption, d.Hash)
	}
	kb := h.keyBytes()
	for _, i := range slices.Sorted(maps.Keys(h.Keyslots)) {
		k := h.Keyslots[i]
		if !h.Bound(i) {
			return fail("keyslot %d is not bound to the data segment", i)
		}
		if i >= NumSlots {
			return fail("slot %d (over maximum slots) is still active", i)
		}
		if k.Type != "luks2" || k.KDF.Type != "pbkdf2" || k.AF.Stripes != Stripes || k.KeySize != kb ||
			uint64(k.Area.Size) != keyslotAreaSize(kb) || len(k.KDF.Salt) != SaltSize {
			return fail("keyslot %d is not LUKS1 compatible", i)
		}
		// LUKS1 has one hash and one cipher for everything; cryptsetup
		// takes the keyslot's, which would leave a header that does not
		// open if they differ.
		if k.KDF.Hash != d.Hash || k.AF.Hash != d.Hash || k.Area.Encryption != s.Encryption {
			return fail("keyslot %d uses hash %s/%s and cipher %s, the data uses %s and %s", i, k.KDF.Hash, k.AF.Hash, k.Area.Encryption, d.Hash, s.Encryption)
		}
	}
	payload := int64(s.Offset)
	n := &LUKS1{Version: 1, CipherName: name, CipherMode: mode, HashSpec: d.Hash,
		PayloadOffset: uint32(payload / SectorSize), KeyBytes: uint32(kb), MKDigestIter: d.Iterations, UUID: h.bin.UUID}
	copy(n.MKDigest[:], d.Digest)
	copy(n.MKDigestSalt[:], d.Salt)
	// Inactive LUKS1 slots get areas too: placeholders, first-fit in the
	// keyslots area, as cryptsetup allocates them.
	tmp := h.clone()
	for i := range NumSlots {
		k := h.Keyslots[i]
		var off uint64
		if k != nil {
			off = uint64(k.Area.Offset)
		} else {
			var err error
			if off, err = tmp.freeArea(keyslotAreaSize(kb)); err != nil {
				return fail("no room for key slot %d: %v", i, err)
			}
			p := &Keyslot{}
			p.Area.Offset, p.Area.Size = u64s(off), u64s(keyslotAreaSize(kb))
			tmp.Keyslots[i] = p
		}
		if off < 2*luks2HdrSize || off%SectorSize != 0 {
			return fail("keyslot %d's area at %d cannot move to LUKS1's place", i, off)
		}
		n.Slots[i] = KeySlot{State: SlotDisabled, KeyMaterialOffset: uint32((off - convertShift) / SectorSize), Stripes: Stripes}
		if k != nil {
			n.Slots[i].State, n.Slots[i].Iterations = SlotActive, k.KDF.Iterations
			copy(n.Slots[i].Salt[:], k.KDF.Salt)
		}
	}
	end := payload // the bytes the header area takes
	if payload == 0 {
		end = h.Info().AreaSize // detached
	}
	old, err := readArea(r, base, end)
	if err != nil {
		return nil, nil, err
	}
	area := bytes.Clone(old)
	ks := 2*luks2HdrSize + int64(h.Config.KeyslotsSize)
	copy(area[slotAlign*SectorSize:], old[2*luks2HdrSize:ks])
	clear(area[:slotAlign*SectorSize])
	copy(area, n.Marshal())
	got, err := Read(bytes.NewReader(area), 0, end)
	if err != nil {
		return fail("the LUKS1 header would not be valid: %v", err)
	}
	return got, area, nil
}
