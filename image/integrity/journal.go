package integrity

import (
	"encoding/binary"
	"fmt"
	"io"
)

// The journal (docs/INTEGRITY.md §3; linux drivers/md/dm-integrity.c): sections
// of 8 metadata sectors holding the entries and then one data chunk of
// B bytes per entry. Every 512-byte journal sector ends with a commit id,
// and the kernel refuses the whole device when one decodes to none of the
// four commit sequences.

const (
	commitSeqs  = 4                  // N_COMMIT_IDS
	commitBase  = 0x1111111111111111 // commit_ids[k] = commitBase * (k+1) (create_journal)
	unusedHi    = 0xffffffff         // sector_hi of an unused entry
	commitIDOff = journalSectorData  // commit id at bytes 504..511 of each sector
)

// commitID is the commit id of section i, sector j for sequence seq
// (linux dm_integrity_commit_id, without journal encryption).
func commitID(i uint32, j int, seq int) uint64 {
	return commitBase*uint64(seq+1) ^ (uint64(i)<<32 ^ uint64(j))
}

// commitSeq decodes a stored commit id; -1 if it is none of the four
// (linux find_commit_seq).
func commitSeq(i uint32, j int, id uint64) int {
	for k := range commitSeqs {
		if commitID(i, j, k) == id {
			return k
		}
	}
	return -1
}

func nextSeq(s int) int { return (s + 1) % commitSeqs }
func prevSeq(s int) int { return (s + commitSeqs - 1) % commitSeqs }

// sectionBytes is the size of one journal section.
func (g *Geometry) sectionBytes() int { return g.sectionSectors * sectorBytes }

// sectionOffset is the byte offset of journal section i in the file.
func (g *Geometry) sectionOffset(i uint32) int64 {
	return g.JournalOffset() + int64(i)*int64(g.sectionBytes())
}

// entry returns the bytes of entry n of a section buffer: metadata sector
// n%8, at (n/8)*entry size (linux access_journal_entry).
func (g *Geometry) entry(section []byte, n int) []byte {
	off := n%journalBlockSectors*sectorBytes + n/journalBlockSectors*g.entrySize
	return section[off : off+g.entrySize]
}

// emptySection fills buf with section i of an empty journal whose sectors
// carry sequence seq (linux init_journal).
func (g *Geometry) emptySection(buf []byte, i uint32, seq int) {
	clear(buf)
	for j := range g.sectionSectors {
		binary.LittleEndian.PutUint64(buf[j*sectorBytes+commitIDOff:], commitID(i, j, seq))
	}
	for n := range g.sectionEntries {
		binary.LittleEndian.PutUint32(g.entry(buf, n)[4:], unusedHi)
	}
}

// WriteJournal writes the journal of a fresh format at sector S+8: every
// sector with the commit id of sequence 0, every entry unused, all else
// zero (docs/INTEGRITY.md §6 step 3). It writes one section at a time.
func (g *Geometry) WriteJournal(w io.WriterAt) error {
	return g.writeJournal(w, func(uint32) int { return 0 })
}

// writeJournal writes an empty journal whose section i carries sequence
// seq(i).
func (g *Geometry) writeJournal(w io.WriterAt, seq func(i uint32) int) error {
	buf := make([]byte, g.sectionBytes())
	for i := range g.journalSections {
		g.emptySection(buf, i, seq(i))
		if _, err := w.WriteAt(buf, g.sectionOffset(i)); err != nil {
			return fmt.Errorf("writing dm-integrity journal section %d: %w", i, err)
		}
	}
	return nil
}

// WriteMetadata writes what a fresh format writes: the journal, then the
// superblock at sector S. It touches nothing else; the tags stay as they
// are, so every block must be sealed before the kernel reads it.
func (g *Geometry) WriteMetadata(w io.WriterAt) error {
	if err := g.WriteJournal(w); err != nil {
		return err
	}
	if _, err := w.WriteAt(g.Superblock().Bytes(), int64(g.start)*sectorBytes); err != nil {
		return fmt.Errorf("writing the dm-integrity superblock: %w", err)
	}
	return nil
}

// JournalState is what a valid journal holds.
type JournalState struct {
	// Seqs holds the commit sequence, 0..3, of each section's sectors, or
	// -1 for a section whose sectors disagree (a commit torn by a crash).
	Seqs []int
	// InUse counts the entries not marked unused, in all sections. A
	// journal left by a clean close has none.
	InUse int
	// ReplayFrom and ReplaySections are the run of committed sections the
	// kernel replays at activation, in order from section ReplayFrom,
	// wrapping after the last (linux replay_journal).
	ReplayFrom, ReplaySections int
	// Pending counts the entries that replay copies to their final places:
	// zero when the kernel replays nothing.
	Pending int

	replay  bool       // the kernel replays (the journal is not empty)
	entries [][]uint64 // per section, the sector field of every used entry; unusedHi<<32 marks unused
}

// Clean reports whether no journal entry is in use: the device was closed
// cleanly, or never written in journal mode.
func (s *JournalState) Clean() bool { return s.InUse == 0 }

// CheckJournal reads the journal and decides, as the kernel does at every
// activation in journal or direct mode (linux replay_journal,
// find_commit_seq), whether it is usable and what it would replay. An
// error wrapping ErrJournal means the kernel would fail every I/O: a
// commit id that decodes to no sequence, all four sequences in use, or an
// entry to replay whose sector is not block-aligned.
func (g *Geometry) CheckJournal(r io.ReaderAt) (*JournalState, error) {
	st := &JournalState{Seqs: make([]int, g.journalSections), entries: make([][]uint64, g.journalSections)}
	var used [commitSeqs]bool
	var lastSection [commitSeqs]uint32
	buf := make([]byte, g.sectionBytes())
	for i := range g.journalSections {
		if _, err := r.ReadAt(buf, g.sectionOffset(i)); err != nil {
			return nil, fmt.Errorf("reading dm-integrity journal section %d: %w", i, err)
		}
		st.Seqs[i] = -2
		for j := range g.sectionSectors {
			id := binary.LittleEndian.Uint64(buf[j*sectorBytes+commitIDOff:])
			k := commitSeq(i, j, id)
			if k < 0 {
				return nil, fmt.Errorf("%w: section %d, sector %d (file sector %d): commit id %#016x is none of the 4 sequences",
					ErrJournal, i, j, g.sectionOffset(i)/sectorBytes+int64(j), id)
			}
			used[k] = true
			lastSection[k] = i
			switch st.Seqs[i] {
			case -2:
				st.Seqs[i] = k
			case k:
			default:
				st.Seqs[i] = -1
			}
		}
		sectors := make([]uint64, g.sectionEntries)
		for n := range g.sectionEntries {
			sectors[n] = binary.LittleEndian.Uint64(g.entry(buf, n))
			if sectors[n]>>32 != unusedHi {
				st.InUse++
			}
		}
		st.entries[i] = sectors
	}

	// The first unused sequence after the run of used ones; the newest
	// sections carry the one before it (linux replay_journal).
	var unused int
	if !used[commitSeqs-1] {
		unused = commitSeqs - 1
		for unused > 0 && !used[unused-1] {
			unused--
		}
	} else {
		for unused < commitSeqs && used[unused] {
			unused++
		}
		if unused == commitSeqs {
			return nil, fmt.Errorf("%w: all 4 commit sequences are in use", ErrJournal)
		}
	}
	lastUsed := prevSeq(unused)
	want := prevSeq(lastUsed)
	empty := st.InUse == 0
	if !used[want] && used[prevSeq(want)] {
		empty = true
	}
	start := lastSection[lastUsed] + 1
	if start >= g.journalSections {
		want = nextSeq(want)
		start = 0
	}
	st.ReplayFrom = int(start)
	i := start
	for st.ReplaySections < int(g.journalSections) && st.Seqs[i] == want {
		st.ReplaySections++
		if i++; i >= g.journalSections {
			want = nextSeq(want)
			i = 0
		}
	}
	if empty {
		return st, nil
	}
	st.replay = true
	err := g.eachReplayed(st, func(i uint32, n int, sector uint64) error {
		st.Pending++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// eachReplayed calls fn, in the kernel's order, for every entry replay
// copies: used entries of the committed sections whose sector lies inside
// the device (linux do_journal_write, from_replay). An unaligned sector
// fails the device.
func (g *Geometry) eachReplayed(st *JournalState, fn func(section uint32, n int, sector uint64) error) error {
	if !st.replay {
		return nil
	}
	mask := uint64(1)<<g.log2SPB - 1
	i := uint32(st.ReplayFrom)
	for range st.ReplaySections {
		for n, sector := range st.entries[i] {
			if sector>>32 == unusedHi {
				continue
			}
			if sector&mask != 0 {
				return fmt.Errorf("%w: section %d, entry %d: sector %d is not a multiple of the %d-byte block",
					ErrJournal, i, n, sector, g.SectorSize())
			}
			if sector >= g.provided {
				continue // in-progress entries (sector_hi 0xfffffffe) end here too
			}
			if err := fn(i, n, sector); err != nil {
				return err
			}
		}
		if i++; i >= g.journalSections {
			i = 0
		}
	}
	return nil
}

// Override is one block the journal holds for its final place: the data
// of logical sector Sector (a multiple of B/512) and its tag.
type Override struct {
	Sector uint64
	Data   []byte // B bytes
	Tag    []byte // T bytes
}

// Replay checks the journal as CheckJournal does and calls fn for every
// block the kernel would copy from it to its final place at the next
// activation, in the kernel's order: where two overrides name the same
// sector, the later one wins. The slices passed to fn are its own.
func (g *Geometry) Replay(r io.ReaderAt, fn func(Override) error) (*JournalState, error) {
	st, err := g.CheckJournal(r)
	if err != nil {
		return nil, err
	}
	spb := 1 << g.log2SPB
	buf := make([]byte, g.sectionBytes())
	have := int64(-1)
	err = g.eachReplayed(st, func(i uint32, n int, sector uint64) error {
		if have != int64(i) {
			if _, err := r.ReadAt(buf, g.sectionOffset(i)); err != nil {
				return fmt.Errorf("reading dm-integrity journal section %d: %w", i, err)
			}
			have = int64(i)
		}
		e := g.entry(buf, n)
		o := Override{Sector: sector, Data: make([]byte, spb*sectorBytes), Tag: make([]byte, g.tagSize)}
		copy(o.Tag, e[8+8*spb:])
		// Entry n's block is in data sectors 8+n*spb..; each holds 504
		// bytes, the last 8 of every 512 are in the entry (linux
		// restore_last_bytes).
		for s := range spb {
			chunk := buf[(journalBlockSectors+n*spb+s)*sectorBytes:][:sectorBytes]
			d := o.Data[s*sectorBytes:][:sectorBytes]
			copy(d, chunk[:journalSectorData])
			copy(d[journalSectorData:], e[8+8*s:8+8*s+8])
		}
		return fn(o)
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// ReadWriterAt is a file the journal can be replayed into.
type ReadWriterAt interface {
	io.ReaderAt
	io.WriterAt
}

// ApplyJournal replays the journal into f, writing each override's data
// and tag at their final places, and then, if any entry was in use,
// writes a fresh empty journal, so that the image needs no replay and a
// later activation cannot replay stale blocks over newer writes. A clean
// journal is left as it is.
func (g *Geometry) ApplyJournal(f ReadWriterAt) (*JournalState, error) {
	st, err := g.Replay(f, func(o Override) error {
		if _, err := f.WriteAt(o.Data, g.DataOffset(o.Sector)); err != nil {
			return fmt.Errorf("replaying sector %d: %w", o.Sector, err)
		}
		if _, err := f.WriteAt(o.Tag, g.TagOffset(o.Sector)); err != nil {
			return fmt.Errorf("replaying the tag of sector %d: %w", o.Sector, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !st.Clean() {
		if err := g.WriteJournal(f); err != nil {
			return nil, err
		}
	}
	return st, nil
}
