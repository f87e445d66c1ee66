package image

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"
)

// The GPT format of partition encryption: go-diskfs reads the table and
// writes both copies (UEFI 2.10 §5.3); the protective MBR in sector 0 is
// kept as the input has it except for the size of its 0xEE entry.

func init() {
	registerTable(tableFormat{name: "gpt", claims: claimsGPT, open: openGPT})
}

// claimsGPT: a GPT disk has a protective MBR (an entry of type 0xEE in a
// sector 0 with the MBR signature, UEFI 2.10 §5.2.3, hybrid MBRs
// included), or, without any MBR signature, a GPT header at LBA 1. A disk
// whose valid MBR has no 0xEE entry is an MBR disk whatever follows it, as
// Linux reads it.
func claimsGPT(head []byte) bool {
	if hasMBRSignature(head) {
		return hasProtectiveEntry(head)
	}
	return string(head[SectorSize:SectorSize+8]) == "EFI PART"
}

func hasProtectiveEntry(head []byte) bool {
	for i := range 4 {
		if head[mbrEntries+mbrEntrySize*i+4] == 0xee {
			return true
		}
	}
	return false
}

// gptTable is a GPT disk image being rewritten.
type gptTable struct {
	table *gpt.Table
	part  *gpt.Partition
	mbr   []byte // sector 0 as read
	d     *partDisk
}

func openGPT(d *partDisk, head []byte, index int) (partTable, error) {
	t, err := gpt.Read(&diskFile{r: d.r, size: d.size}, SectorSize, SectorSize)
	if err != nil {
		return nil, fmt.Errorf("%w: a protective MBR but no valid GPT: %w", ErrNoTable, err)
	}
	if t.RecoveredFromBackup {
		return nil, fmt.Errorf("%w: the primary GPT is damaged (repair it first, e.g. sgdisk -e)", ErrNoTable)
	}
	g := &gptTable{table: t, mbr: append([]byte(nil), head[:SectorSize]...), d: d}
	var have []int
	for _, p := range t.Partitions {
		have = append(have, p.Index)
		if p.Index == index {
			g.part = p
		}
	}
	if g.part == nil {
		return nil, noPartition(index, have)
	}
	return g, nil
}

func (g *gptTable) kind() string { return "gpt" }

func (g *gptTable) target() (int64, int64) { return g.part.GetStart(), g.part.GetSize() }

func (g *gptTable) relayout(grow, move, newSize int64, o PartitionOptions) error {
	p := g.part
	newEnd := int64(p.End) + grow/SectorSize
	for _, q := range g.table.Partitions {
		if q != p && q.Start > p.Start {
			s := int64(q.Start) + move/SectorSize
			if s <= newEnd {
				return fmt.Errorf("partition %d cannot move by %d bytes: it would overlap partition %d", q.Index, move, p.Index)
			}
			q.Start = uint64(s)
			q.End = uint64(int64(q.End) + move/SectorSize)
		}
	}
	size := int64(p.Size) + grow
	if size <= 0 {
		return fmt.Errorf("partition %d is too small", p.Index)
	}
	p.Size = uint64(size)
	p.End = p.Start + uint64(size/SectorSize) - 1
	if o.Type != "" {
		u, err := uuid.Parse(o.Type)
		if err != nil {
			return fmt.Errorf("invalid partition type %q: %w", o.Type, err)
		}
		p.Type = gpt.Type(strings.ToUpper(u.String()))
	}
	if o.Name != nil {
		if len([]rune(*o.Name)) > 36 {
			return fmt.Errorf("partition name %q is longer than 36 characters", *o.Name)
		}
		p.Name = *o.Name
	}
	g.table.Resize(uint64(newSize))
	for _, q := range g.table.Partitions {
		if q.End > g.table.LastDataSector() {
			return fmt.Errorf("partition %d would end past the last usable sector", q.Index)
		}
	}
	return nil
}

// write writes both GPT copies and updates the size field of a protective
// MBR, keeping the rest of sector 0 as the input had it.
func (g *gptTable) write(dst io.WriterAt, newSize int64) error {
	pmbr := g.table.ProtectiveMBR
	g.table.ProtectiveMBR = false
	if err := g.table.Write(&diskFile{r: g.d.r, w: dst, size: newSize}, newSize); err != nil {
		return fmt.Errorf("failed to write the GPT: %w", err)
	}
	if !pmbr {
		return nil
	}
	mbr := append([]byte(nil), g.mbr...)
	for i := range 4 {
		e := mbr[mbrEntries+mbrEntrySize*i : mbrEntries+mbrEntrySize*(i+1)]
		if e[4] == 0xee {
			n := uint64(newSize/SectorSize) - 1
			if binary.LittleEndian.Uint32(e[8:12]) != 1 {
				n -= uint64(binary.LittleEndian.Uint32(e[8:12])) - 1
			}
			binary.LittleEndian.PutUint32(e[12:16], uint32(min(n, 0xffffffff)))
		}
	}
	_, err := dst.WriteAt(mbr, 0)
	return err
}
