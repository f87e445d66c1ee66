package integrity

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// SuperblockSize is the size of the superblock area at sector S: 64
// meaningful bytes, zeros after them (linux SB_SECTORS).
const SuperblockSize = superblockSectors * sectorBytes

// Magic opens every superblock: "integrt" and a NUL (linux SB_MAGIC).
const Magic = "integrt\x00"

// Superblock flags (linux SB_FLAG_*).
const (
	FlagHaveJournalMAC = 0x1
	FlagRecalculating  = 0x2
	FlagDirtyBitmap    = 0x4
	FlagFixedPadding   = 0x8
	FlagFixedHMAC      = 0x10
)

// Superblock is the decoded dm-integrity superblock (linux struct
// superblock; little-endian, docs/INTEGRITY.md §2). The pad fields are not
// kept: they are zero when written and ignored when read, as the kernel
// does.
type Superblock struct {
	Version                uint8  // 1..5, derived from the flags at format
	Log2InterleaveSectors  uint8  // L
	TagSize                uint16 // T
	JournalSections        uint32 // journal size in sections
	ProvidedDataSectors    uint64 // data sectors as stored; the kernel recomputes them
	Flags                  uint32 // Flag* bits
	Log2SectorsPerBlock    uint8  // log2(B/512)
	Log2BlocksPerBitmapBit uint8  // used in bitmap mode only, written at format
	RecalcSector           uint64 // recalculation position, with FlagRecalculating
	Salt                   [16]byte
}

// ParseSuperblock decodes the first 64 bytes of b, which must hold at least
// that many and start with Magic. The bytes after them are not looked at
// (the kernel ignores them). It checks nothing else: see Validate.
func ParseSuperblock(b []byte) (*Superblock, error) {
	if len(b) < 64 {
		return nil, fmt.Errorf("%w: %d bytes, want 64", ErrNoSuperblock, len(b))
	}
	if string(b[:8]) != Magic {
		if len(b) >= SuperblockSize && bytes.Count(b[:SuperblockSize], []byte{0}) == SuperblockSize {
			return nil, fmt.Errorf("%w: the superblock area is all zero", ErrNoSuperblock)
		}
		return nil, fmt.Errorf("%w: magic %q", ErrNoSuperblock, b[:8])
	}
	le := binary.LittleEndian
	s := &Superblock{
		Version:                b[8],
		Log2InterleaveSectors:  b[9],
		TagSize:                le.Uint16(b[10:]),
		JournalSections:        le.Uint32(b[12:]),
		ProvidedDataSectors:    le.Uint64(b[16:]),
		Flags:                  le.Uint32(b[24:]),
		Log2SectorsPerBlock:    b[28],
		Log2BlocksPerBitmapBit: b[29],
		RecalcSector:           le.Uint64(b[32:]),
	}
	copy(s.Salt[:], b[48:64])
	return s, nil
}

// Bytes encodes the superblock as the SuperblockSize bytes the kernel
// writes.
func (s *Superblock) Bytes() []byte {
	b := make([]byte, SuperblockSize)
	le := binary.LittleEndian
	copy(b, Magic)
	b[8] = s.Version
	b[9] = s.Log2InterleaveSectors
	le.PutUint16(b[10:], s.TagSize)
	le.PutUint32(b[12:], s.JournalSections)
	le.PutUint64(b[16:], s.ProvidedDataSectors)
	le.PutUint32(b[24:], s.Flags)
	b[28] = s.Log2SectorsPerBlock
	b[29] = s.Log2BlocksPerBitmapBit
	le.PutUint64(b[32:], s.RecalcSector)
	copy(b[48:], s.Salt[:])
	return b
}

// Validate applies the kernel's checks of a stored superblock (linux
// dm_integrity_ctr: version, journal_sections, interleave, tag and block
// size ranges) and refuses what a LUKS2 segment never has and this package
// does not handle: a journal MAC, a recalculation in progress, bitmap mode,
// and flags unknown to Linux 6.1 (later kernels' inline mode among them).
// Fixed HMAC is accepted: it only matters with an internal hash or journal
// MAC.
func (s *Superblock) Validate() error {
	switch {
	case s.Version < 1 || s.Version > 5:
		return fmt.Errorf("%w: version %d, want 1..5", ErrSuperblock, s.Version)
	case s.JournalSections == 0:
		return fmt.Errorf("%w: journal_sections is 0", ErrSuperblock)
	case s.Log2InterleaveSectors < minLog2Interleave || s.Log2InterleaveSectors > maxLog2Interleave:
		return fmt.Errorf("%w: log2 interleave %d, want %d..%d", ErrSuperblock, s.Log2InterleaveSectors, minLog2Interleave, maxLog2Interleave)
	case s.TagSize == 0 || s.TagSize > maxTagSize:
		return fmt.Errorf("%w: tag size %d, want 1..%d", ErrSuperblock, s.TagSize, maxTagSize)
	case s.Log2SectorsPerBlock > maxLog2SPB:
		return fmt.Errorf("%w: log2 sectors per block %d, want 0..%d", ErrSuperblock, s.Log2SectorsPerBlock, maxLog2SPB)
	}
	if f := s.Flags &^ (FlagFixedPadding | FlagFixedHMAC); f != 0 {
		what := "flags unknown to Linux 6.1"
		switch {
		case f&FlagHaveJournalMAC != 0:
			what = "a journal MAC"
		case f&FlagRecalculating != 0:
			what = "a tag recalculation in progress"
		case f&FlagDirtyBitmap != 0:
			what = "bitmap mode"
		}
		return fmt.Errorf("%w: flags %#x: %s", ErrUnsupported, s.Flags, what)
	}
	return nil
}

// version is the superblock version the kernel derives from the flags
// (linux sb_set_version; no separate metadata device, not bitmap mode).
func version(flags uint32) uint8 {
	switch {
	case flags&FlagFixedHMAC != 0:
		return 5
	case flags&FlagFixedPadding != 0:
		return 4
	case flags&FlagDirtyBitmap != 0:
		return 3
	case flags&FlagRecalculating != 0:
		return 2
	}
	return 1
}

// Superblock returns the superblock a format with this geometry writes
// (linux initialize_superblock, dm_integrity_ctr): with fixed padding,
// version 4 and flags 0x08; the salt and recalc_sector zero, because a
// LUKS2 stack has neither an internal hash nor a journal MAC. For a
// geometry from Read, the data sectors are the recomputed ones, which is
// what the kernel rewrites on activation.
func (g *Geometry) Superblock() *Superblock {
	var flags uint32
	if g.fixedPadding {
		flags |= FlagFixedPadding
	}
	return &Superblock{
		Version:                version(flags),
		Log2InterleaveSectors:  g.log2Interleave,
		TagSize:                uint16(g.tagSize),
		JournalSections:        g.journalSections,
		ProvidedDataSectors:    g.provided,
		Flags:                  flags,
		Log2SectorsPerBlock:    g.log2SPB,
		Log2BlocksPerBitmapBit: g.log2BitmapBit,
	}
}
