package qcow2

// Changing the virtual size, as qemu-img resize does (block/qcow2.c
// qcow2_co_truncate, qcow2_grow_l1_table, qcow2_shrink_l1_table), in an
// order that a crash at any point leaves an image of the old or the new
// size, with at worst leaked clusters.

import (
	"encoding/binary"
	"fmt"
)

// Resize sets the virtual size to size bytes, a multiple of 512.
//
// Growing: first, mappings left beyond the old size (by an interrupted
// shrink, say) are dropped, as they are invisible until the size changes.
// If the new size needs more L1 entries than the L1 table holds, a new
// table (the old entries, then zeros) is written at the end of the file
// and synced; then one write of the header's size, l1_size and
// l1_table_offset fields (bytes 24 to 47, inside the first sector) commits
// the new size, and is synced; only then is the old table's refcount
// dropped. A table with room for the new entries stays where it is (the
// entries it gains are zeroed first). The new range is unallocated and
// reads as zeros, except for the tail of a last cluster the old size cut
// (see [Editor.Lookup]): its host bytes are whatever was stored there, which
// the caller overwrites before calling Resize if it matters.
//
// Shrinking: the header's size is written and synced first (the commit
// point; the L1 table keeps its size, as qemu leaves it), then the L2
// entries of clusters wholly beyond the new size are cleared and the L2
// tables wholly beyond it unlinked (L2 tables, sync, L1 entries, sync), then
// the clusters they referenced are released, and the file is cut after the
// last cluster still in use. The data of those clusters is gone; the
// caller decides whether that is allowed ([Editor.Lookup] tells what is
// stored there).
//
// Pending allocations are flushed first. The image must be clean (dirty
// bit clear); its autoclear bits are cleared as for any change. The
// Editor stays usable with the new size.
func (e *Editor) Resize(size int64, truncate func(int64) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	im := e.im
	if size < 0 || size%512 != 0 || size > 1<<62 {
		return fmt.Errorf("qcow2: virtual size %d is not a non-negative multiple of 512", size)
	}
	need := ceilDiv(ceilDiv(size, e.cs), im.l2Entries)
	if need > maxL1Bytes/8 {
		return unsupportedf("virtual size %d needs %d L1 entries, above qemu's limit of %d", size, need, maxL1Bytes/8)
	}
	if im.Dirty {
		return unsupportedf("resizing a dirty image (run qemu-img check -r all)")
	}
	if err := e.flush(); err != nil {
		return err
	}
	if size == im.Size {
		return nil
	}
	if err := e.clearAutoclear(); err != nil {
		return err
	}
	var hdr [48]byte
	if err := readFull(e.f, hdr[:], 0); err != nil {
		return err
	}
	be := binary.BigEndian
	l1Size := int64(be.Uint32(hdr[36:]))
	if size > im.Size {
		return e.growTo(size, need, l1Size, hdr)
	}
	return e.shrinkTo(size, need, truncate, hdr)
}

func (e *Editor) growTo(size, need, l1Size int64, hdr [48]byte) error {
	im, cs, be := e.im, e.cs, binary.BigEndian
	// Entries the table holds past those the old size used must be empty
	// before the size makes them count.
	if err := e.loadL1(min(l1Size, need)); err != nil {
		return err
	}
	if err := e.dropBeyond(im.Size); err != nil {
		return err
	}
	oldOff := e.l1Off
	oldClusters := ceilDiv(l1Size*8, cs)
	newOff := oldOff
	if need > l1Size {
		if l1Size > 0 && ceilDiv(need*8, cs) <= oldClusters {
			// Room in the table's clusters: clear what lies past l1_size.
			if err := e.zeroL1(l1Size, need); err != nil {
				return err
			}
		} else {
			n := ceilDiv(need*8, cs)
			off, err := e.allocRun(n)
			if err != nil {
				return err
			}
			raw := make([]byte, n*cs)
			for i, v := range e.l1Raw {
				be.PutUint64(raw[i*8:], v)
			}
			if _, err := e.f.WriteAt(raw, off); err != nil {
				return err
			}
			newOff = off
		}
		if err := e.f.Sync(); err != nil {
			return err
		}
	}
	be.PutUint64(hdr[24:], uint64(size))
	be.PutUint32(hdr[36:], uint32(max(need, l1Size)))
	be.PutUint64(hdr[40:], uint64(newOff))
	if err := e.commitHeader(hdr); err != nil {
		return err
	}
	e.setGeometry(size, need)
	if newOff == oldOff {
		return nil
	}
	e.l1Off = newOff
	if l1Size > 0 {
		e.removeSpan(oldOff)
	}
	e.im.meta = mergeSpans(e.im.meta, []span{{newOff, newOff + ceilDiv(need*8, cs)*cs, "l1 table"}})
	if l1Size == 0 {
		return nil
	}
	// Nothing references the old table any more.
	for h := oldOff; h < oldOff+oldClusters*cs; h += cs {
		if err := e.setRef(h/cs/e.rbEntries, h/cs%e.rbEntries, 0); err != nil {
			return err
		}
	}
	return e.f.Sync()
}

func (e *Editor) shrinkTo(size, need int64, truncate func(int64) error, hdr [48]byte) error {
	be := binary.BigEndian
	be.PutUint64(hdr[24:], uint64(size))
	if err := e.commitHeader(hdr); err != nil {
		return err
	}
	// The mappings past the new size are invisible now; drop them.
	if err := e.dropBeyond(size); err != nil {
		return err
	}
	e.setGeometry(size, need)
	if truncate == nil {
		return nil
	}
	last, err := e.lastUsed()
	if err != nil {
		return err
	}
	if end := (last + 1) * e.cs; end < e.im.fileSize {
		if err := truncate(end); err != nil {
			return err
		}
		if err := e.f.Sync(); err != nil {
			return err
		}
		e.im.fileSize, e.end = end, end
	}
	return nil
}

// commitHeader writes the size and L1 fields of the header, bytes 24 to
// 47, in one write, and syncs.
func (e *Editor) commitHeader(hdr [48]byte) error {
	if _, err := e.f.WriteAt(hdr[24:48], 24); err != nil {
		return err
	}
	return e.f.Sync()
}

// setGeometry makes the in-memory image the one of the new size, whose L1
// table has at least need entries (all loaded).
func (e *Editor) setGeometry(size, need int64) {
	im := e.im
	im.Size = size
	im.l1Needed = need
	for int64(len(im.l1)) < need {
		im.l1 = append(im.l1, 0)
		e.l1Raw = append(e.l1Raw, 0)
	}
	im.l1, e.l1Raw = im.l1[:need], e.l1Raw[:need]
}

// loadL1 reads and validates the on-disk L1 entries from those loaded up
// to n (within the table), as Open does for the entries the size needs.
func (e *Editor) loadL1(n int64) error {
	have := int64(len(e.l1Raw))
	if n <= have {
		return nil
	}
	raw := make([]byte, (n-have)*8)
	if err := readFull(e.f, raw, e.l1Off+have*8); err != nil {
		return err
	}
	be := binary.BigEndian
	for k := int64(0); k < n-have; k++ {
		v := be.Uint64(raw[k*8:])
		off := int64(v & offsetMask)
		if v&l1ReservedMask != 0 {
			return corruptf("l1 entry %d (%#x) has reserved bits set", have+k, v)
		}
		if off != 0 {
			if off%e.cs != 0 || !inFile(off, e.cs, e.im.fileSize) {
				return corruptf("l2 table offset %#x not cluster aligned or beyond end of file", off)
			}
			if s, ok := overlaps(e.im.meta, off, off+e.cs); ok {
				return corruptf("l2 table at %#x overlaps the %s at %#x", off, s.what, s.off)
			}
		}
		e.im.l1 = append(e.im.l1, uint64(off))
		e.l1Raw = append(e.l1Raw, v)
	}
	return nil
}

// zeroL1 clears the on-disk L1 entries [from, to) that are not zero.
func (e *Editor) zeroL1(from, to int64) error {
	raw := make([]byte, (to-from)*8)
	if err := readFull(e.f, raw, e.l1Off+from*8); err != nil {
		return err
	}
	for _, b := range raw {
		if b != 0 {
			clear(raw)
			_, err := e.f.WriteAt(raw, e.l1Off+from*8)
			return err
		}
	}
	return nil
}

// dropBeyond unmaps every guest cluster that lies wholly at or after size
// among the loaded L1 entries: their L2 entries are cleared (a table wholly
// beyond is unlinked from L1 instead), written in the Editor's flush
// order, and then the host clusters they referenced are released.
func (e *Editor) dropBeyond(size int64) error {
	im, cs := e.im, e.cs
	first := ceilDiv(size, cs) // first guest cluster wholly beyond
	for i := range int64(len(im.l1)) {
		if im.l1[i] == 0 || (i+1)*im.l2Entries <= first {
			continue
		}
		t, err := e.table(i)
		if err != nil {
			return err
		}
		whole := i*im.l2Entries >= first
		for j := max(0, first-i*im.l2Entries); j < im.l2Entries; j++ {
			ent := t[j*im.l2Bytes : (j+1)*im.l2Bytes]
			v := binary.BigEndian.Uint64(ent)
			if v == 0 && (!im.ExtendedL2 || binary.BigEndian.Uint64(ent[8:]) == 0) {
				continue
			}
			var l extentList
			g := (i*im.l2Entries + j) * cs
			if err := im.addCluster(&l, ent, g, cs); err != nil {
				return fmt.Errorf("%w (guest offset %#x)", err, g)
			}
			if off := int64(v & offsetMask); v&flagCompressed == 0 && off != 0 {
				if err := im.checkData(off, cs); err != nil {
					return err
				}
			}
			e.release(v)
			if !whole {
				clear(ent)
				e.markDirty(i)
			}
		}
		if whole {
			e.frees = append(e.frees, int64(im.l1[i]))
			if !e.l2Dirty[i] {
				e.l2Clean -= cs
			}
			delete(e.l2, i)
			delete(e.l2Dirty, i)
			e.removeSpan(int64(im.l1[i]))
			im.l1[i], e.l1Raw[i] = 0, 0
			e.l1Dirty[i] = true
		}
	}
	return e.flush()
}

// allocRun allocates n clusters contiguous on the host (a refcount block
// placed between them makes it start again after it).
func (e *Editor) allocRun(n int64) (int64, error) {
	var run []int64
	for int64(len(run)) < n {
		h, err := e.allocCluster()
		if err != nil {
			return 0, err
		}
		if len(run) > 0 && h != run[len(run)-1]+e.cs {
			for _, r := range run {
				if err := e.setRef(r/e.cs/e.rbEntries, r/e.cs%e.rbEntries, 0); err != nil {
					return 0, err
				}
			}
			run = run[:0]
		}
		run = append(run, h)
	}
	return run[0], nil
}

// lastUsed returns the index of the last host cluster with a refcount.
func (e *Editor) lastUsed() (int64, error) {
	for ti := int64(len(e.rt)) - 1; ti >= 0; ti-- {
		if e.rt[ti] == 0 {
			continue
		}
		blk, err := e.block(ti)
		if err != nil {
			return 0, err
		}
		for bi := e.rbEntries - 1; bi >= 0; bi-- {
			if getRefcount(blk, bi, e.im.RefcountBits) != 0 {
				return ti*e.rbEntries + bi, nil
			}
		}
	}
	return 0, nil // cluster 0, the header
}

// removeSpan drops the metadata span that starts at off.
func (e *Editor) removeSpan(off int64) {
	m := e.im.meta[:0]
	for _, s := range e.im.meta {
		if s.off != off {
			m = append(m, s)
		}
	}
	e.im.meta = m
}
