package header

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// LUKS1 constants (specification §2.3, cryptsetup lib/luks1/luks.h).
const (
	SectorSize = cipher.UnitSize // LUKS1 sector, the unit of offsets
	NumSlots   = 8               // key slots in a header
	Stripes    = 4000            // AF stripes per key slot
	SaltSize   = 32              // PBKDF2 salt size
	DigestSize = 20              // master key digest size
	PhdrSize   = 1024            // bytes cryptsetup reads and writes (592 defined, then zeros)

	// SlotActive and SlotDisabled are the only valid key slot states.
	SlotActive   = 0x00AC71F3
	SlotDisabled = 0x0000DEAD
)

// definedSize is the part of the phdr with fields in it.
const definedSize = 592

// maxKeyBytes is the largest volume key accepted when reading (512 bits, the
// largest any LUKS1 cipher uses).
const maxKeyBytes = 64

// MaxKeyBytes is the largest volume key of any version: a LUKS2 keyslot's
// key_size goes up to 512 bytes (an authenticated segment's key is the
// cipher key and the MAC key, 96 bytes for aes-xts-plain64 with
// hmac(sha256)).
const MaxKeyBytes = 512

// slotAlign is cryptsetup's LUKS_ALIGN_KEYSLOTS in sectors (4096 bytes).
const slotAlign = 4096 / SectorSize

var magic = [6]byte{'L', 'U', 'K', 'S', 0xBA, 0xBE}

// Field offsets in the phdr (specification §2.4, all integers big-endian).
const (
	offVersion     = 6
	offCipherName  = 8
	offCipherMode  = 40
	offHashSpec    = 72
	offPayload     = 104
	offKeyBytes    = 108
	offMKDigest    = 112
	offMKSalt      = 132
	offMKIter      = 164
	offUUID        = 168
	offSlots       = 208
	slotSize       = 48
	stringSize     = 32
	uuidSize       = 40
	slotOffIter    = 4
	slotOffSalt    = 8
	slotOffKMO     = 40
	slotOffStripes = 44
)

// KeySlot is one of the eight key slots of a LUKS1 header.
type KeySlot struct {
	State             uint32 // raw on-disk value: SlotActive or SlotDisabled
	Iterations        uint32 // PBKDF2 iterations for the passphrase
	Salt              [SaltSize]byte
	KeyMaterialOffset uint32 // in sectors, relative to the header start
	Stripes           uint32
}

// Active reports whether the slot holds a key.
func (s *KeySlot) Active() bool { return s.State == SlotActive }

// LUKS1 is a LUKS1 partition header (phdr).
type LUKS1 struct {
	Version       uint16
	CipherName    string
	CipherMode    string
	HashSpec      string
	PayloadOffset uint32 // in sectors from the header start; 0 for a detached header
	KeyBytes      uint32 // volume key length
	MKDigest      [DigestSize]byte
	MKDigestSalt  [SaltSize]byte
	MKDigestIter  uint32
	UUID          string
	Slots         [NumSlots]KeySlot
}

// cString returns the NUL-terminated string at the start of field.
func cString(field []byte, name string) (string, error) {
	i := bytes.IndexByte(field, 0)
	if i < 0 {
		return "", parseErrorf(name, "string is not NUL-terminated")
	}
	return string(field[:i]), nil
}

// Parse decodes and validates a LUKS1 header from the first 592 bytes of b.
// It returns ErrNotLUKS for a bad magic and a *ParseError (matching
// ErrCorrupt) for a header cryptsetup would not load, for unterminated
// strings, unknown slot states, zero iterations on an active slot or the
// master key digest, and key sizes of 0 or above 64 bytes. An unsupported
// hash gives an *UnsupportedHashError. The cipher is not checked here: an
// unsupported one can still be parsed and shown.
//
// Parse does not know the file size; [Read] also checks that the key slots
// fit in the file.
func Parse(b []byte) (*LUKS1, error) {
	if IsMarked(b) {
		return nil, ErrMarked
	}
	if len(b) < len(magic) || !bytes.Equal(b[:len(magic)], magic[:]) {
		return nil, ErrNotLUKS
	}
	if len(b) < definedSize {
		return nil, parseErrorf("header", "truncated: %d bytes, need %d", len(b), definedSize)
	}
	be := binary.BigEndian
	h := &LUKS1{Version: be.Uint16(b[offVersion:])}
	if h.Version != 1 {
		if h.Version == 2 {
			return nil, parseErrorf("version", "a LUKS2 header is not a LUKS1 phdr")
		}
		return nil, parseErrorf("version", "unsupported LUKS version %d", h.Version)
	}
	var err error
	if h.CipherName, err = cString(b[offCipherName:offCipherName+stringSize], "cipher-name"); err != nil {
		return nil, err
	}
	if h.CipherMode, err = cString(b[offCipherMode:offCipherMode+stringSize], "cipher-mode"); err != nil {
		return nil, err
	}
	if h.HashSpec, err = cString(b[offHashSpec:offHashSpec+stringSize], "hash-spec"); err != nil {
		return nil, err
	}
	if h.UUID, err = cString(b[offUUID:offUUID+uuidSize], "uuid"); err != nil {
		return nil, err
	}
	h.PayloadOffset = be.Uint32(b[offPayload:])
	h.KeyBytes = be.Uint32(b[offKeyBytes:])
	copy(h.MKDigest[:], b[offMKDigest:])
	copy(h.MKDigestSalt[:], b[offMKSalt:])
	h.MKDigestIter = be.Uint32(b[offMKIter:])
	for i := range h.Slots {
		p := b[offSlots+i*slotSize:]
		s := &h.Slots[i]
		s.State = be.Uint32(p)
		s.Iterations = be.Uint32(p[slotOffIter:])
		copy(s.Salt[:], p[slotOffSalt:])
		s.KeyMaterialOffset = be.Uint32(p[slotOffKMO:])
		s.Stripes = be.Uint32(p[slotOffStripes:])
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return h, nil
}

// validate applies cryptsetup's load checks (keymanage.c
// _check_and_convert_hdr, LUKS_check_keyslots) and this package's extra ones.
func (h *LUKS1) validate() error {
	if h.KeyBytes == 0 || h.KeyBytes > maxKeyBytes {
		return parseErrorf("key-bytes", "invalid volume key size %d (want 1 to %d bytes)", h.KeyBytes, maxKeyBytes)
	}
	if h.MKDigestIter == 0 {
		return parseErrorf("mk-digest-iter", "zero iterations")
	}
	secs := uint64(h.KeyMaterialSectors())
	for i := range h.Slots {
		s := &h.Slots[i]
		field := fmt.Sprintf("key slot %d", i)
		switch s.State {
		case SlotActive:
			if s.Iterations == 0 {
				return parseErrorf(field, "active with zero iterations")
			}
		case SlotDisabled:
		default:
			return parseErrorf(field, "invalid state %#08x", s.State)
		}
		// Checked for every slot, active or not, as cryptsetup does.
		if s.Stripes != Stripes {
			return parseErrorf(field, "%d stripes (want %d)", s.Stripes, Stripes)
		}
		kmo := uint64(s.KeyMaterialOffset)
		if kmo*SectorSize < PhdrSize {
			return parseErrorf(field, "key material offset %d overlaps the header", kmo)
		}
		if p := uint64(h.PayloadOffset); p != 0 && (p <= kmo || p < kmo+secs) {
			return parseErrorf(field, "key material (sectors %d to %d) crosses the payload offset %d", kmo, kmo+secs, p)
		}
	}
	order := h.slotOrder()
	for j := 1; j < len(order); j++ {
		prev, next := &h.Slots[order[j-1]], &h.Slots[order[j]]
		if uint64(next.KeyMaterialOffset) < uint64(prev.KeyMaterialOffset)+secs {
			return parseErrorf(fmt.Sprintf("key slot %d", order[j]), "key material overlaps key slot %d", order[j-1])
		}
	}
	if _, err := hashFunc(h.HashSpec); err != nil {
		return err
	}
	return nil
}

// slotOrder returns the slot indexes sorted by key material offset.
func (h *LUKS1) slotOrder() []int {
	order := []int{0, 1, 2, 3, 4, 5, 6, 7}
	slices.SortStableFunc(order, func(a, b int) int {
		oa, ob := h.Slots[a].KeyMaterialOffset, h.Slots[b].KeyMaterialOffset
		switch {
		case oa < ob:
			return -1
		case oa > ob:
			return 1
		}
		return 0
	})
	return order
}

// Read reads and validates the LUKS1 or LUKS2 header at byte offset base of
// r, choosing by the version field; data with neither LUKS magic is probed
// for a LUKS2 secondary copy, as cryptsetup does. size is the number of
// bytes readable from base: the rest of the file for a raw image, the length
// of the LUKS area inside a qcow2 image. Besides the checks of [Parse] (or of
// LUKS2's metadata) it verifies that every slot's key material lies within
// size bytes (cryptsetup's "device is too small"), giving ErrCorrupt
// otherwise. A header marked by an unfinished operation is [ErrMarked] (see
// [ReadMarked]). I/O errors are returned wrapped.
func Read(r io.ReaderAt, base, size int64) (Header, error) { return read(r, base, size, false) }

// read is Read; with marked, a LUKS2 header marked busy is returned rather
// than refused (a LUKS1 mark is undone by ReadMarked's reader).
func read(r io.ReaderAt, base, size int64, marked bool) (Header, error) {
	if base < 0 || size < 0 {
		return nil, fmt.Errorf("header: negative offset %d or size %d", base, size)
	}
	buf := make([]byte, min(size, PhdrSize))
	n, err := r.ReadAt(buf, base)
	if n < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			// Shorter than announced: judge the bytes that exist.
			buf = buf[:n]
		} else {
			return nil, fmt.Errorf("reading LUKS header: %w", err)
		}
	}
	var h Header
	var end int64
	l2, err := probeLUKS2(r, base, size, buf)
	if err != nil {
		return nil, err
	}
	if l2 != nil {
		if l2.busy && !marked {
			return nil, ErrMarked
		}
		h, end = l2, l2.Info().AreaSize
	} else {
		l1, err := Parse(buf)
		if err != nil {
			return nil, err
		}
		h, end = l1, l1.AreaSize()
	}
	if end > size {
		return nil, parseErrorf("key slots", "key material ends at byte %d, beyond the end of the %d-byte area", end, size)
	}
	// Do not trust size alone: the last byte of the key material must exist.
	var last [1]byte
	if n, err := r.ReadAt(last[:], base+end-1); n != 1 {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, parseErrorf("key slots", "key material ends at byte %d, beyond the end of the file", end)
		}
		return nil, fmt.Errorf("reading LUKS key material: %w", err)
	}
	return h, nil
}

// probeLUKS2 reads the LUKS2 header at base whose first bytes are buf: one
// with the LUKS magic and version 2, or, as cryptsetup does for a device
// that starts with neither LUKS magic (lib/setup.c, a header version of 0
// goes to LUKS2_hdr_read), a LUKS2 header whose primary copy is lost, found
// by its secondary copy. It returns nil and no error when buf is another
// version's header or no LUKS2 secondary copy is found: what the LUKS1
// parser then says of buf stands (ErrNotLUKS for a random file).
func probeLUKS2(r io.ReaderAt, base, size int64, buf []byte) (*LUKS2, error) {
	if len(buf) >= 8 && IsLUKSMagic(buf) {
		if binary.BigEndian.Uint16(buf[offVersion:]) != 2 {
			return nil, nil
		}
		return readLUKS2(r, base, size)
	}
	if IsMarked(buf) {
		return nil, nil
	}
	l2, err := readLUKS2(r, base, size)
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			// Neither copy reads: not LUKS, as before the probe.
			return nil, nil
		}
		return nil, err
	}
	return l2, nil
}

// putCString writes s NUL-padded into field; it panics if s does not fit with
// its terminator.
func putCString(field []byte, s, name string) {
	if len(s) >= len(field) || bytes.IndexByte([]byte(s), 0) >= 0 {
		panic(fmt.Sprintf("header: %s %q does not fit in %d bytes with a NUL terminator", name, s, len(field)))
	}
	copy(field, s)
}

// Marshal encodes the header as the PhdrSize (1024) bytes cryptsetup writes:
// the 592 defined bytes, then zeros. It panics if a string field is too long
// for its NUL-terminated field (31 bytes, 39 for the UUID) or contains a NUL,
// which no header from Parse or Format does.
func (h *LUKS1) Marshal() []byte {
	b := make([]byte, PhdrSize)
	be := binary.BigEndian
	copy(b, magic[:])
	be.PutUint16(b[offVersion:], h.Version)
	putCString(b[offCipherName:offCipherName+stringSize], h.CipherName, "cipher-name")
	putCString(b[offCipherMode:offCipherMode+stringSize], h.CipherMode, "cipher-mode")
	putCString(b[offHashSpec:offHashSpec+stringSize], h.HashSpec, "hash-spec")
	be.PutUint32(b[offPayload:], h.PayloadOffset)
	be.PutUint32(b[offKeyBytes:], h.KeyBytes)
	copy(b[offMKDigest:], h.MKDigest[:])
	copy(b[offMKSalt:], h.MKDigestSalt[:])
	be.PutUint32(b[offMKIter:], h.MKDigestIter)
	putCString(b[offUUID:offUUID+uuidSize], h.UUID, "uuid")
	for i := range h.Slots {
		p := b[offSlots+i*slotSize:]
		s := &h.Slots[i]
		be.PutUint32(p, s.State)
		be.PutUint32(p[slotOffIter:], s.Iterations)
		copy(p[slotOffSalt:], s.Salt[:])
		be.PutUint32(p[slotOffKMO:], s.KeyMaterialOffset)
		be.PutUint32(p[slotOffStripes:], s.Stripes)
	}
	return b
}

// KeyMaterialSectors returns the sectors one key slot's material takes:
// cryptsetup's AF_split_sectors(KeyBytes, 4000).
func (h *LUKS1) KeyMaterialSectors() int {
	return int(afSectors(uint64(h.KeyBytes), Stripes))
}

// AreaSize returns the bytes from the header start to the end of the key
// material that ends last, unaligned. (cryptsetup luksHeaderBackup rounds this
// up to 4096 bytes.)
func (h *LUKS1) AreaSize() int64 {
	secs := uint64(h.KeyMaterialSectors())
	end := uint64(PhdrSize / SectorSize)
	for i := range h.Slots {
		end = max(end, uint64(h.Slots[i].KeyMaterialOffset)+secs)
	}
	return int64(end * SectorSize)
}

// CipherSpec returns the cryptsetup cipher specification,
// e.g. "aes-cbc-essiv:sha256".
func (h *LUKS1) CipherSpec() string { return h.CipherName + "-" + h.CipherMode }

// slotLayout returns cryptsetup's key material offsets for a keyBytes-byte
// key (LUKS_generate_phdr): the first slot at 4096 bytes, each next one at the
// end of the previous rounded up to 4096 bytes. It also returns the end of
// the last slot rounded up the same way.
func slotLayout(keyBytes int) (offsets [NumSlots]uint32, end uint64) {
	secs := afSectors(uint64(keyBytes), Stripes)
	cur := uint64(slotAlign)
	for i := range offsets {
		offsets[i] = uint32(cur)
		cur = roundUp(cur+secs, slotAlign)
	}
	return offsets, cur
}

func roundUp(n, align uint64) uint64 { return (n + align - 1) / align * align }

// ActiveSlots counts the active key slots.
func (h *LUKS1) ActiveSlots() int {
	n := 0
	for i := range h.Slots {
		if h.Slots[i].Active() {
			n++
		}
	}
	return n
}
