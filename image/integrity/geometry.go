// Package integrity knows the on-disk layout of dm-integrity as it sits
// under a LUKS2 data segment made with an authenticated cipher
// (cryptsetup luksFormat --integrity ...): where the superblock, the
// journal, the tag runs and the data live, how to write fresh metadata and
// how to check, and replay, the journal the kernel leaves behind.
//
// It knows no ciphers: a tag is an opaque slot of T bytes per B-byte block.
// The facts come from the Linux 6.1 source (drivers/md/dm-integrity.c) and
// cryptsetup's lib/integrity, checked against images the kernel wrote; each
// function names the kernel function whose rule it follows.
//
// Units: a sector is 512 bytes. S is the offset of the LUKS2 data segment in
// sectors (where the superblock sits), D the size of the whole file in
// sectors (header included), T the tag size and B the encryption sector
// (block) size in bytes.
package integrity

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
)

// sectorBytes is the unit of every sector count and sector number here.
const sectorBytes = 512

// On-disk constants (linux drivers/md/dm-integrity.c).
const (
	superblockSectors    = 8      // SB_SECTORS
	journalBlockSectors  = 8      // JOURNAL_BLOCK_SECTORS: metadata sectors per section
	journalSectorData    = 504    // JOURNAL_SECTOR_DATA: bytes before the commit id
	journalEntryRoundup  = 8      // JOURNAL_ENTRY_ROUNDUP
	maxTagSize           = 255    // MAX_TAG_SIZE (6.1)
	maxLog2SPB           = 3      // MAX_SECTORS_PER_BLOCK = 8
	paddingSectors       = 8      // METADATA_PADDING_SECTORS
	defaultLog2Interlv   = 15     // DEFAULT_INTERLEAVE_SECTORS = 32768
	minLog2Interleave    = 3      // MIN_LOG2_INTERLEAVE_SECTORS
	maxLog2Interleave    = 31     // MAX_LOG2_INTERLEAVE_SECTORS
	maxJournalSectors    = 131072 // DEFAULT_MAX_JOURNAL_SECTORS on 64-bit
	journalSizeFactor    = 7      // DEFAULT_JOURNAL_SIZE_FACTOR
	log2SectorsPerBitmap = 15     // __fls(DEFAULT_SECTORS_PER_BITMAP_BIT)
)

// Errors. Each is wrapped with the detail of the case.
var (
	// ErrNoSuperblock: the 4096 bytes at the segment offset do not start
	// with the dm-integrity magic.
	ErrNoSuperblock = errors.New("no dm-integrity superblock")
	// ErrSuperblock: the superblock carries a value the kernel rejects.
	ErrSuperblock = errors.New("invalid dm-integrity superblock")
	// ErrUnsupported: a tag or block size dm-integrity does not take, or a
	// valid superblock of a kind a LUKS2 segment never has (journal MAC,
	// recalculation, bitmap mode, unknown flags).
	ErrUnsupported = errors.New("unsupported dm-integrity configuration")
	// ErrTooSmall: the device cannot hold the layout, or holds fewer data
	// sectors than the superblock promises.
	ErrTooSmall = errors.New("device too small for dm-integrity")
	// ErrMismatch: the superblock's tag or sector size is not the one the
	// cipher specification calls for.
	ErrMismatch = errors.New("dm-integrity parameters do not match")
	// ErrJournal: the kernel would fail every I/O on this journal.
	ErrJournal = errors.New("invalid dm-integrity journal")
)

// Geometry is the layout of one dm-integrity device inside a file: the
// superblock at sector S, the journal after it, then areas of one tag run
// (M sectors) followed by up to 2^L data sectors. It is immutable.
type Geometry struct {
	start, device   uint64 // S and D, in sectors
	tagSize         int    // T
	log2SPB         uint8  // log2(B/512)
	log2Interleave  uint8  // L
	fixedPadding    bool   // SB_FLAG_FIXED_PADDING
	journalSections uint32

	entrySize      int    // journal_entry_size
	sectionEntries int    // journal_section_entries
	sectionSectors int    // journal_section_sectors
	initial        uint64 // initial_sectors I: superblock and journal
	metadataRun    uint64 // metadata_run M, in sectors
	provided       uint64 // provided_data_sectors P, recomputed from D
	log2BitmapBit  uint8  // log2_blocks_per_bitmap_bit a format writes
}

// New computes the geometry the kernel gives a fresh format on a file of
// deviceSectors sectors with the superblock at sector start, tag size
// tagSize and block size sectorSize (512, 1024, 2048 or 4096): the kernel
// defaults cryptsetup 2.6.1 always uses for LUKS2, that is interleave 2^15
// sectors, fixed padding and a journal of min(131072, D>>7) sectors
// (linux dm_integrity_ctr, initialize_superblock).
func New(deviceSectors, start uint64, tagSize, sectorSize int) (*Geometry, error) {
	l2spb, err := log2SectorsPerBlock(sectorSize)
	if err != nil {
		return nil, err
	}
	if tagSize < 1 || tagSize > maxTagSize {
		return nil, fmt.Errorf("%w: tag size %d, want 1..%d", ErrUnsupported, tagSize, maxTagSize)
	}
	journalSectors := min(uint64(maxJournalSectors), deviceSectors>>journalSizeFactor)
	_, _, sectionSectors := journalSection(tagSize, l2spb)
	sections := max(1, journalSectors/uint64(sectionSectors))
	return layout(deviceSectors, start, tagSize, l2spb, defaultLog2Interlv, uint32(sections), true)
}

// Read parses and checks the superblock at sector start of r and derives
// the geometry from its stored journal size, interleave, tag size and block
// size and from the current device size, as the kernel does at every
// activation (linux dm_integrity_ctr). The kernel recomputes the provided
// data sectors from the device size: Geometry.DataSectors is that value.
// The stored one stays in the returned Superblock: cryptsetup maps that
// many sectors at the activation that finds it, and the kernel then
// rewrites it with the recomputed value (linux dm_integrity_resume). A
// stored value larger than the recomputed one fails with ErrTooSmall, as
// activation does. Callers check the tag and block size against the
// cipher with Geometry.Check.
func Read(r io.ReaderAt, start, deviceSectors uint64) (*Geometry, *Superblock, error) {
	if start > math.MaxInt64/sectorBytes-superblockSectors {
		return nil, nil, fmt.Errorf("%w: start sector %d", ErrTooSmall, start)
	}
	buf := make([]byte, SuperblockSize)
	if _, err := r.ReadAt(buf, int64(start)*sectorBytes); err != nil {
		return nil, nil, fmt.Errorf("reading the dm-integrity superblock at sector %d: %w", start, err)
	}
	sb, err := ParseSuperblock(buf)
	if err != nil {
		return nil, nil, err
	}
	if err := sb.Validate(); err != nil {
		return nil, nil, err
	}
	g, err := layout(deviceSectors, start, int(sb.TagSize), sb.Log2SectorsPerBlock, sb.Log2InterleaveSectors,
		sb.JournalSections, sb.Flags&FlagFixedPadding != 0)
	if err != nil {
		return nil, nil, err
	}
	if sb.ProvidedDataSectors > g.provided {
		return nil, nil, fmt.Errorf("%w: the superblock provides %d data sectors, a device of %d sectors holds at most %d",
			ErrTooSmall, sb.ProvidedDataSectors, deviceSectors, g.provided)
	}
	return g, sb, nil
}

// Check reports whether the geometry's tag size and block size are the
// ones the cipher specification calls for, as the kernel checks the table
// against the superblock (linux dm_integrity_ctr: "Tag size doesn't match
// ...", "Block size doesn't match ...").
func (g *Geometry) Check(tagSize, sectorSize int) error {
	if tagSize != g.tagSize {
		return fmt.Errorf("%w: tag size %d in the superblock, want %d", ErrMismatch, g.tagSize, tagSize)
	}
	if sectorSize != g.SectorSize() {
		return fmt.Errorf("%w: block size %d in the superblock, want %d", ErrMismatch, g.SectorSize(), sectorSize)
	}
	return nil
}

func log2SectorsPerBlock(sectorSize int) (uint8, error) {
	for l := uint8(0); l <= maxLog2SPB; l++ {
		if sectorSize == sectorBytes<<l {
			return l, nil
		}
	}
	return 0, fmt.Errorf("%w: block size %d, want 512, 1024, 2048 or 4096", ErrUnsupported, sectorSize)
}

// journalSection gives the entry size, entries per section and sectors per
// section of the journal, without a journal MAC
// (linux calculate_journal_section_size).
func journalSection(tagSize int, l2spb uint8) (entrySize, sectionEntries, sectionSectors int) {
	spb := 1 << l2spb
	entrySize = roundUp(8+8*spb+tagSize, journalEntryRoundup)
	sectionEntries = journalSectorData / entrySize * journalBlockSectors
	sectionSectors = sectionEntries<<l2spb + journalBlockSectors
	return
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// layout derives a geometry from the stored parameters and the device size
// (linux calculate_device_limits, get_provided_data_sectors).
func layout(device, start uint64, tagSize int, l2spb, log2Interleave uint8, sections uint32, fixedPadding bool) (*Geometry, error) {
	if device > math.MaxInt64/sectorBytes {
		return nil, fmt.Errorf("%w: %d sectors is beyond a file's size", ErrTooSmall, device)
	}
	g := &Geometry{
		start: start, device: device, tagSize: tagSize, log2SPB: l2spb,
		log2Interleave: log2Interleave, fixedPadding: fixedPadding, journalSections: sections,
	}
	g.entrySize, g.sectionEntries, g.sectionSectors = journalSection(tagSize, l2spb)
	g.initial = superblockSectors + uint64(g.sectionSectors)*uint64(sections)
	pad := uint64(sectorBytes << paddingSectors) // legacy: 128 KiB
	if fixedPadding {
		pad = paddingSectors * sectorBytes // 4 KiB
	}
	runBytes := uint64(tagSize) << (log2Interleave - l2spb)
	g.metadataRun = (runBytes + pad - 1) / pad * pad / sectorBytes
	g.provided = providedDataSectors(device, start, g.initial, g.metadataRun, log2Interleave)
	if g.provided == 0 {
		return nil, fmt.Errorf("%w: %d sectors after sector %d hold no data sectors (superblock and journal take %d, a tag run %d)",
			ErrTooSmall, device, start, g.initial, g.metadataRun)
	}
	g.log2BitmapBit = bitmapBit(uint64(g.sectionSectors)*uint64(sections), g.provided, l2spb)
	return g, nil
}

// providedDataSectors is the kernel's provided_data_sectors: the largest
// multiple of 8 whose last data sector still lies inside the device. The
// kernel finds it bit by bit (linux get_provided_data_sectors with
// calculate_device_limits); the mapping is monotonic, so this closed form
// gives the same value (integrity.md §5.3; the tests compare both).
func providedDataSectors(device, start, initial, run uint64, log2Interleave uint8) uint64 {
	// calculate_device_limits rejects every size when initial_sectors + 8
	// reaches the device or initial_sectors overflows 32 bits.
	if initial+paddingSectors >= device || initial > math.MaxUint32 || start >= device-initial {
		return 0
	}
	avail := device - initial - start
	interleave := uint64(1) << log2Interleave
	per := interleave + run
	full := avail / per
	rem := avail - full*per
	p := full * interleave
	if rem > run {
		p += min(rem-run, interleave)
	}
	return p &^ 7
}

// bitmapBit is the log2_blocks_per_bitmap_bit a format stores: the bitmap
// of bitmap mode must fit in the journal area, 4096 bits per journal sector
// (linux dm_integrity_ctr).
func bitmapBit(journalSectors, provided uint64, l2spb uint8) uint8 {
	k := uint8(log2SectorsPerBitmap)
	if k < l2spb {
		k = l2spb
	}
	bits := min(journalSectors<<(9+3), math.MaxUint32)
	for k < 63 && bits < (provided+(uint64(1)<<k)-1)>>k {
		k++
	}
	return k - l2spb
}

// DataSectors is the number of 512-byte sectors the device provides: the
// length of the integrity and dm-crypt devices.
func (g *Geometry) DataSectors() uint64 { return g.provided }

// TagSize is T, the bytes of metadata per block.
func (g *Geometry) TagSize() int { return g.tagSize }

// SectorSize is B, the block (encryption sector) size in bytes.
func (g *Geometry) SectorSize() int { return sectorBytes << g.log2SPB }

// Start is S, the sector of the superblock.
func (g *Geometry) Start() uint64 { return g.start }

// DeviceSectors is D, the size of the file in sectors this geometry is for.
func (g *Geometry) DeviceSectors() uint64 { return g.device }

// Log2Interleave is L: an area holds up to 2^L data sectors.
func (g *Geometry) Log2Interleave() int { return int(g.log2Interleave) }

// FixedPadding reports whether tag runs are padded to 4 KiB (every format
// since dm-integrity 1.4) rather than to the legacy 128 KiB.
func (g *Geometry) FixedPadding() bool { return g.fixedPadding }

// JournalSections is the number of journal sections.
func (g *Geometry) JournalSections() int { return int(g.journalSections) }

// JournalSectionSectors is the size of one journal section in sectors.
func (g *Geometry) JournalSectionSectors() int { return g.sectionSectors }

// JournalSectionEntries is the number of block entries in one section.
func (g *Geometry) JournalSectionEntries() int { return g.sectionEntries }

// JournalEntrySize is the size in bytes of one journal entry.
func (g *Geometry) JournalEntrySize() int { return g.entrySize }

// InitialSectors is I, the superblock and journal: the first tag run
// starts at sector S+I.
func (g *Geometry) InitialSectors() uint64 { return g.initial }

// MetadataRun is M, the sectors of one area's tag run.
func (g *Geometry) MetadataRun() uint64 { return g.metadataRun }

// JournalOffset is the byte offset of the journal in the file.
func (g *Geometry) JournalOffset() int64 { return int64(g.start+superblockSectors) * sectorBytes }

// JournalBytes is the size of the journal in bytes.
func (g *Geometry) JournalBytes() int64 {
	return int64(g.journalSections) * int64(g.sectionSectors) * sectorBytes
}

// End is the byte offset just past the last data sector: the least file
// size that holds the whole layout.
func (g *Geometry) End() int64 { return g.DataOffset(g.provided-1) + sectorBytes }

func (g *Geometry) checkSector(n uint64) {
	if n >= g.provided {
		panic(fmt.Sprintf("integrity: sector %d beyond the %d data sectors", n, g.provided))
	}
}

// DataOffset is the byte offset in the file of logical sector n (a 512-byte
// sector of the integrity device, n < DataSectors) (linux get_data_sector).
func (g *Geometry) DataOffset(n uint64) int64 {
	g.checkSector(n)
	a, o := n>>g.log2Interleave, n&(1<<g.log2Interleave-1)
	return int64(g.start+g.initial+a<<g.log2Interleave+(a+1)*g.metadataRun+o) * sectorBytes
}

// TagOffset is the byte offset in the file of the T-byte tag of the block
// holding logical sector n (linux get_metadata_sector_and_offset). Tags are
// packed back to back from the start of the area's tag run.
func (g *Geometry) TagOffset(n uint64) int64 {
	g.checkSector(n)
	a, o := n>>g.log2Interleave, n&(1<<g.log2Interleave-1)
	run := int64(g.start+g.initial+a*(1<<g.log2Interleave+g.metadataRun)) * sectorBytes
	return run + int64(o>>g.log2SPB)*int64(g.tagSize)
}

// Area is one interleave area: its tag run, then its data sectors. The
// data of the area are DataLen contiguous bytes at DataOffset, its tags
// TagLen contiguous bytes at TagOffset, block i's tag at
// TagOffset + i*TagSize.
type Area struct {
	Index       uint64 // area number, from 0
	FirstSector uint64 // first logical sector
	Sectors     uint64 // data sectors in the area: 2^L, fewer in the last
	DataOffset  int64  // byte offset of the first data sector in the file
	TagOffset   int64  // byte offset of the first tag in the file
	DataLen     int64  // Sectors * 512
	TagLen      int64  // blocks * T
}

// NumAreas is the number of areas holding data sectors.
func (g *Geometry) NumAreas() uint64 {
	return (g.provided + 1<<g.log2Interleave - 1) >> g.log2Interleave
}

// Area returns area i, i < NumAreas.
func (g *Geometry) Area(i uint64) Area {
	first := i << g.log2Interleave
	g.checkSector(first)
	n := min(uint64(1)<<g.log2Interleave, g.provided-first)
	return Area{
		Index: i, FirstSector: first, Sectors: n,
		DataOffset: g.DataOffset(first), TagOffset: g.TagOffset(first),
		DataLen: int64(n) * sectorBytes, TagLen: int64(n>>g.log2SPB) * int64(g.tagSize),
	}
}

// Areas yields every area in order.
func (g *Geometry) Areas() iter.Seq[Area] {
	return func(yield func(Area) bool) {
		for i := range g.NumAreas() {
			if !yield(g.Area(i)) {
				return
			}
		}
	}
}
