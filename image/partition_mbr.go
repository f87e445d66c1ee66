package image

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The MBR (DOS) format of partition encryption. cryptimg edits the 16-byte
// entries of sector 0 itself instead of through go-diskfs's partition/mbr:
// that package reads only the four primary entries (no logical
// partitions), writes back the CHS fields it read even for an entry whose
// LBA changed, and would rewrite the whole entry area; here only the
// entries that change are re-encoded, and the boot code, the disk
// signature and the other entries stay byte for byte as they were.
//
// Layout (EFI Specification 1.10, §11.2.2.3, tables 11-5 "Legacy Master
// Boot Record" and 11-6 "Legacy Master Boot Record Partition Record"):
// bytes 0-439 boot code, 440-443 the disk signature, 446-509 four 16-byte
// partition records, 510-511 the signature 0x55 0xAA. A record is the boot
// indicator (0x80 or 0x00), the CHS address of the first sector (3 bytes),
// the OS type, the CHS address of the last sector, the starting LBA and the
// size in sectors (little-endian 32-bit each). A record with type 0 or
// size 0 is unused. An extended partition (type 0x05, 0x0F or 0x85) holds a
// chain of extended boot records: in each, the first record is a logical
// partition, its start relative to that EBR, and the second links the next
// EBR, its start relative to the extended partition; Linux and sfdisk
// number the logical partitions 5 on, in chain order.
//
// Only primary partitions can be encrypted. Every address inside an
// extended partition is relative to it, so moving an extended partition
// is rewriting its start in sector 0: its EBRs and logical partitions move
// with its bytes, unchanged.

const (
	mbrEntries   = 446 // offset of the first partition record
	mbrEntrySize = 16
	// mbrMaxSectors is how far an MBR reaches: 32-bit LBAs address sectors
	// 0 to 2^32-1.
	mbrMaxSectors = 1 << 32
	// mbrMaxLogical bounds the walk of an EBR chain (a loop or garbage
	// cannot make it run for ever).
	mbrMaxLogical = 256
)

// ErrMBRLimit refuses a layout that an MBR cannot address.
var ErrMBRLimit = errors.New("beyond the 2^32 sectors an MBR addresses")

func init() {
	registerTable(tableFormat{name: "mbr", claims: claimsMBR, open: openMBR})
}

func hasMBRSignature(head []byte) bool { return head[510] == 0x55 && head[511] == 0xaa }

// claimsMBR: the MBR signature and no protective (0xEE) entry, which
// would make it a GPT disk.
func claimsMBR(head []byte) bool { return hasMBRSignature(head) && !hasProtectiveEntry(head) }

func isExtended(typ byte) bool { return typ == 0x05 || typ == 0x0f || typ == 0x85 }

// mbrEntry is one partition record: its number and where it lies, in
// sectors.
type mbrEntry struct {
	num         int
	typ         byte
	start, size int64
}

// mbrTable is an MBR disk image being rewritten.
type mbrTable struct {
	sector  []byte      // sector 0 as read
	old     [4]mbrEntry // the primary records as read
	entries [4]mbrEntry // the primary records, relaid out
	used    [4]bool
	logical []mbrEntry // absolute positions, for numbering and messages
	sel     int        // the selected record, 0-3
}

func readMBREntry(b []byte, num int) mbrEntry {
	return mbrEntry{num: num, typ: b[4],
		start: int64(binary.LittleEndian.Uint32(b[8:12])), size: int64(binary.LittleEndian.Uint32(b[12:16]))}
}

func openMBR(d *partDisk, head []byte, index int) (partTable, error) {
	m := &mbrTable{sector: append([]byte(nil), head[:SectorSize]...)}
	nsec := d.size / SectorSize
	for i := range 4 {
		b := m.sector[mbrEntries+mbrEntrySize*i:]
		if b[0] != 0x00 && b[0] != 0x80 {
			return nil, fmt.Errorf("%w: sector 0 ends in the MBR signature, but record %d has the boot indicator %#02x (a file system's boot sector?)", ErrNoTable, i+1, b[0])
		}
		e := readMBREntry(b, i+1)
		m.old[i], m.entries[i] = e, e
		m.used[i] = e.typ != 0 && e.size != 0
		if m.used[i] && e.start == 0 {
			return nil, fmt.Errorf("%w: MBR partition %d starts at sector 0", ErrNoTable, i+1)
		}
	}
	for i := range 4 {
		if m.used[i] && isExtended(m.entries[i].typ) {
			m.logical = m.walkEBRs(d, m.entries[i], m.logical, nsec)
		}
	}
	switch {
	case index >= 1 && index <= 4 && m.used[index-1]:
		if isExtended(m.entries[index-1].typ) {
			return nil, fmt.Errorf("partition %d: %w: it is the extended partition that holds the logical partitions; only the primary partitions (1-4) of an MBR disk can hold the LUKS container", index, ErrUnsupportedPartition)
		}
		m.sel = index - 1
		return m, nil
	case index > 4:
		for _, l := range m.logical {
			if l.num == index {
				return nil, fmt.Errorf("partition %d: %w: it is a logical partition; only the primary partitions (1-4) of an MBR disk can hold the LUKS container", index, ErrUnsupportedPartition)
			}
		}
	}
	var have []int
	for i := range 4 {
		if m.used[i] {
			have = append(have, i+1)
		}
	}
	for _, l := range m.logical {
		have = append(have, l.num)
	}
	return nil, noPartition(index, have)
}

// walkEBRs appends the logical partitions of the extended partition ext to
// ls. A broken chain ends the list: the logical partitions only name the
// partitions that exist, nothing inside an extended partition is changed.
func (m *mbrTable) walkEBRs(d *partDisk, ext mbrEntry, ls []mbrEntry, nsec int64) []mbrEntry {
	seen := map[int64]bool{}
	for at := ext.start; len(ls) < mbrMaxLogical && !seen[at] && at < nsec; {
		seen[at] = true
		b, err := d.sector(at)
		if err != nil || !hasMBRSignature(b) {
			break
		}
		if e := readMBREntry(b[mbrEntries:], 5+len(ls)); e.typ != 0 && e.size != 0 {
			e.start += at
			ls = append(ls, e)
		}
		next := readMBREntry(b[mbrEntries+mbrEntrySize:], 0)
		if !isExtended(next.typ) || next.size == 0 || next.start == 0 {
			break
		}
		at = ext.start + next.start
	}
	return ls
}

func (m *mbrTable) kind() string { return "mbr" }

func (m *mbrTable) target() (int64, int64) {
	p := m.entries[m.sel]
	return p.start * SectorSize, p.size * SectorSize
}

func (m *mbrTable) relayout(grow, move, newSize int64, o PartitionOptions) error {
	p := &m.entries[m.sel]
	oldStart := p.start
	p.size += grow / SectorSize
	if p.size <= 0 {
		return fmt.Errorf("partition %d is too small", p.num)
	}
	newEnd := p.start + p.size
	for i := range m.entries {
		q := &m.entries[i]
		if !m.used[i] || i == m.sel {
			continue
		}
		if q.start > oldStart {
			q.start += move / SectorSize
			if q.start < newEnd {
				return fmt.Errorf("partition %d cannot move by %d bytes: it would overlap partition %d", q.num, move, p.num)
			}
		} else if q.start+q.size > oldStart {
			return fmt.Errorf("partition %d overlaps partition %d", q.num, p.num)
		}
	}
	if o.Type != "" {
		t, err := parseMBRType(o.Type)
		if err != nil {
			return err
		}
		p.typ = t
	}
	if o.Name != nil {
		return errors.New("MBR partitions have no names")
	}
	for i, q := range m.entries {
		if !m.used[i] {
			continue
		}
		end := q.start + q.size
		if q != m.old[i] && end > mbrMaxSectors {
			return fmt.Errorf("partition %d would end at sector %d: %w (a GPT reaches further)", q.num, end-1, ErrMBRLimit)
		}
		if end > newSize/SectorSize {
			return fmt.Errorf("partition %d would end past the end of the disk", q.num)
		}
	}
	return nil
}

// parseMBRType reads a type byte in hex, with or without 0x.
func parseMBRType(s string) (byte, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 8)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("invalid MBR partition type %q: want a non-zero type byte in hex, such as 83 (Linux) or e8 (LUKS)", s)
	}
	if t := byte(v); isExtended(t) || t == 0xee {
		return 0, fmt.Errorf("invalid MBR partition type %q: %#02x would make the partition an extended partition or a GPT", s, t)
	}
	return byte(v), nil
}

// write re-encodes the records that changed and writes the record area
// (the boot code and disk signature before it are the input's, copied
// with the rest of the disk).
func (m *mbrTable) write(dst io.WriterAt, newSize int64) error {
	area := append([]byte(nil), m.sector[mbrEntries:510]...)
	for i, q := range m.entries {
		if !m.used[i] || q == m.old[i] {
			continue
		}
		b := area[mbrEntrySize*i : mbrEntrySize*(i+1)]
		b[4] = q.typ
		binary.LittleEndian.PutUint32(b[8:12], uint32(q.start))
		binary.LittleEndian.PutUint32(b[12:16], uint32(q.size))
		// Zero CHS fields (left so by tools that write LBA only) stay
		// zero; any others are recomputed as sfdisk writes them.
		if !isZeroBytes(b[1:4]) || !isZeroBytes(b[5:8]) {
			copy(b[1:4], chsOf(q.start))
			copy(b[5:8], chsOf(q.start+q.size-1))
		}
	}
	if _, err := dst.WriteAt(area, mbrEntries); err != nil {
		return fmt.Errorf("failed to write the MBR: %w", err)
	}
	return nil
}

func isZeroBytes(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// chsOf encodes sector lba as a CHS address the way util-linux's libfdisk
// (sfdisk, fdisk) does for a disk without a geometry of its own: 255 heads
// of 63 sectors, and 1023/254/63 for every sector past cylinder 1023.
// Bytes: head; sector (bits 0-5) with cylinder bits 8-9 (bits 6-7);
// cylinder bits 0-7.
func chsOf(lba int64) []byte {
	const heads, perTrack = 255, 63
	c, h, s := lba/(heads*perTrack), lba/perTrack%heads, lba%perTrack+1
	if c > 1023 {
		c, h, s = 1023, 254, 63
	}
	return []byte{byte(h), byte(s) | byte(c>>8&3)<<6, byte(c)}
}
