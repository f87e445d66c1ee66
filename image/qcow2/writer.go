package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
)

// DefaultClusterSize is qemu's default cluster size.
const DefaultClusterSize = 64 << 10

const (
	writerHeaderLength = 112 // as qemu 7.2 writes it: 104 + compression_type + padding
	writerRefcountBits = 16
)

// CreateOptions configures [Create].
type CreateOptions struct {
	// ClusterSize is a power of two from 512 to 2 MiB; 0 means 64 KiB.
	ClusterSize int64
	// CryptLength > 0 reserves a LUKS header area of that many bytes
	// (rounded up to whole clusters, zero-filled), sets crypt_method 2 and
	// writes the full disk encryption header extension (0x0537be77) with
	// this exact length.
	CryptLength int64
}

// Writer creates a qcow2 version 3 image (refcount_bits 16, no compression,
// standard L2 entries). Data clusters are handed out sequentially from the
// start of the file, right after the header and the LUKS area; the caller
// writes the data itself at the returned host offsets. Close then appends
// the L2 tables (only those covering mapped ranges), the L1 table and the
// refcount structures, and writes the header. A Writer is not safe for
// concurrent use.
type Writer struct {
	w         io.WriterAt
	size      int64
	cs        int64
	cb        uint32
	l2Entries int64
	l1Size    int64
	cryptOff  int64
	cryptLen  int64
	next      int64              // next free host offset, cluster aligned
	l2        map[int64][]uint64 // L1 index -> L2 entries, allocated on first touch
	closed    bool
}

// ErrClosed is returned by Writer methods called after Close.
var ErrClosed = errors.New("qcow2: writer closed")

// Create starts a qcow2 image of the given virtual size (a multiple of 512
// bytes) on w, which should be empty. Nothing is valid on w until Close.
func Create(w io.WriterAt, size int64, o CreateOptions) (*Writer, error) {
	cs := o.ClusterSize
	if cs == 0 {
		cs = DefaultClusterSize
	}
	if cs < 1<<minClusterBits || cs > 1<<maxClusterBits || cs&(cs-1) != 0 {
		return nil, fmt.Errorf("qcow2: cluster size %d is not a power of two from 512 to 2 MiB", cs)
	}
	if size < 0 || size%512 != 0 || size > 1<<62 {
		return nil, fmt.Errorf("qcow2: virtual size %d is not a non-negative multiple of 512", size)
	}
	if o.CryptLength < 0 || o.CryptLength > 1<<40 {
		return nil, fmt.Errorf("qcow2: crypt length %d out of range", o.CryptLength)
	}
	wr := &Writer{
		w:         w,
		size:      size,
		cs:        cs,
		cb:        uint32(bits.TrailingZeros64(uint64(cs))),
		l2Entries: cs / 8,
		l2:        map[int64][]uint64{},
		next:      cs, // cluster 0 is the header
	}
	// At least one L1 entry, so that a zero-sized image still has an L1
	// cluster that qemu-img check counts as referenced.
	wr.l1Size = max(1, ceilDiv(ceilDiv(size, cs), wr.l2Entries))
	if wr.l1Size > maxL1Bytes/8 {
		return nil, fmt.Errorf("qcow2: virtual size %d too large for %d-byte clusters", size, cs)
	}
	if o.CryptLength > 0 {
		wr.cryptOff = wr.next
		wr.cryptLen = o.CryptLength
		area := ceilDiv(o.CryptLength, cs) * cs
		wr.next += area
		if err := writeZeros(w, wr.cryptOff, area); err != nil {
			return nil, err
		}
	}
	return wr, nil
}

// writeZeros writes n zero bytes at off in chunks of at most 1 MiB.
func writeZeros(w io.WriterAt, off, n int64) error {
	buf := make([]byte, min(n, 1<<20))
	for n > 0 {
		c := min(n, int64(len(buf)))
		if _, err := w.WriteAt(buf[:c], off); err != nil {
			return fmt.Errorf("qcow2: failed to write at %#x: %w", off, err)
		}
		off += c
		n -= c
	}
	return nil
}

// ClusterSize returns the image's cluster size.
func (w *Writer) ClusterSize() int64 { return w.cs }

// CryptOffset returns the cluster-aligned host offset of the LUKS header
// area, or 0 when CreateOptions.CryptLength was 0.
func (w *Writer) CryptOffset() int64 { return w.cryptOff }

// checkRange validates a guest range for AllocateData and SetZero.
func (w *Writer) checkRange(guestOff, n int64) error {
	if w.closed {
		return ErrClosed
	}
	if guestOff < 0 || n <= 0 || guestOff%w.cs != 0 || guestOff > w.size || n > w.size-guestOff {
		return fmt.Errorf("qcow2: guest range %#x+%#x not a cluster-aligned range inside the virtual size %#x", guestOff, n, w.size)
	}
	if n%w.cs != 0 && guestOff+n != w.size {
		return fmt.Errorf("qcow2: guest range length %#x is not a multiple of the cluster size %d", n, w.cs)
	}
	return nil
}

// mapClusters sets the L2 entry of each guest cluster in the range to
// entry(i) for the i-th cluster, refusing clusters already mapped.
func (w *Writer) mapClusters(guestOff, n int64, entry func(i int64) uint64) error {
	first := guestOff / w.cs
	count := ceilDiv(n, w.cs)
	for c := first; c < first+count; c++ {
		if t := w.l2[c/w.l2Entries]; t != nil && t[c%w.l2Entries] != 0 {
			return fmt.Errorf("qcow2: guest cluster at %#x already mapped", c*w.cs)
		}
	}
	for c := first; c < first+count; c++ {
		t := w.l2[c/w.l2Entries]
		if t == nil {
			t = make([]uint64, w.l2Entries)
			w.l2[c/w.l2Entries] = t
		}
		t[c%w.l2Entries] = entry(c - first)
	}
	return nil
}

// AllocateData maps the guest range [guestOff, guestOff+n) to freshly
// allocated host clusters, contiguous on the host, and returns the host
// offset of guestOff. guestOff must be cluster aligned and n a multiple of
// the cluster size unless the range ends at the virtual size. The caller
// writes the data there (with qcow2+LUKS, encrypted with IV sector =
// host offset/512); clusters it leaves unwritten read as zeros if the file
// is sparse. Allocation is sequential, so consecutive calls give
// consecutive host ranges.
func (w *Writer) AllocateData(guestOff, n int64) (int64, error) {
	if err := w.checkRange(guestOff, n); err != nil {
		return 0, err
	}
	host := w.next
	if err := w.mapClusters(guestOff, n, func(i int64) uint64 {
		return uint64(host+i*w.cs) | flagCopied
	}); err != nil {
		return 0, err
	}
	w.next += ceilDiv(n, w.cs) * w.cs
	return host, nil
}

// SetZero marks the guest range as zero clusters (the v3 zero flag, no host
// cluster). Unmapped ranges already read as zeros; this records the
// intent explicitly. Same alignment rules as AllocateData.
func (w *Writer) SetZero(guestOff, n int64) error {
	if err := w.checkRange(guestOff, n); err != nil {
		return err
	}
	return w.mapClusters(guestOff, n, func(int64) uint64 { return flagZero })
}

// Close writes the L2 tables, the L1 table, the refcount blocks and table
// (refcount 1 for every cluster up to the end of the file, themselves
// included) and the header, then truncates w to the end of the last cluster
// if it has a Truncate method. The Writer is unusable afterwards.
func (w *Writer) Close() error {
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	be := binary.BigEndian
	cs := w.cs

	// L2 tables, in L1 order.
	keys := make([]int64, 0, len(w.l2))
	for k := range w.l2 {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	l2Off := make(map[int64]int64, len(keys))
	buf := make([]byte, cs)
	for _, k := range keys {
		off := w.next
		w.next += cs
		l2Off[k] = off
		for i, e := range w.l2[k] {
			be.PutUint64(buf[i*8:], e)
		}
		if _, err := w.w.WriteAt(buf, off); err != nil {
			return fmt.Errorf("qcow2: failed to write l2 table: %w", err)
		}
	}

	// L1 table (at least one cluster, so its offset is valid even when the
	// virtual size is 0).
	l1Off := w.next
	l1Clusters := max(1, ceilDiv(w.l1Size*8, cs))
	w.next += l1Clusters * cs
	l1 := make([]byte, l1Clusters*cs)
	for _, k := range keys {
		be.PutUint64(l1[k*8:], uint64(l2Off[k])|flagCopied)
	}
	if _, err := w.w.WriteAt(l1, l1Off); err != nil {
		return fmt.Errorf("qcow2: failed to write l1 table: %w", err)
	}

	// Refcount blocks and table must count every cluster, themselves
	// included: iterate to the fixed point.
	perBlock := cs * 8 / writerRefcountBits
	used := w.next / cs
	var blocks, tableClusters int64
	for {
		total := used + blocks + tableClusters
		b := ceilDiv(total, perBlock)
		t := ceilDiv(b*8, cs)
		if b == blocks && t == tableClusters {
			break
		}
		blocks, tableClusters = b, t
	}
	total := used + blocks + tableClusters
	blocksOff := w.next
	tableOff := blocksOff + blocks*cs
	for b := int64(0); b < blocks; b++ {
		clear(buf)
		for i := int64(0); i < perBlock && b*perBlock+i < total; i++ {
			be.PutUint16(buf[i*2:], 1)
		}
		if _, err := w.w.WriteAt(buf, blocksOff+b*cs); err != nil {
			return fmt.Errorf("qcow2: failed to write refcount block: %w", err)
		}
	}
	table := make([]byte, tableClusters*cs)
	for b := int64(0); b < blocks; b++ {
		be.PutUint64(table[b*8:], uint64(blocksOff+b*cs))
	}
	if _, err := w.w.WriteAt(table, tableOff); err != nil {
		return fmt.Errorf("qcow2: failed to write refcount table: %w", err)
	}

	// Header and extensions, last, so a crash leaves no valid-looking image.
	hdr := make([]byte, cs)
	be.PutUint32(hdr[0:], magic)
	be.PutUint32(hdr[4:], 3)
	be.PutUint32(hdr[20:], w.cb)
	be.PutUint64(hdr[24:], uint64(w.size))
	be.PutUint32(hdr[36:], uint32(w.l1Size))
	be.PutUint64(hdr[40:], uint64(l1Off))
	be.PutUint64(hdr[48:], uint64(tableOff))
	be.PutUint32(hdr[56:], uint32(tableClusters))
	be.PutUint32(hdr[96:], uint32(bits.TrailingZeros(writerRefcountBits)))
	be.PutUint32(hdr[100:], writerHeaderLength)
	ext := hdr[writerHeaderLength:]
	if w.cryptLen > 0 {
		be.PutUint32(hdr[32:], CryptLUKS)
		be.PutUint32(ext[0:], extCrypto)
		be.PutUint32(ext[4:], 16)
		be.PutUint64(ext[8:], uint64(w.cryptOff))
		be.PutUint64(ext[16:], uint64(w.cryptLen))
	}
	// The end-of-extensions marker is the zeroed ext[0:8].
	if _, err := w.w.WriteAt(hdr, 0); err != nil {
		return fmt.Errorf("qcow2: failed to write header: %w", err)
	}
	if t, ok := w.w.(interface{ Truncate(int64) error }); ok {
		if err := t.Truncate(total * cs); err != nil {
			return fmt.Errorf("qcow2: failed to truncate: %w", err)
		}
	}
	w.l2 = nil
	return nil
}
