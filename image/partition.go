package image

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/sectors"
)

// Partition-level encryption turns partition N of a GPT disk image into a
// LUKS container of its former contents, as "cryptsetup luksFormat" on
// the partition would after growing it: the header area at the partition
// start, the payload after it, IV sector 0 at the payload start. The
// partition grows by the payload offset; partitions that start after it
// move by the payload offset rounded up to 1 MiB, so their alignment
// holds; the disk grows by the same amount, and both GPT copies are
// rewritten with go-diskfs. Everything else is copied byte for byte, so
// DecryptPartition restores the original disk exactly.

// partAlign is the alignment that shifted partitions keep.
const partAlign = 1 << 20

var (
	// ErrNoGPT reports a disk image without a valid GPT.
	ErrNoGPT = errors.New("no valid GPT partition table")
	// ErrNoPartition reports a partition index that the table lacks.
	ErrNoPartition = errors.New("no such partition")
)

// PartitionOptions configure EncryptPartition and DecryptPartition.
type PartitionOptions struct {
	// Partition is the 1-based GPT index of the partition.
	Partition int
	// Type, when not empty, is the new GPT partition type GUID; empty keeps
	// the type.
	Type string
	// Name, when not nil, is the new GPT partition name; nil keeps it.
	Name *string
	// Header and Passphrase make the new LUKS header (EncryptPartition).
	Header     header.Params
	Passphrase []byte
	Pipeline   Pipeline
}

// gptDisk is a GPT disk image being rewritten.
type gptDisk struct {
	table *gpt.Table
	part  *gpt.Partition
	size  int64
}

func readGPT(f *os.File, index int) (*gptDisk, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t, err := gpt.Read(file.New(f, true), SectorSize, SectorSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoGPT, err)
	}
	if t.RecoveredFromBackup {
		return nil, fmt.Errorf("%w: the primary GPT is damaged (repair it first, e.g. sgdisk -e)", ErrNoGPT)
	}
	if st.Size()%SectorSize != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSize, st.Size())
	}
	d := &gptDisk{table: t, size: st.Size()}
	var have []string
	for _, p := range t.Partitions {
		have = append(have, fmt.Sprint(p.Index))
		if p.Index == index {
			d.part = p
		}
	}
	if d.part == nil {
		return nil, fmt.Errorf("partition %d: %w (the disk has %s)", index, ErrNoPartition, strings.Join(have, ", "))
	}
	return d, nil
}

// relayout moves the partition's end by grow bytes and every partition that
// starts after it by move bytes, applies the type and name overrides and
// checks the result fits the disk of newSize bytes.
func (d *gptDisk) relayout(grow, move, newSize int64, o PartitionOptions) error {
	p := d.part
	newEnd := int64(p.End) + grow/SectorSize
	for _, q := range d.table.Partitions {
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
	d.table.Resize(uint64(newSize))
	for _, q := range d.table.Partitions {
		if q.End > d.table.LastDataSector() {
			return fmt.Errorf("partition %d would end past the last usable sector", q.Index)
		}
	}
	return nil
}

// writeTable writes both GPT copies and updates the size field of a
// protective MBR, keeping the rest of sector 0 as it was.
func (d *gptDisk) writeTable(dst *os.File, newSize int64) error {
	pmbr := d.table.ProtectiveMBR
	d.table.ProtectiveMBR = false
	w, err := file.New(dst, false).Writable()
	if err != nil {
		return err
	}
	if err := d.table.Write(w, newSize); err != nil {
		return fmt.Errorf("failed to write the GPT: %w", err)
	}
	if !pmbr {
		return nil
	}
	var mbr [SectorSize]byte
	if _, err := dst.ReadAt(mbr[:], 0); err != nil {
		return err
	}
	for i := 0; i < 4; i++ {
		e := mbr[446+16*i : 446+16*(i+1)]
		if e[4] == 0xee {
			n := uint64(newSize/SectorSize) - 1
			if binary.LittleEndian.Uint32(e[8:12]) != 1 {
				n -= uint64(binary.LittleEndian.Uint32(e[8:12])) - 1
			}
			binary.LittleEndian.PutUint32(e[12:16], uint32(min(n, 0xffffffff)))
		}
	}
	_, err = dst.WriteAt(mbr[:], 0)
	return err
}

func roundUpAlign(n int64) int64 { return (n + partAlign - 1) / partAlign * partAlign }

// copyRanges copies extents of src to dst unchanged through the sectors
// pipeline; zero blocks stay holes in dst.
func copyRanges(ctx context.Context, dst, src *os.File, ext []sectors.Extent, o sectors.Options) error {
	o.Sparse = true
	var nonEmpty []sectors.Extent
	for _, e := range ext {
		if e.Length > 0 {
			nonEmpty = append(nonEmpty, e)
		}
	}
	return sectors.Run(ctx, dst, src, nonEmpty, func(d, s []byte, _ uint64) error { copy(d, s); return nil }, o)
}

// PartitionResult describes the partition written.
type PartitionResult struct {
	Header    header.Header // the LUKS header (EncryptPartition)
	Start     int64         // partition start in bytes
	Size      int64         // new partition size in bytes
	DiskSize  int64         // new disk size in bytes
	Partition int
}

// EncryptPartition writes to dst, an empty regular file, a copy of the GPT
// disk image src in which partition o.Partition holds a LUKS container of
// its former contents (see the layout note above).
func EncryptPartition(ctx context.Context, dst, src *os.File, o PartitionOptions) (*PartitionResult, error) {
	d, err := readGPT(src, o.Partition)
	if err != nil {
		return nil, err
	}
	luks2SectorSize(&o.Header, d.part.GetSize())
	if err := refuseAuthParams(o.Header, "partition encryption"); err != nil {
		return nil, err
	}
	h, vk, area, err := header.Format(o.Passphrase, o.Header)
	if err != nil {
		return nil, err
	}
	defer clear(vk)
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		return nil, err
	}
	defer c.Clear()

	start, size := d.part.GetStart(), d.part.GetSize()
	if ss := int64(c.Geometry().SectorSize); size%ss != 0 {
		return nil, fmt.Errorf("%w: partition %d is %d bytes, not whole %d-byte sectors", ErrUnaligned, o.Partition, size, ss)
	}
	payload := h.Info().PayloadOffset
	move := roundUpAlign(payload)
	newSize := d.size + move
	if err := d.relayout(payload, move, newSize, o); err != nil {
		return nil, err
	}
	if err := dst.Truncate(newSize); err != nil {
		return nil, fmt.Errorf("failed to size output: %w", err)
	}
	end := start + size
	copies := []sectors.Extent{
		{SrcOffset: 0, DstOffset: 0, Length: start},
		{SrcOffset: end, DstOffset: end + move, Length: d.size - end},
	}
	crypt := []sectors.Extent{{SrcOffset: start, DstOffset: start + payload, Length: size, Sector: rawIV(0)}}
	prog := newTwoStage(o.Pipeline, d.size)
	if err := copyRanges(ctx, dst, src, copies, prog.options(0, false)); err != nil {
		return nil, err
	}
	t := c.EncryptSectors
	co := prog.options(start+d.size-end, false)
	co.SectorSize = c.Geometry().SectorSize
	if err := sectors.Run(ctx, dst, src, crypt, t, co); err != nil {
		return nil, err
	}
	if _, err := dst.WriteAt(area, start); err != nil {
		return nil, fmt.Errorf("failed to write the LUKS header: %w", err)
	}
	if err := d.writeTable(dst, newSize); err != nil {
		return nil, err
	}
	return &PartitionResult{Header: h, Start: start, Size: size + payload, DiskSize: newSize, Partition: o.Partition}, nil
}

// OpenPartition reads the LUKS header at the start of GPT partition
// index of the disk image f. The result unlocks and decrypts like a raw
// LUKS image whose header and payload offsets are absolute file offsets.
func OpenPartition(f *os.File, index int) (*Encrypted, error) {
	d, err := readGPT(f, index)
	if err != nil {
		return nil, err
	}
	start, size := d.part.GetStart(), d.part.GetSize()
	h, err := header.Read(f, start, size)
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", index, err)
	}
	if err := refuseAuth(h, fmt.Sprintf("partition %d", index)); err != nil {
		return nil, err
	}
	payload, err := attachedPayload(h)
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", index, err)
	}
	if payload >= size || (size-payload)%SectorSize != 0 {
		return nil, fmt.Errorf("partition %d: %w: payload offset %d does not fit a %d-byte partition", index, ErrTruncated, payload, size)
	}
	return &Encrypted{
		Format: Raw, Header: h, HeaderOffset: start,
		PayloadOffset: start + payload, PayloadSize: size - payload,
		FileSize: d.size, f: f,
	}, nil
}

// DecryptPartition writes to dst, an empty regular file, the GPT disk
// image src with the LUKS container in partition o.Partition (opened as e
// by OpenPartition and unlocked as k) replaced by its plaintext: the
// inverse of EncryptPartition.
func DecryptPartition(ctx context.Context, dst, src *os.File, e *Encrypted, k *Key, o PartitionOptions) (*PartitionResult, error) {
	d, err := readGPT(src, o.Partition)
	if err != nil {
		return nil, err
	}
	start, size := d.part.GetStart(), d.part.GetSize()
	if e.HeaderOffset != start {
		return nil, fmt.Errorf("image: DecryptPartition: header at %d, partition %d starts at %d", e.HeaderOffset, o.Partition, start)
	}
	payload := e.PayloadOffset - start
	move := roundUpAlign(payload)
	end := start + size
	// Partitions after this one start at least move-payload bytes after
	// its end, or they could not move back.
	newSize := d.size - move
	if err := d.relayout(-payload, -move, newSize, o); err != nil {
		return nil, err
	}
	if err := dst.Truncate(newSize); err != nil {
		return nil, fmt.Errorf("failed to size output: %w", err)
	}
	plainEnd := start + e.PayloadSize
	copies := []sectors.Extent{
		{SrcOffset: 0, DstOffset: 0, Length: start},
		{SrcOffset: plainEnd + move, DstOffset: plainEnd, Length: d.size - end - (move - payload)},
	}
	crypt := []sectors.Extent{{SrcOffset: e.PayloadOffset, DstOffset: start, Length: e.PayloadSize, Sector: rawIV(0)}}
	prog := newTwoStage(o.Pipeline, newSize)
	copied := start + copies[1].Length
	if err := copyRanges(ctx, dst, src, copies, prog.options(0, false)); err != nil {
		return nil, err
	}
	t := k.Cipher.DecryptSectors
	co := prog.options(copied, true)
	co.SectorSize = k.Cipher.Geometry().SectorSize
	if err := sectors.Run(ctx, dst, src, crypt, t, co); err != nil {
		return nil, err
	}
	if err := d.writeTable(dst, newSize); err != nil {
		return nil, err
	}
	return &PartitionResult{Start: start, Size: e.PayloadSize, DiskSize: newSize, Partition: o.Partition}, nil
}

// twoStage reports the progress of several pipeline runs as one.
type twoStage struct {
	p     Pipeline
	total int64
}

func newTwoStage(p Pipeline, total int64) *twoStage {
	if p.Progress != nil {
		p.Progress(0, total)
	}
	return &twoStage{p: p, total: total}
}

func (s *twoStage) options(before int64, sparse bool) sectors.Options {
	o := sectors.Options{Jobs: s.p.Jobs, ChunkSize: s.p.ChunkSize, SectorSize: SectorSize, Sparse: sparse}
	if s.p.Progress != nil {
		o.Progress = func(done int64) { s.p.Progress(before+done, s.total) }
	}
	return o
}
