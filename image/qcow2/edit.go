package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// File is what an [Editor] works on: an image file open for reading (and
// writing, unless only Lookup is used). *os.File satisfies it.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// ErrInPlace reports an Allocate call for a guest cluster that is already
// stored, unshared and uncompressed: its data is written in place.
var ErrInPlace = errors.New("qcow2: guest cluster is already allocated in place")

// Mapping is where a guest range is stored, as [Editor.Lookup] reports it.
type Mapping struct {
	Extent
	// InPlace is set for Data whose host cluster is referenced once (the
	// COPIED flag): writes may go straight to the host offset. Any other
	// write needs [Editor.Allocate].
	InPlace bool
}

const (
	// editCacheBytes bounds the clean L2 tables kept in memory.
	editCacheBytes = 32 << 20
	// editFlushBytes is how much newly allocated data makes Allocate flush
	// the metadata by itself, bounding memory and what a crash can lose.
	editFlushBytes = 1 << 30
)

// Editor changes an existing qcow2 image in place: it maps guest offsets
// to host clusters and allocates clusters for writes, keeping refcounts
// exact, so qemu-img check stays clean. A cluster that reads as zeros but
// owns a host cluster (preallocated) is written there; other new clusters
// are appended at the end of the file; freed ones are never reused.
//
// Write ordering follows qemu's: refcount increments are written first,
// the caller's data next, and the L2 and L1 entries that reference them
// only at [Editor.Flush], after a sync; clusters that a new entry replaces
// are released after the new entry is synced. A crash therefore leaves at
// worst leaked clusters, never an entry that points at unwritten or freed
// clusters. Until Flush, the new mappings live in memory (Lookup sees
// them); Allocate flushes on its own every GiB of new data.
//
// Writing needs a clean image (dirty bit clear); otherwise Allocate fails
// with [ErrUnsupported], while Lookup still works. With extended L2 entries
// a cluster is written in place only when all of its subclusters are
// allocated; any other goes through Allocate and is written whole, all of
// its subclusters allocated. Internal snapshots and backing files are
// refused by [Open]. An Editor is safe for concurrent use, but Allocate
// calls for the same guest cluster must not overlap.
type Editor struct {
	mu  sync.Mutex
	f   File
	im  *Image
	cs  int64
	end int64 // next free host offset, cluster aligned

	l1Off     int64
	l1Raw     []uint64         // L1 entries as stored (flags included)
	l1Dirty   map[int64]bool   // L1 indexes to write at Flush
	l2        map[int64][]byte // L1 index -> L2 table, read cache plus dirty tables
	l2Dirty   map[int64]bool
	l2Clean   int64 // bytes of clean cached tables
	rtOff     int64
	rt        []uint64         // refcount table: block offsets
	rb        map[int64][]byte // table index -> cached refcount block
	rbEntries int64
	frees     []int64 // host offsets whose refcount drops at the next Flush
	pending   int64   // bytes allocated since the last Flush
	cleared   bool    // autoclear bits handled
}

// OpenEdit opens the qcow2 image in f (fileSize bytes) for editing; see
// [Open] for the validation done. Nothing is written until the first
// Allocate, so a read-only f serves Lookup.
func OpenEdit(f File, fileSize int64) (*Editor, error) {
	im, err := Open(f, fileSize)
	if err != nil {
		return nil, err
	}
	var hdr [64]byte
	if err := readFull(f, hdr[:], 0); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	cs := im.ClusterSize
	e := &Editor{
		f: f, im: im, cs: cs, end: ceilDiv(fileSize, cs) * cs,
		l1Off:   int64(be.Uint64(hdr[40:])),
		l1Dirty: map[int64]bool{}, l2: map[int64][]byte{}, l2Dirty: map[int64]bool{},
		rtOff:     int64(be.Uint64(hdr[48:])),
		rb:        map[int64][]byte{},
		rbEntries: cs * 8 / int64(im.RefcountBits),
	}
	if im.l1Needed > 0 {
		raw := make([]byte, im.l1Needed*8)
		if err := readFull(f, raw, e.l1Off); err != nil {
			return nil, err
		}
		e.l1Raw = make([]uint64, im.l1Needed)
		for i := range e.l1Raw {
			e.l1Raw[i] = be.Uint64(raw[i*8:])
		}
	}
	rtBytes := int64(be.Uint32(hdr[56:])) * cs
	raw := make([]byte, rtBytes)
	if err := readFull(f, raw, e.rtOff); err != nil {
		return nil, err
	}
	e.rt = make([]uint64, rtBytes/8)
	for i := range e.rt {
		e.rt[i] = be.Uint64(raw[i*8:]) &^ refTableRsvdMask
	}
	return e, nil
}

// Image returns the parsed header. Its fields stay valid; its Extents
// method does not see mappings that are not flushed yet.
func (e *Editor) Image() *Image { return e.im }

// table returns the L2 table of L1 index i, or nil if there is none.
func (e *Editor) table(i int64) ([]byte, error) {
	if t, ok := e.l2[i]; ok {
		return t, nil
	}
	off := int64(e.im.l1[i])
	if off == 0 {
		return nil, nil
	}
	t := make([]byte, e.cs)
	if err := readFull(e.f, t, off); err != nil {
		return nil, err
	}
	if e.l2Clean+e.cs > editCacheBytes {
		for k := range e.l2 {
			if e.l2Clean+e.cs <= editCacheBytes {
				break
			}
			if !e.l2Dirty[k] {
				delete(e.l2, k)
				e.l2Clean -= e.cs
			}
		}
	}
	e.l2[i] = t
	e.l2Clean += e.cs
	return t, nil
}

// Lookup returns the mapping of the guest range that starts at guestOff
// and reaches at most maxLen bytes: an extent that contains guestOff
// (GuestOffset may lie before it, at the start of its cluster or
// subcluster) and runs over following clusters of the same kind (and, for
// Data, contiguous on the host and equally InPlace). Compressed extents are
// one cluster. Entries are validated as [Image.Extents] does. The work is
// proportional to the clusters in maxLen that have an L2 table.
func (e *Editor) Lookup(guestOff, maxLen int64) (Mapping, error) {
	if guestOff < 0 || guestOff >= e.im.Size {
		return Mapping{}, fmt.Errorf("qcow2: guest offset %#x outside the virtual size %#x", guestOff, e.im.Size)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	cs := e.cs
	end := min(e.im.Size, guestOff+max(maxLen, 1))
	var run Mapping
	for g := guestOff - guestOff%cs; g < end; {
		var l extentList
		copied, next, err := e.cluster(&l, g)
		if err != nil {
			return Mapping{}, err
		}
		g = next
		if run.Length == 0 {
			k := find(l.out, guestOff)
			run = Mapping{Extent: l.out[k], InPlace: l.out[k].Kind == Data && copied}
			if k < len(l.out)-1 || run.Kind == Compressed {
				break
			}
			continue
		}
		x := l.out[0]
		same := x.Kind == run.Kind && (x.Kind != Data || x.HostOffset == run.HostOffset+run.Length && copied == run.InPlace)
		if !same || x.Kind == Compressed {
			break
		}
		run.Length += x.Length
		if len(l.out) > 1 {
			break
		}
	}
	return run, nil
}

// cluster appends the extents of the guest cluster at g to l (or, without
// an L2 table, of the rest of the table's range), and reports whether its
// L2 entry has the COPIED flag and where the next cluster to look at is.
func (e *Editor) cluster(l *extentList, g int64) (bool, int64, error) {
	c := g / e.cs
	i := c / e.im.l2Entries
	t, err := e.table(i)
	if err != nil {
		return false, 0, err
	}
	if t == nil {
		next := min(e.im.Size, (i+1)*e.im.l2Entries*e.cs)
		l.add(Extent{Kind: Unallocated, GuestOffset: g, Length: next - g})
		return false, next, nil
	}
	n := min(e.cs, e.im.Size-g)
	ent := t[c%e.im.l2Entries*e.im.l2Bytes:]
	if err := e.im.addCluster(l, ent, g, n); err != nil {
		return false, 0, fmt.Errorf("%w (guest offset %#x)", err, g)
	}
	return e.inPlace(ent, c), g + n, nil
}

// inPlace reports whether guest cluster c, whose L2 entry is ent, may be
// written in place: an uncompressed data cluster referenced once (COPIED)
// and, with extended L2 entries, with every subcluster inside the virtual
// size allocated. A cluster with some subclusters unallocated or zero is
// not, so that its writes all take the allocation path, one at a time,
// instead of racing in-place writes to its other subclusters.
func (e *Editor) inPlace(ent []byte, c int64) bool {
	v := binary.BigEndian.Uint64(ent)
	if v&(flagCompressed|flagZero) != 0 || v&offsetMask == 0 || v&flagCopied == 0 {
		return false
	}
	if !e.im.ExtendedL2 {
		return true
	}
	want := e.allocBits(c)
	return uint32(binary.BigEndian.Uint64(ent[8:]))&want == want
}

// allocBits is the subcluster allocation bitmap of guest cluster c with
// every subcluster inside the virtual size allocated.
func (e *Editor) allocBits(c int64) uint32 {
	sc := e.cs / subclusters
	k := min(subclusters, ceilDiv(e.im.Size-c*e.cs, sc))
	return uint32(uint64(1)<<k - 1)
}

// find returns the index of the extent of out that contains g.
func find(out []Extent, g int64) int {
	for k, x := range out {
		if g < x.GuestOffset+x.Length {
			return k
		}
	}
	return len(out) - 1
}

// ReadCompressed inflates a compressed cluster found by Lookup into dst
// (one cluster long); see [Image.ReadCompressed].
func (e *Editor) ReadCompressed(x Extent, dst []byte) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.im.ReadCompressed(e.f, x, dst)
}

// Allocate gives the guest cluster containing guestOff a host cluster to
// be written whole and returns its offset: usually a fresh one at the end
// of the file. fill must write the whole cluster there (qcow2+LUKS: the
// encrypted plaintext, IV sector = host offset/512, zeros included) before
// Allocate maps it: a mapped cluster is never left unwritten.
//
// A zero cluster with a host cluster, or (extended L2) a partly allocated
// one, keeps its host cluster if only it references it (COPIED): fill
// writes there while the old entry still reads as before, so preallocated
// images do not grow. Otherwise a cluster that was compressed, zero with a
// host cluster, shared or partly allocated is released at the next Flush.
// Either way its old content is the caller's to carry over. With extended
// L2 entries the new entry has every subcluster allocated.
//
// The L2 table is allocated when the L1 entry is empty, and refcount
// blocks when their table entry is. fill runs without the Editor's lock
// held. A full refcount table moves to the end of the file, twice as
// large. An in-place cluster gives ErrInPlace; a dirty image or a refcount
// table at qemu's size limit give ErrUnsupported.
func (e *Editor) Allocate(guestOff int64, fill func(hostOff int64) error) (int64, error) {
	h, err := e.AllocateClusters(guestOff, 1, func(h []int64) error { return fill(h[0]) })
	if err != nil {
		return 0, err
	}
	return h[0], nil
}

// AllocateClusters is Allocate for count consecutive guest clusters from
// the one containing guestOff; fill gets their host offsets, in guest
// order (consecutive unless a new L2 table or refcount block sits between
// them). When a reservation fails, none is made.
func (e *Editor) AllocateClusters(guestOff int64, count int, fill func(hostOffs []int64) error) ([]int64, error) {
	first := guestOff / e.cs
	if guestOff < 0 || count < 1 || first+int64(count) > ceilDiv(e.im.Size, e.cs) {
		return nil, fmt.Errorf("qcow2: %d clusters at guest offset %#x outside the virtual size %#x", count, guestOff, e.im.Size)
	}
	olds := make([][2]uint64, count) // L2 entry and, with extended L2, its bitmap
	hosts := make([]int64, count)
	reused := make([]bool, count) // the cluster keeps its own host cluster
	e.mu.Lock()
	for k := range count {
		c := first + int64(k)
		old, host, own, err := e.reserve(c/e.im.l2Entries, c%e.im.l2Entries)
		if err != nil {
			// Nothing references the clusters reserved so far: free them.
			for k2, h := range hosts[:k] {
				if !reused[k2] {
					err = errors.Join(err, e.setRef(h/e.cs/e.rbEntries, h/e.cs%e.rbEntries, 0))
				}
			}
			e.mu.Unlock()
			return nil, err
		}
		olds[k], hosts[k], reused[k] = old, host, own
	}
	e.mu.Unlock()
	if err := fill(hosts); err != nil {
		// The reserved clusters stay referenced by their refcounts only:
		// leaks, which qemu-img check -r leaks repairs.
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k := range count {
		c := first + int64(k)
		i, j := c/e.im.l2Entries, c%e.im.l2Entries
		t, err := e.table(i)
		if err != nil {
			return nil, err
		}
		ent := t[j*e.im.l2Bytes : (j+1)*e.im.l2Bytes]
		if e.entry(ent) != olds[k] {
			return nil, fmt.Errorf("qcow2: guest cluster at %#x changed during Allocate", c*e.cs)
		}
		binary.BigEndian.PutUint64(ent, uint64(hosts[k])|flagCopied)
		if e.im.ExtendedL2 {
			binary.BigEndian.PutUint64(ent[8:], uint64(e.allocBits(c)))
		}
		e.markDirty(i)
		if !reused[k] {
			e.release(olds[k][0])
		}
	}
	e.pending += int64(count) * e.cs
	if e.pending >= editFlushBytes {
		if err := e.flush(); err != nil {
			return nil, err
		}
	}
	return hosts, nil
}

func (e *Editor) markDirty(i int64) {
	if !e.l2Dirty[i] {
		e.l2Dirty[i] = true
		e.l2Clean -= e.cs
	}
}

// entry returns an L2 entry and, with extended L2, its subcluster bitmap.
func (e *Editor) entry(ent []byte) [2]uint64 {
	var v [2]uint64
	v[0] = binary.BigEndian.Uint64(ent)
	if e.im.ExtendedL2 {
		v[1] = binary.BigEndian.Uint64(ent[8:])
	}
	return v
}

// reserve checks that L2 entry j of table i may be replaced, makes sure
// the table exists, and finds the data cluster to write: the cluster's own
// host cluster when it has one referenced only by it (COPIED: a zero
// cluster with a preallocated host cluster, or with extended L2 a partly
// allocated one), so that preallocated images do not grow; else a new one.
// It returns the old entry, the host offset and whether it is the
// cluster's own.
func (e *Editor) reserve(i, j int64) ([2]uint64, int64, bool, error) {
	im := e.im
	if im.Dirty {
		return [2]uint64{}, 0, false, unsupportedf("allocating clusters in a dirty image (run qemu-img check -r all)")
	}
	if err := e.clearAutoclear(); err != nil {
		return [2]uint64{}, 0, false, err
	}
	t, err := e.table(i)
	if err != nil {
		return [2]uint64{}, 0, false, err
	}
	var old [2]uint64
	if t != nil {
		ent := t[j*im.l2Bytes:]
		if e.inPlace(ent, i*im.l2Entries+j) {
			return [2]uint64{}, 0, false, ErrInPlace
		}
		old = e.entry(ent)
		if off := int64(old[0] & offsetMask); old[0]&flagCompressed == 0 && old[0]&flagCopied != 0 && off != 0 {
			if err := im.checkData(off, e.cs); err != nil {
				return [2]uint64{}, 0, false, err
			}
			return old, off, true, nil
		}
	} else {
		off, err := e.allocCluster()
		if err != nil {
			return [2]uint64{}, 0, false, err
		}
		t = make([]byte, e.cs)
		e.l2[i] = t
		e.l2Dirty[i] = true
		e.im.l1[i] = uint64(off)
		e.l1Raw[i] = uint64(off) | flagCopied
		e.l1Dirty[i] = true
		e.im.meta = append(e.im.meta, span{off, off + e.cs, "l2 table"})
	}
	host, err := e.allocCluster()
	return old, host, false, err
}

// release queues the host clusters an old L2 entry referenced: a
// compressed stream's clusters, a zero cluster's preallocated one, or a
// shared data cluster.
func (e *Editor) release(old uint64) {
	if old&flagCompressed != 0 {
		x := 62 - (e.im.ClusterBits - 8)
		d := old &^ (flagCopied | flagCompressed)
		off := int64(d&(1<<x-1)) &^ 511
		n := (int64(d>>x&(1<<(e.im.ClusterBits-8)-1)) + 1) * 512
		for h := off - off%e.cs; h < off+n; h += e.cs {
			e.frees = append(e.frees, h)
		}
		return
	}
	if off := int64(old & offsetMask); off != 0 {
		e.frees = append(e.frees, off)
	}
}

// clearAutoclear clears the autoclear feature bits before the first change,
// as the spec asks of writers that do not maintain what they stand for
// (persistent bitmaps would go stale).
func (e *Editor) clearAutoclear() error {
	if e.cleared || e.im.Version < 3 {
		e.cleared = true
		return nil
	}
	var b [8]byte
	if err := readFull(e.f, b[:], 88); err != nil {
		return err
	}
	if binary.BigEndian.Uint64(b[:]) != 0 {
		clear(b[:])
		if _, err := e.f.WriteAt(b[:], 88); err != nil {
			return err
		}
		if err := e.f.Sync(); err != nil {
			return err
		}
	}
	e.cleared = true
	return nil
}

// allocCluster takes the next free cluster at the end of the file and sets
// its refcount to 1, allocating the refcount block that covers it (placed
// at the end of the file, where it covers itself) when there is none.
func (e *Editor) allocCluster() (int64, error) {
	const maxSkip = 4096
	skipped := 0
	for {
		h := e.end
		ti, bi := h/e.cs/e.rbEntries, h/e.cs%e.rbEntries
		if ti >= int64(len(e.rt)) {
			if err := e.growTable(ti + 1); err != nil {
				return 0, err
			}
			continue
		}
		if e.rt[ti] == 0 {
			blk := make([]byte, e.cs)
			setRefcount(blk, bi, e.im.RefcountBits, 1)
			if _, err := e.f.WriteAt(blk, h); err != nil {
				return 0, err
			}
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], uint64(h))
			if _, err := e.f.WriteAt(b[:], e.rtOff+ti*8); err != nil {
				return 0, err
			}
			e.rt[ti] = uint64(h)
			e.rb[ti] = blk
			e.im.meta = append(e.im.meta, span{h, h + e.cs, "refcount block"})
			e.grow(h + e.cs)
			continue
		}
		blk, err := e.block(ti)
		if err != nil {
			return 0, err
		}
		if getRefcount(blk, bi, e.im.RefcountBits) != 0 {
			// Counted past the end of the file (left by a crash): skip it,
			// but not without bound on a hostile image.
			if skipped++; skipped > maxSkip {
				return 0, corruptf("refcounts claim %d clusters past the end of the file at %#x", skipped, h)
			}
			e.grow(h + e.cs)
			continue
		}
		if err := e.setRef(ti, bi, 1); err != nil {
			return 0, err
		}
		e.grow(h + e.cs)
		return h, nil
	}
}

// growTable moves the refcount table to the end of the file with room
// for at least need entries (twice its size or more). The new table is
// followed by the refcount blocks that the table and those blocks need,
// all counted before the header points at the new table; the old table's
// clusters are released once it does.
func (e *Editor) growTable(need int64) error {
	cs, per := e.cs, e.rbEntries
	at := e.end
	n := max(int64(len(e.rt))*8*2, need*8)
	tc := ceilDiv(n, cs) // table clusters
	var nb int64         // new refcount blocks after the table
	var missing []int64  // their table indexes
	for {
		end := at + (tc+nb)*cs
		missing = missing[:0]
		for ti := at / cs / per; ti <= (end-1)/cs/per; ti++ {
			if ti >= int64(len(e.rt)) || e.rt[ti] == 0 {
				missing = append(missing, ti)
			}
		}
		last := (end - 1) / cs / per
		if need := ceilDiv((last+1)*8, cs); need > tc {
			tc = need
			continue
		}
		if int64(len(missing)) == nb {
			break
		}
		nb = int64(len(missing))
	}
	if tc*cs > maxRefTableBytes {
		return unsupportedf("refcount table of %d clusters above qemu's limit", tc)
	}
	end := at + (tc+nb)*cs
	rt := make([]uint64, tc*cs/8)
	copy(rt, e.rt)
	blocks := map[int64][]byte{}
	for k, ti := range missing {
		rt[ti] = uint64(at + (tc+int64(k))*cs)
		blocks[ti] = make([]byte, cs)
	}
	// Refcount 1 for every new cluster, in new or existing blocks.
	for h := at; h < end; h += cs {
		ti, bi := h/cs/per, h/cs%per
		if b, ok := blocks[ti]; ok {
			setRefcount(b, bi, e.im.RefcountBits, 1)
			continue
		}
		if err := e.setRef(ti, bi, 1); err != nil {
			return err
		}
	}
	for ti, b := range blocks {
		if _, err := e.f.WriteAt(b, int64(rt[ti])); err != nil {
			return err
		}
	}
	raw := make([]byte, tc*cs)
	for i, v := range rt {
		binary.BigEndian.PutUint64(raw[i*8:], v)
	}
	if _, err := e.f.WriteAt(raw, at); err != nil {
		return err
	}
	if err := e.f.Sync(); err != nil {
		return err
	}
	var hdr [12]byte
	binary.BigEndian.PutUint64(hdr[0:], uint64(at))
	binary.BigEndian.PutUint32(hdr[8:], uint32(tc))
	if _, err := e.f.WriteAt(hdr[:], 48); err != nil {
		return err
	}
	if err := e.f.Sync(); err != nil {
		return err
	}
	oldOff, oldClusters := e.rtOff, int64(len(e.rt))*8/cs
	e.rt, e.rtOff = rt, at
	for ti, b := range blocks {
		e.rb[ti] = b
	}
	e.im.meta = append(e.im.meta, span{at, end, "refcount table and blocks"})
	e.grow(end)
	// Nothing references the old table any more.
	for h := oldOff; h < oldOff+oldClusters*cs; h += cs {
		if err := e.setRef(h/cs/per, h/cs%per, 0); err != nil {
			return err
		}
	}
	return nil
}

func (e *Editor) grow(end int64) {
	e.end = end
	e.im.fileSize = max(e.im.fileSize, end)
}

func (e *Editor) block(ti int64) ([]byte, error) {
	if b, ok := e.rb[ti]; ok {
		return b, nil
	}
	b := make([]byte, e.cs)
	if err := readFull(e.f, b, int64(e.rt[ti])); err != nil {
		return nil, err
	}
	e.rb[ti] = b
	return b, nil
}

// setRef sets refcount entry bi of block ti and writes the bytes holding it.
func (e *Editor) setRef(ti, bi int64, v uint64) error {
	blk, err := e.block(ti)
	if err != nil {
		return err
	}
	bits := e.im.RefcountBits
	setRefcount(blk, bi, bits, v)
	lo := bi * int64(bits) / 8
	n := max(int64(bits)/8, 1)
	_, err = e.f.WriteAt(blk[lo:lo+n], int64(e.rt[ti])+lo)
	return err
}

// getRefcount reads entry i of a refcount block of bits-wide entries
// (big-endian; narrower than a byte, least significant bits first).
func getRefcount(blk []byte, i int64, bits int) uint64 {
	if bits >= 8 {
		w := int64(bits / 8)
		var v uint64
		for _, c := range blk[i*w : i*w+w] {
			v = v<<8 | uint64(c)
		}
		return v
	}
	bit := i * int64(bits)
	return uint64(blk[bit/8]>>(bit%8)) & (1<<bits - 1)
}

func setRefcount(blk []byte, i int64, bits int, v uint64) {
	if bits >= 8 {
		w := int64(bits / 8)
		for k := w - 1; k >= 0; k-- {
			blk[i*w+k] = byte(v)
			v >>= 8
		}
		return
	}
	bit := i * int64(bits)
	mask := byte(1<<bits-1) << (bit % 8)
	blk[bit/8] = blk[bit/8]&^mask | byte(v)<<(bit%8)&mask
}

// Flush makes everything written so far durable and consistent: it syncs
// the data and refcounts, writes the changed L2 tables, syncs, writes the
// changed L1 entries, syncs, and only then drops the refcounts of the
// clusters new entries replaced.
func (e *Editor) Flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.flush()
}

func (e *Editor) flush() error {
	if err := e.f.Sync(); err != nil {
		return err
	}
	if len(e.l2Dirty) == 0 && len(e.frees) == 0 {
		return nil
	}
	for i := range e.l2Dirty {
		if _, err := e.f.WriteAt(e.l2[i], int64(e.im.l1[i])); err != nil {
			return err
		}
	}
	if len(e.l1Dirty) > 0 {
		if err := e.f.Sync(); err != nil {
			return err
		}
		var b [8]byte
		for i := range e.l1Dirty {
			binary.BigEndian.PutUint64(b[:], e.l1Raw[i])
			if _, err := e.f.WriteAt(b[:], e.l1Off+i*8); err != nil {
				return err
			}
		}
	}
	if err := e.f.Sync(); err != nil {
		return err
	}
	e.l2Clean += int64(len(e.l2Dirty)) * e.cs
	clear(e.l2Dirty)
	clear(e.l1Dirty)
	e.pending = 0
	if len(e.frees) == 0 {
		return nil
	}
	for _, h := range e.frees {
		ti, bi := h/e.cs/e.rbEntries, h/e.cs%e.rbEntries
		if ti >= int64(len(e.rt)) || e.rt[ti] == 0 {
			return corruptf("released cluster %#x has no refcount block", h)
		}
		blk, err := e.block(ti)
		if err != nil {
			return err
		}
		v := getRefcount(blk, bi, e.im.RefcountBits)
		if v == 0 {
			return corruptf("released cluster %#x already has refcount 0", h)
		}
		if err := e.setRef(ti, bi, v-1); err != nil {
			return err
		}
	}
	e.frees = e.frees[:0]
	return e.f.Sync()
}
