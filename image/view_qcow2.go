package image

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// qcowView is the View of a qcow2+LUKS image. Guest offsets map to host
// clusters through the qcow2 tables; an allocated 512-byte sector at host
// offset h is encrypted with IV sector h/512. Unallocated and zero
// clusters read as zeros, compressed clusters (plaintext, as qemu writes
// them) are inflated. The first write to a cluster that is not stored in
// place gives it a fresh host cluster holding the whole cluster encrypted:
// its old content (zeros, the inflated data or the shared cluster's data)
// with the new bytes over it.
type qcowView struct {
	viewCore
	f     *os.File
	c     cipher.Sector
	ed    *qcow2.Editor
	cs    int64
	alloc sync.Mutex // serialises allocations (and their re-checks)
}

// newQcowView is the view of the qcow2+LUKS image f (qcowContainer.view).
func newQcowView(f *os.File, c cipher.Sector, fileSize int64, readOnly bool) (*qcowView, error) {
	ed, err := qcow2.OpenEdit(f, fileSize)
	if err != nil {
		return nil, err
	}
	im := ed.Image() // a qcow2+LUKS image: its container found the LUKS area
	if im.Dirty && !readOnly {
		// Refuse now rather than fail the first write that allocates.
		return nil, fmt.Errorf("%w: the image is marked dirty (a qemu that used lazy refcounts did not close it), so its refcounts may be stale; repair it with qemu-img check -r all, or open it read-only", qcow2.ErrUnsupported)
	}
	v := &qcowView{f: f, c: c, ed: ed, cs: im.ClusterSize}
	// Sync and Close flush the qcow2 metadata of allocations, in qemu's
	// order, after the data.
	v.viewCore = viewCore{size: im.Size, readOnly: readOnly, flush: ed.Flush}
	v.bufs.size = int(max(viewChunk, im.ClusterSize) + 2*SectorSize)
	return v, nil
}

func (v *qcowView) ReadAt(p []byte, off int64) (int, error) {
	n, bb, done, err := v.startRead(p, off)
	if n == 0 {
		return 0, err
	}
	defer done()
	end := off + n
	for pos := off; pos < end; {
		m, err := v.ed.Lookup(pos, min(end-pos, viewChunk))
		if err != nil {
			return int(pos - off), err
		}
		stepEnd := min(end, m.GuestOffset+m.Length, pos+viewChunk)
		dst := p[pos-off : stepEnd-off]
		switch m.Kind {
		case qcow2.Data:
			err = v.readData(dst, m, pos, bb)
		case qcow2.Compressed:
			bb.plain = true
			buf := bb.b[:v.cs]
			if err = v.ed.ReadCompressed(m.Extent, buf); err == nil {
				copy(dst, buf[pos-m.GuestOffset:])
			}
		default:
			clear(dst)
		}
		if err != nil {
			return int(pos - off), err
		}
		pos = stepEnd
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readData reads the guest bytes [pos, pos+len(dst)) of the host-contiguous
// Data mapping m into dst, through bb when they are not whole sectors.
func (v *qcowView) readData(dst []byte, m qcow2.Mapping, pos int64, bb *bounce) error {
	end := pos + int64(len(dst))
	s := pos &^ (SectorSize - 1)
	e := (end + SectorSize - 1) &^ (SectorSize - 1)
	host := m.HostOffset + s - m.GuestOffset
	b := bb.b[:e-s]
	aligned := s == pos && e == end
	if aligned {
		b = dst
	} else {
		bb.plain = true
	}
	err := split(len(b), func(lo, hi int) error { return v.readHost(b[lo:hi], host+int64(lo)) })
	if err != nil {
		return err
	}
	if !aligned {
		copy(dst, b[pos-s:])
	}
	return nil
}

// readHost reads and decrypts whole sectors at host offset h.
func (v *qcowView) readHost(b []byte, h int64) error {
	if _, err := v.f.ReadAt(b, h); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image: %w", ErrTruncated)
		}
		return err
	}
	return v.c.DecryptSectors(b, b, qcowIV(h))
}

func (v *qcowView) WriteAt(p []byte, off int64) (_ int, err error) {
	n, bb, done, err := v.startWrite(p, off)
	if n == 0 {
		return 0, err
	}
	defer func() { done(err != nil) }()
	end := off + n
	for pos := off; pos < end; {
		m, err := v.ed.Lookup(pos, min(end-pos, viewChunk))
		if err != nil {
			return int(pos - off), err
		}
		var stepEnd int64
		switch {
		case m.InPlace:
			stepEnd = min(end, m.GuestOffset+m.Length, pos+viewChunk)
			err = v.writeData(p[pos-off:stepEnd-off], m, pos, bb.b)
		case (m.Kind == qcow2.Unallocated || m.Kind == qcow2.Zero) && sectors.IsZero(p[pos-off:min(end, m.GuestOffset+m.Length)-off]):
			// Zeros over clusters that already read as zeros: nothing
			// to store, and the image stays sparse. A request that
			// allocates one of these clusters meanwhile copies its
			// zeros, which is what this write would have left.
			stepEnd = min(end, m.GuestOffset+m.Length)
		default:
			stepEnd, err = v.allocate(p[pos-off:], pos, bb.b)
		}
		if err != nil {
			return int(pos - off), err
		}
		pos = stepEnd
	}
	return int(n), nil
}

// writeData writes src at guest offset pos into the in-place Data mapping
// m, reading and decrypting partial first and last sectors first (the
// stripe locks cover them).
func (v *qcowView) writeData(src []byte, m qcow2.Mapping, pos int64, buf []byte) error {
	end := pos + int64(len(src))
	s := pos &^ (SectorSize - 1)
	e := (end + SectorSize - 1) &^ (SectorSize - 1)
	host := m.HostOffset + s - m.GuestOffset
	b := buf[:e-s]
	if pos > s {
		if err := v.readHost(b[:SectorSize], host); err != nil {
			return err
		}
	}
	if end < e && (e-SectorSize > s || pos == s) {
		if err := v.readHost(b[len(b)-SectorSize:], host+e-SectorSize-s); err != nil {
			return err
		}
	}
	in := b
	if pos == s && end == e {
		in = src
	} else {
		copy(b[pos-s:], src)
	}
	return split(len(b), func(lo, hi int) error {
		if err := v.c.EncryptSectors(b[lo:hi], in[lo:hi], qcowIV(host+int64(lo))); err != nil {
			return err
		}
		_, err := v.f.WriteAt(b[lo:hi], host+int64(lo))
		return err
	})
}

// oldCluster fills dst, one cluster, with the plaintext the guest cluster
// at g holds now: zeros where it reads as zeros or lies past the virtual
// size, its data or its inflated compressed data elsewhere.
func (v *qcowView) oldCluster(dst []byte, g int64) error {
	clear(dst)
	for at := g; at < min(g+int64(len(dst)), v.size); {
		m, err := v.ed.Lookup(at, min(g+int64(len(dst)), v.size)-at)
		if err != nil {
			return err
		}
		stop := min(g+int64(len(dst)), v.size, m.GuestOffset+m.Length)
		switch m.Kind {
		case qcow2.Data:
			if err := v.readHost(dst[at-g:stop-g], m.HostOffset+at-m.GuestOffset); err != nil {
				return err
			}
		case qcow2.Compressed:
			if err := v.ed.ReadCompressed(m.Extent, dst[m.GuestOffset-g:m.GuestOffset-g+v.cs]); err != nil {
				return err
			}
		}
		at = stop
	}
	return nil
}

// allocate writes the start of src at guest offset pos, which maps to
// something not stored in place: the clusters from pos's on that share its
// mapping (at most a buffer's worth) get fresh host clusters, written
// encrypted with their old content (zeros, the inflated data or the shared
// cluster's data) and the new bytes over it before the editor maps them.
// It returns where the write has got to.
func (v *qcowView) allocate(src []byte, pos int64, buf []byte) (int64, error) {
	v.alloc.Lock()
	defer v.alloc.Unlock()
	cs := v.cs
	g0 := pos - pos%cs
	limit := g0 + max(viewChunk, cs)
	end := pos + int64(len(src))
	// Re-check under the lock: another request may have allocated it.
	m, err := v.ed.Lookup(pos, min(end, limit)-pos)
	if err != nil {
		return pos, err
	}
	if m.InPlace {
		return pos, nil // the caller writes it in place
	}
	g1 := min((m.GuestOffset+m.Length+cs-1)/cs*cs, limit, (end+cs-1)/cs*cs)
	stepEnd := min(end, g1)
	plain := buf[:g1-g0]
	lo, hi := pos-g0, stepEnd-g0 // the new bytes, relative to g0
	// full reports whether the cluster at relative offset x is all new
	// bytes: it is encrypted straight from src, with nothing to merge.
	full := func(x int64) bool { return x >= lo && x+cs <= hi }
	for x := int64(0); x < g1-g0; x += cs {
		if full(x) {
			continue
		}
		if err := v.oldCluster(plain[x:x+cs], g0+x); err != nil {
			return pos, err
		}
		if a, b := max(lo, x), min(hi, x+cs); a < b {
			copy(plain[a:b], src[a-lo:b-lo])
		}
	}
	_, err = v.ed.AllocateClusters(g0, int((g1-g0)/cs), func(hosts []int64) error {
		return split(len(plain), func(a, b int) error {
			for x := int64(a); x < int64(b); {
				y := min(int64(b), x-x%cs+cs)
				h := hosts[x/cs] + x%cs
				in := plain[x:y]
				if full(x - x%cs) {
					in = src[x-lo : y-lo]
				}
				if err := v.c.EncryptSectors(plain[x:y], in, qcowIV(h)); err != nil {
					return err
				}
				if _, err := v.f.WriteAt(plain[x:y], h); err != nil {
					return err
				}
				x = y
			}
			return nil
		})
	})
	if err != nil {
		return pos, err
	}
	return stepEnd, nil
}
