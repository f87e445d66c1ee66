package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// Partition-level encryption turns partition N of a partitioned disk image
// into a LUKS container of its former contents, as "cryptsetup luksFormat"
// on the partition would after growing it: the header area at the
// partition start, the payload after it, IV sector 0 at the payload start.
// The partition grows by the payload offset; partitions that start after
// it move by the payload offset rounded up to 1 MiB, so their alignment
// holds; the disk grows by the same amount, and the partition table is
// rewritten. Everything else is copied byte for byte, so DecryptPartition
// restores the original disk exactly.
//
// The disk is the guest view of a raw image or of a plain qcow2 image, and
// the output is a raw image or a plain qcow2 image (the input's format
// unless PartitionOptions.Format says otherwise). A qcow2 here is only the
// container of the disk: the LUKS container is in the partition, qcow2's
// own encryption is not used, and only clusters holding non-zero data are
// stored, so a sparse input stays sparse except for the encrypted
// partition, every sector of which is ciphertext.
//
// Each partition table format is a partTable implementation in a file of
// its own (partition_gpt.go, partition_mbr.go) that registers itself in
// tableFormats; the flow below knows none of them.

// partAlign is the alignment that shifted partitions keep.
const partAlign = 1 << 20

var (
	// ErrNoTable reports a disk image without a partition table that
	// partition encryption knows (GPT or MBR).
	ErrNoTable = errors.New("no GPT or MBR partition table")
	// ErrNoPartition reports a partition index that the table lacks.
	ErrNoPartition = errors.New("no such partition")
	// ErrUnsupportedPartition reports a partition that exists but cannot
	// hold the container, such as an MBR extended or logical partition.
	ErrUnsupportedPartition = errors.New("unsupported partition")
)

// PartitionOptions configure EncryptPartition and DecryptPartition.
type PartitionOptions struct {
	// Partition is the 1-based number of the partition: the GPT entry
	// index, or for an MBR the number Linux and sfdisk give it (1-4 the
	// primary entries, 5 on the logical partitions).
	Partition int
	// Type, when not empty, is the new partition type: a GPT type GUID, or
	// an MBR type byte in hex ("83", "0xe8"). Empty keeps the type.
	Type string
	// Name, when not nil, is the new GPT partition name; nil keeps it. An
	// MBR has no names.
	Name *string
	// Format of the output: Raw or Qcow2 (plain qcow2). Empty means the
	// input's format.
	Format Format
	// ClusterSize of a qcow2 output; 0 means the input's cluster size for
	// a qcow2 input, else 64 KiB.
	ClusterSize int64
	// Header and Passphrase make the new LUKS header (EncryptPartition).
	Header     header.Params
	Passphrase []byte
	Pipeline   Pipeline
	// HeaderMade, if set, is called once EncryptPartition has made the
	// header (see EncryptOptions.HeaderMade).
	HeaderMade func()
}

// PartitionResult describes the partition written.
type PartitionResult struct {
	Header    header.Header // the LUKS header (EncryptPartition)
	Start     int64         // partition start in bytes
	Size      int64         // new partition size in bytes
	DiskSize  int64         // new disk size in bytes
	Partition int
	Table     string // the partition table format: "gpt" or "mbr"
	Format    Format // the output's container format
}

// partTable is a partition table read from a disk with one partition
// selected: what the flow needs of a format.
type partTable interface {
	// kind names the format ("gpt", "mbr").
	kind() string
	// target returns the byte offset and size of the selected partition.
	target() (start, size int64)
	// relayout grows (or, negative, shrinks) the selected partition by
	// grow bytes, moves every partition that starts after it by move
	// bytes, applies o's type and name, and checks that the result is a
	// valid table of a disk of newSize bytes. It changes no bytes yet.
	relayout(grow, move, newSize int64, o PartitionOptions) error
	// write writes the table relayout made to dst, a disk of newSize
	// bytes that already holds every other byte. Whatever the format does
	// not own in its sectors is written as the input had it.
	write(dst io.WriterAt, newSize int64) error
}

// tableFormat is a partition table format partition encryption knows.
type tableFormat struct {
	name string
	// claims reports whether a disk whose first two sectors are head
	// carries this format. At most one format claims a disk.
	claims func(head []byte) bool
	// open reads the table of d and selects partition index; a missing
	// index is an ErrNoPartition.
	open func(d *partDisk, head []byte, index int) (partTable, error)
}

// tableFormats is filled by each format's file from init.
var tableFormats []tableFormat

func registerTable(f tableFormat) { tableFormats = append(tableFormats, f) }

// partDisk is the disk a partition is encrypted on or decrypted from: the
// guest view of a raw or plain qcow2 image.
type partDisk struct {
	plain *Plain
	r     io.ReaderAt
	size  int64
}

func openPartDisk(f *os.File) (*partDisk, error) {
	// OpenPlain's own size error names the file, which the caller does.
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size()%SectorSize != 0 && !qcow2.IsQcow2(f) {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSize, st.Size())
	}
	p, err := OpenPlain(f)
	if err != nil {
		return nil, err
	}
	if p.Size%SectorSize != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSize, p.Size)
	}
	return &partDisk{plain: p, r: p.guest, size: p.Size}, nil
}

// readTable finds the format that claims d and reads its table.
func (d *partDisk) readTable(index int) (partTable, error) {
	head := make([]byte, 2*SectorSize)
	if d.size < int64(len(head)) {
		return nil, fmt.Errorf("%w: the disk is only %d bytes", ErrNoTable, d.size)
	}
	if n, err := d.r.ReadAt(head, 0); n < len(head) {
		return nil, fmt.Errorf("failed to read the partition table: %w", err)
	}
	for _, tf := range tableFormats {
		if tf.claims(head) {
			return tf.open(d, head, index)
		}
	}
	return nil, ErrNoTable
}

// sector reads the 512 bytes at LBA n.
func (d *partDisk) sector(n int64) ([]byte, error) {
	b := make([]byte, SectorSize)
	if n < 0 || (n+1)*SectorSize > d.size {
		return nil, fmt.Errorf("sector %d is outside the %d-byte disk", n, d.size)
	}
	if m, err := d.r.ReadAt(b, n*SectorSize); m < len(b) {
		return nil, fmt.Errorf("failed to read sector %d: %w", n, err)
	}
	return b, nil
}

// dataOnly cuts copy extents down to the parts of a qcow2 disk that hold
// data, so unallocated clusters are not even read; a raw input's holes
// are found by sectors.Run itself.
func (d *partDisk) dataOnly(ext []sectors.Extent) []sectors.Extent {
	if d.plain.Format != Qcow2 {
		return ext
	}
	var out []sectors.Extent
	for _, e := range ext {
		for _, r := range d.plain.dataMap() {
			lo, hi := max(e.SrcOffset, r.Offset), min(e.SrcOffset+e.Length, r.Offset+r.Length)
			if lo < hi {
				out = append(out, sectors.Extent{SrcOffset: lo, DstOffset: e.DstOffset + lo - e.SrcOffset, Length: hi - lo})
			}
		}
	}
	return out
}

// noPartition is the error for a missing index; have lists what exists.
func noPartition(index int, have []int) error {
	if len(have) == 0 {
		return fmt.Errorf("partition %d: %w (the disk has no partitions)", index, ErrNoPartition)
	}
	s := make([]string, len(have))
	for i, n := range have {
		s[i] = fmt.Sprint(n)
	}
	return fmt.Errorf("partition %d: %w (the disk has %s)", index, ErrNoPartition, strings.Join(s, ", "))
}

// diskFile presents a disk as the backend.File go-diskfs reads tables from
// (and, with w set, the backend.WritableFile it writes them to): ReadAt and
// WriteAt go to the disk, Seek(0, io.SeekEnd) gives its size.
type diskFile struct {
	r    io.ReaderAt
	w    io.WriterAt
	size int64
	pos  int64
}

func (f *diskFile) ReadAt(p []byte, off int64) (int, error)  { return f.r.ReadAt(p, off) }
func (f *diskFile) WriteAt(p []byte, off int64) (int, error) { return f.w.WriteAt(p, off) }
func (f *diskFile) Close() error                             { return nil }
func (f *diskFile) Stat() (fs.FileInfo, error)               { return diskInfo{f.size}, nil }

func (f *diskFile) Read(p []byte) (int, error) {
	n, err := f.r.ReadAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

func (f *diskFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += f.pos
	case io.SeekEnd:
		off += f.size
	}
	if off < 0 {
		return 0, errors.New("image: negative seek")
	}
	f.pos = off
	return off, nil
}

// diskInfo is a regular file of the disk's size: go-diskfs would take any
// other mode for a block device.
type diskInfo struct{ size int64 }

func (i diskInfo) Name() string       { return "disk" }
func (i diskInfo) Size() int64        { return i.size }
func (i diskInfo) Mode() fs.FileMode  { return 0o444 }
func (i diskInfo) ModTime() time.Time { return time.Time{} }
func (i diskInfo) IsDir() bool        { return false }
func (i diskInfo) Sys() any           { return nil }

// partOutput is the disk being written: the raw output file, or a plain
// qcow2 image on it.
type partOutput struct {
	io.WriterAt
	q      *qcowOut
	format Format
}

func newPartOutput(dst *os.File, d *partDisk, o PartitionOptions, size int64) (*partOutput, error) {
	format := o.Format
	if format == "" {
		format = d.plain.Format
	}
	switch format {
	case Raw:
		if err := dst.Truncate(size); err != nil {
			return nil, fmt.Errorf("failed to size output: %w", err)
		}
		return &partOutput{WriterAt: dst, format: Raw}, nil
	case Qcow2:
		cs := o.ClusterSize
		if cs == 0 && d.plain.Qcow2 != nil {
			cs = d.plain.Qcow2.ClusterSize
		}
		q, err := newQcowOut(dst, size, cs)
		if err != nil {
			return nil, err
		}
		return &partOutput{WriterAt: q, q: q, format: Qcow2}, nil
	}
	return nil, fmt.Errorf("unknown output format %q (want raw or qcow2)", format)
}

// finish writes a qcow2 output's metadata.
func (w *partOutput) finish() error {
	if w.q != nil {
		return w.q.close()
	}
	return nil
}

func roundUpAlign(n int64) int64 { return (n + partAlign - 1) / partAlign * partAlign }

// copyRanges copies extents of src to dst unchanged through the sectors
// pipeline; zero blocks are not written, so they stay holes (raw) or
// unallocated clusters (qcow2) in dst.
func copyRanges(ctx context.Context, dst io.WriterAt, src io.ReaderAt, ext []sectors.Extent, o sectors.Options) error {
	o.Sparse = true
	var nonEmpty []sectors.Extent
	for _, e := range ext {
		if e.Length > 0 {
			nonEmpty = append(nonEmpty, e)
		}
	}
	return sectors.Run(ctx, dst, src, nonEmpty, func(d, s []byte, _ uint64) error { copy(d, s); return nil }, o)
}

func extentBytes(ext []sectors.Extent) int64 {
	var n int64
	for _, e := range ext {
		n += e.Length
	}
	return n
}

// EncryptPartition writes to dst, an empty regular file, a copy of the
// disk image src (raw or plain qcow2, GPT or MBR) in which partition
// o.Partition holds a LUKS container of its former contents (see the
// layout note above).
func EncryptPartition(ctx context.Context, dst, src *os.File, o PartitionOptions) (*PartitionResult, error) {
	d, err := openPartDisk(src)
	if err != nil {
		return nil, err
	}
	t, err := d.readTable(o.Partition)
	if err != nil {
		return nil, err
	}
	start, size := t.target()
	luks2SectorSize(&o.Header, size)
	if err := refuseAuthParams(o.Header, "partition encryption"); err != nil {
		return nil, err
	}
	h, vk, area, err := header.Format(o.Passphrase, o.Header)
	if err != nil {
		return nil, err
	}
	defer clear(vk)
	if o.HeaderMade != nil {
		o.HeaderMade()
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		return nil, err
	}
	defer c.Clear()

	if ss := int64(c.Geometry().SectorSize); size%ss != 0 {
		return nil, fmt.Errorf("%w: partition %d is %d bytes, not whole %d-byte sectors", ErrUnaligned, o.Partition, size, ss)
	}
	payload := h.Info().PayloadOffset
	move := roundUpAlign(payload)
	newSize := d.size + move
	if err := t.relayout(payload, move, newSize, o); err != nil {
		return nil, err
	}
	out, err := newPartOutput(dst, d, o, newSize)
	if err != nil {
		return nil, err
	}
	end := start + size
	copies := d.dataOnly([]sectors.Extent{
		{SrcOffset: 0, DstOffset: 0, Length: start},
		{SrcOffset: end, DstOffset: end + move, Length: d.size - end},
	})
	crypt := []sectors.Extent{{SrcOffset: start, DstOffset: start + payload, Length: size, Sector: rawIV(0)}}
	copied := extentBytes(copies)
	prog := newTwoStage(o.Pipeline, copied+size)
	if err := copyRanges(ctx, out, d.r, copies, prog.options(0, false)); err != nil {
		return nil, err
	}
	co := prog.options(copied, false)
	co.SectorSize = c.Geometry().SectorSize
	if err := sectors.Run(ctx, out, d.r, crypt, c.EncryptSectors, co); err != nil {
		return nil, err
	}
	if _, err := out.WriteAt(area, start); err != nil {
		return nil, fmt.Errorf("failed to write the LUKS header: %w", err)
	}
	if err := t.write(out, newSize); err != nil {
		return nil, err
	}
	if err := out.finish(); err != nil {
		return nil, err
	}
	return &PartitionResult{Header: h, Start: start, Size: size + payload, DiskSize: newSize,
		Partition: o.Partition, Table: t.kind(), Format: out.format}, nil
}

// OpenPartition reads the LUKS header at the start of partition index of
// the disk image f (raw or plain qcow2, GPT or MBR). The result unlocks
// and decrypts like a raw LUKS image (its Format is Raw whatever the
// disk's container) whose header and payload offsets are offsets in the
// disk; it is for DecryptPartition and the key operations, not for View.
func OpenPartition(f *os.File, index int) (*Encrypted, error) {
	d, err := openPartDisk(f)
	if err != nil {
		return nil, err
	}
	t, err := d.readTable(index)
	if err != nil {
		return nil, err
	}
	start, size := t.target()
	h, err := header.Read(d.r, start, size)
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
	c := &rawContainer{luks: luksArea{r: d.r, off: start, limit: size}, data: d.r, base: start + payload, size: size - payload}
	return newEncrypted(c, h, d.size), nil
}

// DecryptPartition writes to dst, an empty regular file, the disk image
// src with the LUKS container in partition o.Partition (opened as e by
// OpenPartition and unlocked as k) replaced by its plaintext: the inverse
// of EncryptPartition.
func DecryptPartition(ctx context.Context, dst, src *os.File, e *Encrypted, k *Key, o PartitionOptions) (*PartitionResult, error) {
	d, err := openPartDisk(src)
	if err != nil {
		return nil, err
	}
	t, err := d.readTable(o.Partition)
	if err != nil {
		return nil, err
	}
	start, size := t.target()
	if e.HeaderOffset != start {
		return nil, fmt.Errorf("image: DecryptPartition: header at %d, partition %d starts at %d", e.HeaderOffset, o.Partition, start)
	}
	payload := e.PayloadOffset - start
	move := roundUpAlign(payload)
	end := start + size
	// Encrypting left move-payload bytes between the partition's end and
	// whatever follows it (the next partition or the disk's end); without
	// them nothing can move back.
	tail := d.size - end - (move - payload)
	if tail < 0 {
		return nil, fmt.Errorf("partition %d ends %d bytes before the end of the disk, fewer than the %d that encrypting it added", o.Partition, d.size-end, move-payload)
	}
	newSize := d.size - move
	if err := t.relayout(-payload, -move, newSize, o); err != nil {
		return nil, err
	}
	out, err := newPartOutput(dst, d, o, newSize)
	if err != nil {
		return nil, err
	}
	plainEnd := start + e.PayloadSize
	copies := d.dataOnly([]sectors.Extent{
		{SrcOffset: 0, DstOffset: 0, Length: start},
		{SrcOffset: plainEnd + move, DstOffset: plainEnd, Length: tail},
	})
	crypt := []sectors.Extent{{SrcOffset: e.PayloadOffset, DstOffset: start, Length: e.PayloadSize, Sector: rawIV(0)}}
	copied := extentBytes(copies)
	prog := newTwoStage(o.Pipeline, copied+e.PayloadSize)
	if err := copyRanges(ctx, out, d.r, copies, prog.options(0, false)); err != nil {
		return nil, err
	}
	co := prog.options(copied, true)
	co.SectorSize = k.Cipher.Geometry().SectorSize
	if err := sectors.Run(ctx, out, d.r, crypt, k.Cipher.DecryptSectors, co); err != nil {
		return nil, err
	}
	if err := t.write(out, newSize); err != nil {
		return nil, err
	}
	if err := out.finish(); err != nil {
		return nil, err
	}
	return &PartitionResult{Start: start, Size: e.PayloadSize, DiskSize: newSize,
		Partition: o.Partition, Table: t.kind(), Format: out.format}, nil
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
