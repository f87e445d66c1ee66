package integrity

import (
	"encoding/hex"
	"errors"
	"math/bits"
	"math/rand/v2"
	"strings"
	"testing"
)

const segStart = 32768 // the default 16 MiB LUKS2 data offset, in sectors

// TestWorkedGeometries: every row of docs/INTEGRITY.md §4.4 (formats cryptsetup
// 2.6.1 made in the Debian 6.1 kernel).
func TestWorkedGeometries(t *testing.T) {
	for _, c := range []struct {
		d                  uint64
		b, tag             int
		sections, sectSize int
		i, m, p            uint64
		areas              uint64
	}{
		{65536, 512, 32, 5, 88, 448, 2048, 30272, 1},
		{65536, 4096, 32, 1, 264, 272, 256, 32240, 1},
		{65536, 512, 28, 5, 88, 448, 1792, 30528, 1},
		{65536, 4096, 28, 1, 264, 272, 224, 32272, 1},
		{143360, 512, 28, 12, 88, 1064, 1792, 102360, 4},
		{153625, 4096, 32, 4, 264, 1064, 256, 118768, 4},
		{184323, 512, 32, 16, 88, 1416, 2048, 139896, 5},
		{41943040, 512, 32, 1489, 88, 131040, 2048, 39321600, 1200},
	} {
		g, err := New(c.d, segStart, c.tag, c.b)
		if err != nil {
			t.Fatalf("D=%d B=%d T=%d: %v", c.d, c.b, c.tag, err)
		}
		if g.JournalSections() != c.sections || g.JournalSectionSectors() != c.sectSize ||
			g.InitialSectors() != c.i || g.MetadataRun() != c.m || g.DataSectors() != c.p || g.NumAreas() != c.areas {
			t.Errorf("D=%d B=%d T=%d: journal %d x %d, I %d, M %d, P %d, %d areas; want %d x %d, %d, %d, %d, %d",
				c.d, c.b, c.tag, g.JournalSections(), g.JournalSectionSectors(), g.InitialSectors(), g.MetadataRun(),
				g.DataSectors(), g.NumAreas(), c.sections, c.sectSize, c.i, c.m, c.p, c.areas)
		}
		if g.TagSize() != c.tag || g.SectorSize() != c.b || g.Start() != segStart || g.DeviceSectors() != c.d ||
			g.Log2Interleave() != 15 || !g.FixedPadding() {
			t.Errorf("D=%d: parameters T %d B %d S %d D %d L %d fixed %v", c.d, g.TagSize(), g.SectorSize(),
				g.Start(), g.DeviceSectors(), g.Log2Interleave(), g.FixedPadding())
		}
		if g.End() > int64(c.d)*sectorBytes {
			t.Errorf("D=%d: layout ends at byte %d, past the file", c.d, g.End())
		}
		checkAreas(t, g)
	}
}

// checkAreas: the areas cover the data sectors in order, agree with
// DataOffset and TagOffset, and neither overlap each other nor the
// journal.
func checkAreas(t *testing.T, g *Geometry) {
	t.Helper()
	next := uint64(0)
	prevEnd := g.JournalOffset() + g.JournalBytes()
	spb := uint64(g.SectorSize() / sectorBytes)
	for a := range g.Areas() {
		if a.FirstSector != next || a.DataOffset != g.DataOffset(a.FirstSector) || a.TagOffset != g.TagOffset(a.FirstSector) {
			t.Fatalf("area %d: %+v, want first sector %d", a.Index, a, next)
		}
		if a.TagOffset != prevEnd || a.TagOffset+int64(g.MetadataRun())*sectorBytes != a.DataOffset {
			t.Fatalf("area %d: tag run at %d, data at %d; previous area ended at %d", a.Index, a.TagOffset, a.DataOffset, prevEnd)
		}
		if a.TagLen > int64(g.MetadataRun())*sectorBytes || a.DataLen != int64(a.Sectors)*sectorBytes ||
			a.TagLen != int64(a.Sectors/spb)*int64(g.TagSize()) {
			t.Fatalf("area %d: %d tag bytes, %d data bytes for %d sectors", a.Index, a.TagLen, a.DataLen, a.Sectors)
		}
		last := a.FirstSector + a.Sectors - 1
		if g.DataOffset(last) != a.DataOffset+a.DataLen-sectorBytes ||
			g.TagOffset(last) != a.TagOffset+a.TagLen-int64(g.TagSize()) {
			t.Fatalf("area %d: last sector %d at %d (tag %d)", a.Index, last, g.DataOffset(last), g.TagOffset(last))
		}
		next += a.Sectors
		prevEnd = a.DataOffset + a.DataLen
	}
	if next != g.DataSectors() || prevEnd != g.End() {
		t.Fatalf("areas cover %d sectors up to byte %d; want %d up to %d", next, prevEnd, g.DataSectors(), g.End())
	}
}

// TestJournalSectionTable: docs/INTEGRITY.md §3.1.
func TestJournalSectionTable(t *testing.T) {
	for _, c := range []struct{ b, tag, entry, perSector, perSection, sectors int }{
		{512, 32, 48, 10, 80, 88},
		{4096, 32, 104, 4, 32, 264},
		{512, 28, 48, 10, 80, 88},
		{4096, 28, 104, 4, 32, 264},
	} {
		g, err := New(65536, segStart, c.tag, c.b)
		if err != nil {
			t.Fatal(err)
		}
		if g.JournalEntrySize() != c.entry || g.JournalSectionEntries() != c.perSection ||
			g.JournalSectionEntries()/8 != c.perSector || g.JournalSectionSectors() != c.sectors {
			t.Errorf("B=%d T=%d: entry %d, %d per section, %d sectors; want %d, %d (%d per sector), %d", c.b, c.tag,
				g.JournalEntrySize(), g.JournalSectionEntries(), g.JournalSectionSectors(), c.entry, c.perSection, c.perSector, c.sectors)
		}
	}
}

// TestWorkedOffsets: docs/INTEGRITY.md §4.2, offsets the kernel confirmed by
// reporting the flipped sector.
func TestWorkedOffsets(t *testing.T) {
	g, err := New(65536, segStart, 32, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		got  int64
		want int64
	}{
		{"data of sector 0", g.DataOffset(0), 18055168},
		{"tag of sector 0", g.TagOffset(0), 17006592},
		{"tag of sector 5", g.TagOffset(5), 17006752},
		{"byte 100 of sector 9", g.DataOffset(9) + 100, 18059876},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, want %d", c.name, c.got, c.want)
		}
	}
	// 4 KiB blocks: one tag per block, so sectors 0..7 share a tag.
	g4, err := New(153625, segStart, 32, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if g4.TagOffset(7) != g4.TagOffset(0) || g4.TagOffset(8) != g4.TagOffset(0)+32 {
		t.Errorf("4K tags of sectors 0, 7, 8 at %d, %d, %d", g4.TagOffset(0), g4.TagOffset(7), g4.TagOffset(8))
	}
	// Sector 32768 opens area 1: after area 0's data and area 1's tag run.
	if want := g4.DataOffset(32767) + sectorBytes + int64(g4.MetadataRun())*sectorBytes; g4.DataOffset(32768) != want {
		t.Errorf("area 1 data at %d, want %d", g4.DataOffset(32768), want)
	}
	if want := g4.DataOffset(32767) + sectorBytes; g4.TagOffset(32768) != want {
		t.Errorf("area 1 tags at %d, want %d", g4.TagOffset(32768), want)
	}
	defer func() {
		if recover() == nil {
			t.Error("DataOffset past the data sectors did not panic")
		}
	}()
	g.DataOffset(g.DataSectors())
}

// TestSuperblockExamples: docs/INTEGRITY.md §2, the superblocks cryptsetup's
// format wrote for 32 MiB files.
func TestSuperblockExamples(t *testing.T) {
	for _, c := range []struct {
		b   int
		hex string
	}{
		{512, "696e746567727400 04 0f 2000 05000000 4076000000000000 08000000 00 0f 0000 0000000000000000 0000000000000000"},
		{4096, "696e746567727400 04 0f 2000 01000000 f07d000000000000 08000000 03 0c 0000 0000000000000000 0000000000000000"},
	} {
		g, err := New(65536, segStart, 32, c.b)
		if err != nil {
			t.Fatal(err)
		}
		want, err := hex.DecodeString(strings.ReplaceAll(c.hex, " ", "") + strings.Repeat("00", 16))
		if err != nil {
			t.Fatal(err)
		}
		got := g.Superblock().Bytes()
		if len(got) != 4096 {
			t.Fatalf("superblock of %d bytes", len(got))
		}
		if hex.EncodeToString(got[:64]) != hex.EncodeToString(want) {
			t.Errorf("B=%d superblock\n got %x\nwant %x", c.b, got[:64], want)
		}
		for i, x := range got[64:] {
			if x != 0 {
				t.Fatalf("B=%d: byte %d is %#x", c.b, 64+i, x)
			}
		}
		// Round trip, and Read derives the same geometry.
		f := &memFile{}
		if _, err := f.WriteAt(got, segStart*sectorBytes); err != nil {
			t.Fatal(err)
		}
		rg, sb, err := Read(f, segStart, 65536)
		if err != nil {
			t.Fatal(err)
		}
		if *sb != *g.Superblock() || *rg != *g {
			t.Errorf("B=%d: Read gives %+v / %+v, want %+v / %+v", c.b, sb, rg, g.Superblock(), g)
		}
		if err := rg.Check(32, c.b); err != nil {
			t.Error(err)
		}
		if err := rg.Check(28, c.b); !errors.Is(err, ErrMismatch) {
			t.Errorf("tag size 28 against 32: %v", err)
		}
		if err := rg.Check(32, 8192/c.b*512); !errors.Is(err, ErrMismatch) {
			t.Errorf("other block size: %v", err)
		}
	}
}

// TestGrownDevice: docs/INTEGRITY.md §4.4's last row and §4.5. The superblock
// of a 32 MiB format read on a 40 MiB file keeps its journal; the kernel
// recomputes 44608 data sectors. A stored value over the maximum is
// refused.
func TestGrownDevice(t *testing.T) {
	g, err := New(65536, segStart, 32, 512)
	if err != nil {
		t.Fatal(err)
	}
	f := &memFile{}
	if err := g.WriteMetadata(f); err != nil {
		t.Fatal(err)
	}
	rg, sb, err := Read(f, segStart, 81920)
	if err != nil {
		t.Fatal(err)
	}
	if sb.ProvidedDataSectors != 30272 || rg.DataSectors() != 44608 || rg.JournalSections() != 5 || rg.InitialSectors() != 448 {
		t.Errorf("grown: stored %d, effective %d, %d sections, I %d; want 30272, 44608, 5, 448",
			sb.ProvidedDataSectors, rg.DataSectors(), rg.JournalSections(), rg.InitialSectors())
	}
	if fresh, _ := New(81920, segStart, 32, 512); fresh.JournalSections() == 5 {
		t.Errorf("a fresh 40 MiB format would also have 5 sections; the test shows nothing")
	}
	// Shrunk below the last data sector: refused.
	if _, _, err := Read(f, segStart, 65535); !errors.Is(err, ErrTooSmall) {
		t.Errorf("shrunk device: %v", err)
	}
	// 30280 stored where 30272 fit: refused; 30000: accepted, effective 30272.
	for _, c := range []struct {
		stored uint64
		ok     bool
	}{{30280, false}, {30000, true}, {30272, true}} {
		s := g.Superblock()
		s.ProvidedDataSectors = c.stored
		f.WriteAt(s.Bytes(), segStart*sectorBytes)
		rg, sb, err := Read(f, segStart, 65536)
		if !c.ok {
			if !errors.Is(err, ErrTooSmall) {
				t.Errorf("stored %d: %v, want ErrTooSmall", c.stored, err)
			}
			continue
		}
		if err != nil || sb.ProvidedDataSectors != c.stored || rg.DataSectors() != 30272 {
			t.Errorf("stored %d: %v", c.stored, err)
		}
	}
}

// TestReadRefuses: the superblock checks of docs/INTEGRITY.md §7 and the
// kernel's dm_integrity_ctr.
func TestReadRefuses(t *testing.T) {
	g, err := New(65536, segStart, 32, 512)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(b []byte)
		want error
	}{
		{"zero area", func(b []byte) { clear(b) }, ErrNoSuperblock},
		{"bad magic", func(b []byte) { b[0] = 'I' }, ErrNoSuperblock},
		{"version 0", func(b []byte) { b[8] = 0 }, ErrSuperblock},
		{"version 6", func(b []byte) { b[8] = 6 }, ErrSuperblock},
		{"interleave 2", func(b []byte) { b[9] = 2 }, ErrSuperblock},
		{"interleave 32", func(b []byte) { b[9] = 32 }, ErrSuperblock},
		{"tag size 0", func(b []byte) { b[10], b[11] = 0, 0 }, ErrSuperblock},
		{"tag size 256", func(b []byte) { b[10], b[11] = 0, 1 }, ErrSuperblock},
		{"journal_sections 0", func(b []byte) { b[12] = 0 }, ErrSuperblock},
		{"8 KiB blocks", func(b []byte) { b[28] = 4 }, ErrSuperblock},
		{"2^64 sectors per block", func(b []byte) { b[28] = 64 }, ErrSuperblock},
		{"journal MAC", func(b []byte) { b[24] |= FlagHaveJournalMAC }, ErrUnsupported},
		{"recalculating", func(b []byte) { b[24] |= FlagRecalculating }, ErrUnsupported},
		{"dirty bitmap", func(b []byte) { b[24] |= FlagDirtyBitmap }, ErrUnsupported},
		{"inline (a later kernel's flag)", func(b []byte) { b[24] |= 0x20 }, ErrUnsupported},
		{"journal larger than the device", func(b []byte) { b[13] = 3 }, ErrTooSmall},
	} {
		b := g.Superblock().Bytes()
		c.edit(b)
		f := &memFile{}
		f.WriteAt(b, segStart*sectorBytes)
		if _, _, err := Read(f, segStart, 65536); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Accepted: fixed HMAC with a salt (it only matters with a journal MAC
	// or internal hash), nonzero bytes past the 64 defined ones.
	s := g.Superblock()
	s.Flags |= FlagFixedHMAC
	s.Version = 5
	s.Salt[3] = 7
	b := s.Bytes()
	b[4000] = 1
	f := &memFile{}
	f.WriteAt(b, segStart*sectorBytes)
	if rg, _, err := Read(f, segStart, 65536); err != nil || *rg != *g {
		t.Errorf("fixed HMAC superblock: %v", err)
	}
	// Nothing there to read.
	if _, _, err := Read(&memFile{}, segStart, 65536); err == nil {
		t.Error("reading an empty file succeeded")
	}
}

// TestLegacyPadding: without FIXED_PADDING the tag runs are padded to 128
// KiB (docs/INTEGRITY.md §8): T=28 with 4 KiB blocks takes 256 sectors instead
// of 224, and the format is version 1.
func TestLegacyPadding(t *testing.T) {
	g, err := New(65536, segStart, 28, 4096)
	if err != nil {
		t.Fatal(err)
	}
	s := g.Superblock()
	s.Flags, s.Version, s.ProvidedDataSectors = 0, 1, 32240
	f := &memFile{}
	f.WriteAt(s.Bytes(), segStart*sectorBytes)
	rg, _, err := Read(f, segStart, 65536)
	if err != nil {
		t.Fatal(err)
	}
	if rg.FixedPadding() || rg.MetadataRun() != 256 || rg.DataSectors() != 32240 || rg.DataOffset(0) != int64(segStart+272+256)*sectorBytes {
		t.Errorf("legacy: fixed %v, M %d, P %d", rg.FixedPadding(), rg.MetadataRun(), rg.DataSectors())
	}
	if b := rg.Superblock(); b.Version != 1 || b.Flags != 0 {
		t.Errorf("legacy superblock version %d flags %#x", b.Version, b.Flags)
	}
	checkAreas(t, rg)
}

// TestNewRefuses: parameters the kernel rejects, and devices too small
// for any data sector.
func TestNewRefuses(t *testing.T) {
	for _, c := range []struct {
		d, s   uint64
		tag, b int
		want   error
	}{
		{65536, segStart, 32, 8192, ErrUnsupported},
		{65536, segStart, 32, 520, ErrUnsupported},
		{65536, segStart, 0, 512, ErrUnsupported},
		{65536, segStart, 256, 512, ErrUnsupported},
		{8 + 88, 0, 32, 512, ErrTooSmall},
		{8 + 88 + 2048 + 7, 0, 32, 512, ErrTooSmall},
		{1000, segStart, 32, 512, ErrTooSmall},
		{1 << 60, segStart, 32, 512, ErrTooSmall},
	} {
		if _, err := New(c.d, c.s, c.tag, c.b); !errors.Is(err, c.want) {
			t.Errorf("New(%d, %d, %d, %d): %v, want %v", c.d, c.s, c.tag, c.b, err, c.want)
		}
	}
	// The smallest device with data (one journal section): 8 sectors after
	// the first tag run.
	g, err := New(8+88+2048+8, 0, 32, 512)
	if err != nil || g.DataSectors() != 8 || g.End() != int64(g.DeviceSectors())*sectorBytes {
		t.Errorf("smallest device: %v", err)
	}
}

// kernelProvided emulates linux get_provided_data_sectors on top of
// calculate_device_limits: build the value bit by bit from the top bit of
// D down to bit 3, keeping each bit while the last data sector still lies
// inside the device. Written apart from the package's closed form, from
// the kernel source.
func kernelProvided(d, start uint64, tag int, l2spb, l2il uint8, sections uint64, fixed bool) (p, initial, run uint64) {
	spb := 1 << l2spb
	entry := (8 + 8*spb + tag + 7) &^ 7
	secEntries := 504 / entry * 8
	secSectors := uint64(secEntries<<l2spb + 8)
	initial = 8 + secSectors*sections
	pad := uint64(512 << 8)
	if fixed {
		pad = 8 << 9
	}
	run = ((uint64(tag) << (l2il - l2spb)) + pad - 1) / pad * pad >> 9
	limitsOK := func(p uint64) bool {
		if initial+8 >= d || initial > 1<<32-1 {
			return false
		}
		n := p - 1
		area, off := n>>l2il, n&(1<<l2il-1)
		last := area<<l2il + (area+1)*run + initial + off + start
		return last >= start && last < d
	}
	for bit := bits.Len64(d) - 1; bit >= 3; bit-- {
		if limitsOK(p | 1<<bit) {
			p |= 1 << bit
		}
	}
	return p, initial, run
}

// TestProvidedMatchesKernelSearch: the closed form of docs/INTEGRITY.md §4.3
// against the kernel's bitwise search, for random devices, offsets, tag
// and block sizes, fresh formats and stored legacy layouts.
func TestProvidedMatchesKernelSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 4000 {
		d := uint64(1)<<(4+rng.IntN(40)) + rng.Uint64N(1<<20)
		start := []uint64{0, 8, 4096, segStart, rng.Uint64N(1 << 20)}[rng.IntN(5)]
		tag := 1 + rng.IntN(maxTagSize)
		l2spb := uint8(rng.IntN(4))
		if n%2 == 0 {
			// Fresh format through New.
			g, err := New(d, start, tag, 512<<l2spb)
			js := min(131072, d>>7)
			_, _, ss := journalSection(tag, l2spb)
			sections := max(1, js/uint64(ss))
			p, initial, run := kernelProvided(d, start, tag, l2spb, 15, sections, true)
			if p == 0 {
				if !errors.Is(err, ErrTooSmall) {
					t.Fatalf("D=%d S=%d T=%d spb=%d: kernel finds no data sectors, New says %v", d, start, tag, 1<<l2spb, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("D=%d S=%d T=%d spb=%d: %v, kernel finds %d", d, start, tag, 1<<l2spb, err, p)
			}
			if g.DataSectors() != p || g.InitialSectors() != initial || g.MetadataRun() != run || uint64(g.JournalSections()) != sections {
				t.Fatalf("D=%d S=%d T=%d spb=%d: P %d I %d M %d, kernel P %d I %d M %d", d, start, tag, 1<<l2spb,
					g.DataSectors(), g.InitialSectors(), g.MetadataRun(), p, initial, run)
			}
			continue
		}
		// Any stored interleave, journal size and padding.
		l2il := uint8(3 + rng.IntN(29))
		sections := 1 + rng.Uint64N(2000)
		fixed := rng.IntN(2) == 0
		_, initial, run := kernelProvided(d, start, tag, l2spb, l2il, sections, fixed)
		// Random sizes, and sizes around the edges: the end of a tag
		// run k areas in, and the kernel's initial+8 limit.
		sizes := []uint64{d}
		k := rng.Uint64N(4)
		for delta := uint64(0); delta < 20; delta++ {
			sizes = append(sizes, start+initial+k*(1<<l2il+run)+run+delta-10, initial+8+delta-10)
		}
		for _, d := range sizes {
			p, _, _ := kernelProvided(d, start, tag, l2spb, l2il, sections, fixed)
			g, err := layout(d, start, tag, l2spb, l2il, uint32(sections), fixed)
			if p == 0 {
				if err == nil {
					t.Fatalf("D=%d S=%d T=%d spb=%d L=%d J=%d fixed=%v: kernel finds no data sectors, layout %d",
						d, start, tag, 1<<l2spb, l2il, sections, fixed, g.DataSectors())
				}
				continue
			}
			if err != nil || g.DataSectors() != p {
				t.Fatalf("D=%d S=%d T=%d spb=%d L=%d J=%d fixed=%v: layout %v, kernel %d",
					d, start, tag, 1<<l2spb, l2il, sections, fixed, err, p)
			}
		}
	}
}

// TestBitmapBit: log2_blocks_per_bitmap_bit grows only when the journal's
// bits cannot cover the data at one bit per 2^15 sectors (docs/INTEGRITY.md §2).
func TestBitmapBit(t *testing.T) {
	// 88 journal sectors hold 360448 bits: 2^15 sectors per bit cover
	// 360448 * 2^15 sectors; one more needs 2^16.
	for _, c := range []struct {
		provided uint64
		l2spb    uint8
		want     uint8
	}{
		{30272, 0, 15}, {30272, 3, 12}, {360448 << 15, 0, 15}, {360448<<15 + 1, 0, 16}, {360448<<16 + 1, 3, 14},
	} {
		if got := bitmapBit(88, c.provided, c.l2spb); got != c.want {
			t.Errorf("bitmapBit(88, %d, %d) = %d, want %d", c.provided, c.l2spb, got, c.want)
		}
	}
}
