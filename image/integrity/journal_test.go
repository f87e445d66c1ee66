package integrity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// memFile is a growable in-memory file that stores only from its first
// written byte on: the bytes before base read as zeros. The tests' files
// start at the 16 MiB segment offset.
type memFile struct {
	base int64
	b    []byte // bytes base..base+len(b)
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.size() {
		return 0, io.EOF
	}
	n := 0
	if off < f.base {
		n = copy(p, make([]byte, min(int64(len(p)), f.base-off)))
	}
	if n < len(p) {
		n += copy(p[n:], f.b[off+int64(n)-f.base:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	if len(f.b) == 0 {
		f.base = off
	}
	if off < f.base {
		f.b = append(make([]byte, f.base-off), f.b...)
		f.base = off
	}
	if end := off + int64(len(p)); end > f.size() {
		f.b = append(f.b, make([]byte, end-f.size())...)
	}
	return copy(f.b[off-f.base:], p), nil
}

// size is the file's size.
func (f *memFile) size() int64 { return f.base + int64(len(f.b)) }

// at is the n stored bytes at off.
func (f *memFile) at(off int64, n int64) []byte { return f.b[off-f.base:][:n] }

func (f *memFile) clone() *memFile { return &memFile{f.base, bytes.Clone(f.b)} }

// countingWriter records the largest single write.
type countingWriter struct {
	memFile
	largest int
}

func (w *countingWriter) WriteAt(p []byte, off int64) (int, error) {
	w.largest = max(w.largest, len(p))
	return w.memFile.WriteAt(p, off)
}

func geometry(t *testing.T, d uint64, tag, b int) *Geometry {
	t.Helper()
	g, err := New(d, segStart, tag, b)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestFreshJournalBytes: the journal of docs/INTEGRITY.md §6 step 3, byte for
// byte, written one section at a time.
func TestFreshJournalBytes(t *testing.T) {
	for _, c := range []struct {
		d      uint64
		tag, b int
	}{{65536, 32, 512}, {153625, 32, 4096}, {143360, 28, 512}, {65536, 28, 4096}} {
		g := geometry(t, c.d, c.tag, c.b)
		w := &countingWriter{}
		if err := g.WriteJournal(w); err != nil {
			t.Fatal(err)
		}
		if w.largest != g.JournalSectionSectors()*512 {
			t.Errorf("largest write %d bytes, want one section (%d)", w.largest, g.JournalSectionSectors()*512)
		}
		j := w.at(g.JournalOffset(), g.JournalBytes())
		if int64(len(j)) != g.JournalBytes() || g.JournalOffset() != (segStart+8)*512 {
			t.Fatalf("journal of %d bytes at %d", len(j), g.JournalOffset())
		}
		entry, entries := g.JournalEntrySize(), g.JournalSectionEntries()
		want := make([]byte, 512)
		for i := 0; i < g.JournalSections(); i++ {
			for s := 0; s < g.JournalSectionSectors(); s++ {
				clear(want)
				binary.LittleEndian.PutUint64(want[504:], 0x1111111111111111^(uint64(i)<<32^uint64(s)))
				if s < 8 {
					for n := s; n < entries; n += 8 {
						copy(want[n/8*entry+4:], []byte{0xff, 0xff, 0xff, 0xff})
					}
				}
				got := j[(i*g.JournalSectionSectors()+s)*512:][:512]
				if !bytes.Equal(got, want) {
					t.Fatalf("D=%d B=%d T=%d: section %d sector %d\n got %x\nwant %x", c.d, c.b, c.tag, i, s, got, want)
				}
			}
		}
		st, err := g.CheckJournal(w)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Clean() || st.InUse != 0 || st.Pending != 0 || st.ReplayFrom != 0 || st.ReplaySections != g.JournalSections() ||
			slices.ContainsFunc(st.Seqs, func(s int) bool { return s != 0 }) {
			t.Errorf("fresh journal: %+v", st)
		}
	}
}

// TestWriteMetadata: the superblock and the journal, nothing before S nor
// past the journal.
func TestWriteMetadata(t *testing.T) {
	g := geometry(t, 65536, 32, 512)
	f := &memFile{}
	if err := g.WriteMetadata(f); err != nil {
		t.Fatal(err)
	}
	if f.base != segStart*512 || f.size() != g.JournalOffset()+g.JournalBytes() {
		t.Fatalf("metadata spans bytes %d..%d", f.base, f.size())
	}
	if !bytes.Equal(f.at(segStart*512, 4096), g.Superblock().Bytes()) {
		t.Error("superblock not at sector S")
	}
	rg, _, err := Read(f, segStart, 65536)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := rg.CheckJournal(f); err != nil || !st.Clean() {
		t.Errorf("CheckJournal: %+v, %v", st, err)
	}
}

// setCommit gives section i, sector j of the journal in f sequence seq.
func setCommit(f *memFile, g *Geometry, i, j, seq int) {
	off := g.JournalOffset() + int64(i*g.JournalSectionSectors()+j)*512 + 504
	binary.LittleEndian.PutUint64(f.at(off, 8), 0x1111111111111111*uint64(seq+1)^(uint64(i)<<32^uint64(j)))
}

// journalFile is a 32 MiB, 512-byte-block image whose five sections carry
// the sequences seqs, all entries unused.
func journalFile(t *testing.T, seqs ...int) (*Geometry, *memFile) {
	t.Helper()
	g := geometry(t, 65536, 32, 512)
	f := &memFile{}
	if err := g.WriteMetadata(f); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		for j := 0; j < g.JournalSectionSectors(); j++ {
			setCommit(f, g, i, j, s)
		}
	}
	return g, f
}

// TestJournalFatal: journals on which the kernel fails every I/O
// (docs/INTEGRITY.md §3.4).
func TestJournalFatal(t *testing.T) {
	g, f := journalFile(t)
	zero := f.clone()
	clear(zero.at(g.JournalOffset(), g.JournalBytes()))
	if _, err := g.CheckJournal(zero); !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "section 0, sector 0 ") {
		t.Errorf("zeroed journal: %v", err)
	}

	wrong := f.clone()
	wrong.at(g.JournalOffset()+int64(2*88+17)*512+504, 1)[0] ^= 1
	_, err := g.CheckJournal(wrong)
	if !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "section 2, sector 17 ") ||
		!strings.Contains(err.Error(), "file sector 32969") {
		t.Errorf("one wrong commit id: %v", err)
	}
	// A commit id valid for another place is wrong here too.
	moved := f.clone()
	copy(moved.at(g.JournalOffset()+3*512+504, 8), moved.at(g.JournalOffset()+4*512+504, 8))
	if _, err := g.CheckJournal(moved); !errors.Is(err, ErrJournal) {
		t.Errorf("commit id of the neighbouring sector: %v", err)
	}

	_, all := journalFile(t, 0, 1, 2, 3, 3)
	if _, err := g.CheckJournal(all); !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "all 4") {
		t.Errorf("all four sequences: %v", err)
	}
	if _, err := g.CheckJournal(&memFile{f.base, f.b[:g.JournalOffset()+1000-f.base]}); err == nil || errors.Is(err, ErrJournal) {
		t.Errorf("short file: %v", err)
	}
}

// TestJournalSeqs: clean journals the kernel accepts, and the run of
// sections it would replay (linux replay_journal; each row traced by hand
// through its rules).
func TestJournalSeqs(t *testing.T) {
	for _, c := range []struct {
		seqs        []int
		from, count int
	}{
		{[]int{0, 0, 0, 0, 0}, 0, 5}, // fresh: newest seq 0 ends at 4, so the run starts at 0
		{[]int{3, 3, 3, 3, 3}, 0, 5}, // uniform seq 3: accepted by the kernel
		{[]int{2, 2, 2, 2, 2}, 0, 5}, // seen after a clean close
		{[]int{2, 1, 1, 1, 1}, 1, 5}, // seen after a clean close: 1..4 (seq 1), then 0 (seq 2)
		{[]int{1, 0, 0, 0, 0}, 1, 5}, // a clean close after writing one section
		{[]int{1, 1, 1, 1, 0}, 4, 5}, // 4 (seq 0), then 0..3 (seq 1)
		{[]int{0, 0, 3, 3, 3}, 2, 5}, // 2..4 (seq 3), then 0..1 (seq 0)
		{[]int{1, 0, 0, 3, 3}, 1, 2}, // 1..2 (seq 0); section 3 is older
		{[]int{0, 1, 0, 1, 0}, 4, 1}, // 4 (seq 0); section 0 does not carry seq 1
		{[]int{2, 0, 0, 0, 0}, 1, 0}, // seqs 0 and 2 only: nothing is replayed
	} {
		g, f := journalFile(t, c.seqs...)
		st, err := g.CheckJournal(f)
		if err != nil {
			t.Errorf("seqs %v: %v", c.seqs, err)
			continue
		}
		if !slices.Equal(st.Seqs, c.seqs) || !st.Clean() || st.Pending != 0 {
			t.Errorf("seqs %v: state %+v", c.seqs, st)
		}
		if got := [2]int{st.ReplayFrom, st.ReplaySections}; got != [2]int{c.from, c.count} {
			t.Errorf("seqs %v: replays %d sections from %d, want %d from %d", c.seqs, got[1], got[0], c.count, c.from)
		}
	}
}

// block is a recognisable B-byte block and T-byte tag for a label.
func block(label byte, b, tag int) ([]byte, []byte) {
	d := make([]byte, b)
	for i := range d {
		d[i] = label ^ byte(i*7) ^ byte(i>>9)
	}
	tg := bytes.Repeat([]byte{label, 0xa5}, tag)[:tag]
	return d, tg
}

// setEntry stores a journal entry as the kernel's write path does (linux
// __journal_read_write): the block's 512-byte chunks in the entry's data
// sectors, whose last 8 bytes stay the commit id and go into the entry's
// last_bytes; the sector number; the tag.
func setEntry(f *memFile, g *Geometry, section, n int, sector uint64, data, tag []byte) {
	spb := g.SectorSize() / 512
	sec := f.at(g.JournalOffset()+int64(section*g.JournalSectionSectors())*512, int64(g.JournalSectionSectors())*512)
	e := sec[n%8*512+n/8*g.JournalEntrySize():][:g.JournalEntrySize()]
	binary.LittleEndian.PutUint64(e, sector)
	for s := 0; s < spb; s++ {
		copy(sec[(8+n*spb+s)*512:][:504], data[s*512:])
		copy(e[8+8*s:][:8], data[s*512+504:][:8])
	}
	copy(e[8+8*spb:], tag)
}

func replayAll(t *testing.T, g *Geometry, f *memFile) (*JournalState, []Override) {
	t.Helper()
	var got []Override
	st, err := g.Replay(f, func(o Override) error { got = append(got, o); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return st, got
}

// TestJournalReplay: used entries are found, the committed ones replayed
// in the kernel's order (sections 2, 3, 4, 0, 1 for sequences 2,2,1,1,1),
// entries past the device and in-progress ones skipped; a torn section
// ends the run; applying the replay leaves the blocks in place and an
// empty journal.
func TestJournalReplay(t *testing.T) {
	const b, tag = 512, 32
	a, ta := block('A', b, tag)
	bb, tb := block('B', b, tag)
	c, tc := block('C', b, tag)
	x, tx := block('X', b, tag)
	build := func(torn bool) (*Geometry, *memFile) {
		g, f := journalFile(t, 2, 2, 1, 1, 1)
		setEntry(f, g, 0, 3, 16, a, ta)              // older copy of sector 16
		setEntry(f, g, 1, 0, 16, bb, tb)             // newest copy
		setEntry(f, g, 3, 79, 100, c, tc)            // the last slot of a section
		setEntry(f, g, 2, 5, g.DataSectors(), x, tx) // past the device: skipped
		setEntry(f, g, 4, 6, 0xfffffffe<<32, x, tx)  // in progress: skipped
		if torn {
			setCommit(f, g, 1, 50, 1)
		}
		return g, f
	}

	g, f := build(false)
	st, got := replayAll(t, g, f)
	if st.InUse != 5 || st.Pending != 3 || st.Clean() || st.ReplayFrom != 2 || st.ReplaySections != 5 {
		t.Errorf("state %+v", st)
	}
	want := []Override{{100, c, tc}, {16, a, ta}, {16, bb, tb}}
	if len(got) != len(want) {
		t.Fatalf("%d overrides, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Sector != want[i].Sector || !bytes.Equal(got[i].Data, want[i].Data) || !bytes.Equal(got[i].Tag, want[i].Tag) {
			t.Errorf("override %d: sector %d data %x.. tag %x; want sector %d data %x.. tag %x", i,
				got[i].Sector, got[i].Data[:8], got[i].Tag, want[i].Sector, want[i].Data[:8], want[i].Tag)
		}
	}
	if _, err := g.ApplyJournal(f); err != nil {
		t.Fatal(err)
	}
	at := func(off int64, n int) []byte { return f.at(off, int64(n)) }
	if !bytes.Equal(at(g.DataOffset(16), b), bb) || !bytes.Equal(at(g.TagOffset(16), tag), tb) ||
		!bytes.Equal(at(g.DataOffset(100), b), c) || !bytes.Equal(at(g.TagOffset(100), tag), tc) {
		t.Error("applied blocks are not in place")
	}
	if !bytes.Equal(at(g.TagOffset(17), tag), make([]byte, tag)) {
		t.Error("the tag after sector 16's was written")
	}
	fresh := &memFile{}
	g.WriteJournal(fresh)
	if !bytes.Equal(f.at(g.JournalOffset(), g.JournalBytes()), fresh.at(g.JournalOffset(), g.JournalBytes())) {
		t.Error("journal not fresh after ApplyJournal")
	}
	if st, err := g.CheckJournal(f); err != nil || !st.Clean() {
		t.Errorf("after ApplyJournal: %+v %v", st, err)
	}

	// Section 1's sector 50 still carries the old sequence: its commit was
	// torn, so the kernel replays sections 2, 3, 4, 0 only.
	g, f = build(true)
	st, got = replayAll(t, g, f)
	if st.Seqs[1] != -1 || st.InUse != 5 || st.Pending != 2 || st.ReplayFrom != 2 || st.ReplaySections != 4 ||
		len(got) != 2 || !bytes.Equal(got[1].Data, a) {
		t.Errorf("torn: state %+v, %d overrides", st, len(got))
	}
	if _, err := g.ApplyJournal(f); err != nil || !bytes.Equal(f.at(g.DataOffset(16), b), a) {
		t.Errorf("torn: ApplyJournal %v", err)
	}
}

// TestJournalNothingToReplay: with sequences 2,0,0,0,0 the kernel treats
// the journal as empty even with entries in use; ApplyJournal still
// rewrites it, and writes no block.
func TestJournalNothingToReplay(t *testing.T) {
	g, f := journalFile(t, 2, 0, 0, 0, 0)
	d, tg := block('D', 512, 32)
	setEntry(f, g, 1, 0, 8, d, tg)
	st, got := replayAll(t, g, f)
	if st.InUse != 1 || st.Pending != 0 || len(got) != 0 {
		t.Errorf("state %+v, %d overrides", st, len(got))
	}
	size := f.size()
	st, err := g.ApplyJournal(f)
	if err != nil || st.Clean() || f.size() != size {
		t.Fatalf("ApplyJournal: %+v %v; file grew from %d to %d", st, err, size, f.size())
	}
	if st, err := g.CheckJournal(f); err != nil || !st.Clean() || st.Seqs[0] != 0 {
		t.Errorf("after ApplyJournal: %+v %v", st, err)
	}
}

// TestJournalReplay4K: a 4096-byte block comes back whole from its eight
// chunks and last_bytes; an unaligned sector in a committed entry fails
// the device.
func TestJournalReplay4K(t *testing.T) {
	g := geometry(t, 153625, 32, 4096)
	f := &memFile{}
	if err := g.WriteMetadata(f); err != nil {
		t.Fatal(err)
	}
	d, tg := block('K', 4096, 32)
	setEntry(f, g, 2, 31, 56, d, tg)
	st, got := replayAll(t, g, f)
	if st.InUse != 1 || st.Pending != 1 || len(got) != 1 || got[0].Sector != 56 || !bytes.Equal(got[0].Data, d) || !bytes.Equal(got[0].Tag, tg) {
		t.Fatalf("state %+v, overrides %d", st, len(got))
	}
	setEntry(f, g, 0, 0, 57, d, tg)
	if _, err := g.CheckJournal(f); !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), "sector 57") {
		t.Errorf("unaligned sector: %v", err)
	}
}
