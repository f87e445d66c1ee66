package qcow2

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Kind classifies a guest range.
type Kind int

const (
	// Unallocated ranges read as zeros (this package refuses backing files).
	Unallocated Kind = iota
	// Zero ranges carry the zero flag (v3) and read as zeros.
	Zero
	// Data ranges are stored uncompressed at HostOffset.
	Data
	// Compressed extents are one compressed cluster each; see [Image.ReadCompressed].
	Compressed
)

func (k Kind) String() string {
	switch k {
	case Unallocated:
		return "unallocated"
	case Zero:
		return "zero"
	case Data:
		return "data"
	case Compressed:
		return "compressed"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Extent is a run of the guest view [GuestOffset, GuestOffset+Length).
type Extent struct {
	Kind        Kind
	GuestOffset int64
	Length      int64
	// HostOffset is, for Data, the host byte offset of GuestOffset (the run
	// is host-contiguous); for Compressed, the host byte offset of the
	// compressed stream. Zero otherwise.
	HostOffset int64
	// CompressedLength is, for Compressed, the number of bytes at HostOffset
	// that may belong to the stream (the descriptor's sector count, cut at
	// the end of the file); the stream may end earlier.
	CompressedLength int64
}

// extentList appends extents, merging a new one into the previous one when
// both are Unallocated, both Zero, or both Data and contiguous on the host.
type extentList struct{ out []Extent }

func (l *extentList) add(e Extent) {
	if n := len(l.out); n > 0 {
		last := &l.out[n-1]
		if last.Kind == e.Kind && last.GuestOffset+last.Length == e.GuestOffset {
			switch e.Kind {
			case Unallocated, Zero:
				last.Length += e.Length
				return
			case Data:
				if last.HostOffset+last.Length == e.HostOffset {
					last.Length += e.Length
					return
				}
			}
		}
	}
	l.out = append(l.out, e)
}

// Extents returns the guest view as extents in guest order that cover
// [0, Size) exactly. It reads only the L2 tables the L1 table references, so
// the work is proportional to the allocated metadata, not the virtual size.
// Every L2 entry is validated: reserved bits, alignment, host ranges inside
// the file and outside the metadata, compressed descriptors, and subcluster
// bitmaps; a bad one yields an error wrapping [ErrCorrupt].
func (im *Image) Extents(r io.ReaderAt) ([]Extent, error) {
	cs := im.ClusterSize
	perTable := im.l2Entries * cs // guest bytes one L2 table maps
	var l extentList
	var table []byte
	for i, l2 := range im.l1 {
		gStart := int64(i) * perTable
		gEnd := min(im.Size, gStart+perTable)
		if l2 == 0 {
			l.add(Extent{Kind: Unallocated, GuestOffset: gStart, Length: gEnd - gStart})
			continue
		}
		if table == nil {
			table = make([]byte, cs)
		}
		if err := readFull(r, table, int64(l2)); err != nil {
			return nil, err
		}
		for j := int64(0); gStart+j*cs < gEnd; j++ {
			g := gStart + j*cs
			if err := im.addCluster(&l, table[j*im.l2Bytes:], g, min(cs, gEnd-g)); err != nil {
				return nil, fmt.Errorf("%w (guest offset %#x)", err, g)
			}
		}
	}
	return l.out, nil
}

// addCluster decodes the L2 entry ent for the guest cluster at g, of which
// the first n bytes lie inside the virtual size.
func (im *Image) addCluster(l *extentList, ent []byte, g, n int64) error {
	be := binary.BigEndian
	e := be.Uint64(ent)
	cs := im.ClusterSize
	if e&flagCompressed != 0 {
		return im.addCompressed(l, ent, g, n)
	}
	off := int64(e & offsetMask)
	if off%cs != 0 {
		return corruptf("data cluster offset %#x not cluster aligned", off)
	}
	if !im.ExtendedL2 {
		if e&l2StdReservedMask != 0 {
			return corruptf("l2 entry %#x has reserved bits set", e)
		}
		zero := e&flagZero != 0
		switch {
		case zero && im.Version < 3:
			return corruptf("l2 entry %#x has the zero flag in a version 2 image", e)
		case zero:
			l.add(Extent{Kind: Zero, GuestOffset: g, Length: n})
		case off == 0:
			l.add(Extent{Kind: Unallocated, GuestOffset: g, Length: n})
		default:
			if err := im.checkData(off, n); err != nil {
				return err
			}
			l.add(Extent{Kind: Data, GuestOffset: g, Length: n, HostOffset: off})
		}
		return nil
	}

	if e&(l2StdReservedMask|flagZero) != 0 {
		return corruptf("extended l2 entry %#x has reserved bits set", e)
	}
	bm := be.Uint64(ent[8:])
	alloc, zeros := uint32(bm), uint32(bm>>32)
	switch {
	case alloc&zeros != 0:
		return corruptf("subcluster bitmap %#x marks subclusters both allocated and zero", bm)
	case off == 0 && alloc != 0:
		return corruptf("subcluster bitmap %#x allocates subclusters of an unallocated cluster", bm)
	case alloc == 0 && zeros == 0:
		l.add(Extent{Kind: Unallocated, GuestOffset: g, Length: n})
		return nil
	case zeros == 1<<subclusters-1:
		l.add(Extent{Kind: Zero, GuestOffset: g, Length: n})
		return nil
	}
	sc := cs / subclusters
	for k := int64(0); k < subclusters && k*sc < n; k++ {
		sg, sn := g+k*sc, min(sc, n-k*sc)
		switch {
		case alloc&(1<<k) != 0:
			if err := im.checkData(off+k*sc, sn); err != nil {
				return err
			}
			l.add(Extent{Kind: Data, GuestOffset: sg, Length: sn, HostOffset: off + k*sc})
		case zeros&(1<<k) != 0:
			l.add(Extent{Kind: Zero, GuestOffset: sg, Length: sn})
		default:
			l.add(Extent{Kind: Unallocated, GuestOffset: sg, Length: sn})
		}
	}
	return nil
}

// checkData validates a host data range: inside the file and clear of all
// metadata (header, L1, L2, refcount structures, LUKS area).
func (im *Image) checkData(off, n int64) error {
	if !inFile(off, n, im.fileSize) {
		return corruptf("data at %#x (%d bytes) beyond end of file", off, n)
	}
	if s, ok := overlaps(im.meta, off, off+n); ok {
		return corruptf("data at %#x overlaps the %s at %#x", off, s.what, s.off)
	}
	return nil
}

func (im *Image) addCompressed(l *extentList, ent []byte, g, n int64) error {
	e := binary.BigEndian.Uint64(ent)
	if e&flagCopied != 0 {
		return corruptf("compressed l2 entry %#x has the copied flag", e)
	}
	if im.ExtendedL2 {
		if bm := binary.BigEndian.Uint64(ent[8:]); bm != 0 {
			return corruptf("compressed l2 entry with subcluster bitmap %#x", bm)
		}
	}
	// Descriptor: bits 0..x-1 host byte offset, bits x..61 additional
	// 512-byte sectors, x = 62 - (cluster_bits - 8).
	x := 62 - (im.ClusterBits - 8)
	d := e &^ (flagCopied | flagCompressed)
	off := int64(d & (1<<x - 1))
	sectors := int64(d>>x&(1<<(im.ClusterBits-8)-1)) + 1
	csize := sectors*512 - off%512
	if off >= im.fileSize {
		return corruptf("compressed cluster at %#x beyond end of file", off)
	}
	avail := min(csize, im.fileSize-off)
	if s, ok := overlaps(im.meta, off, off+avail); ok {
		return corruptf("compressed cluster at %#x overlaps the %s at %#x", off, s.what, s.off)
	}
	l.add(Extent{Kind: Compressed, GuestOffset: g, Length: n, HostOffset: off, CompressedLength: avail})
	return nil
}
