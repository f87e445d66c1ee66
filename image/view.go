package image

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
)

var (
	// ErrReadOnly reports a write to a view opened read-only.
	ErrReadOnly = errors.New("image view is read-only")
	// ErrBeyondEnd reports a write that would reach past the virtual
	// size: views never grow.
	ErrBeyondEnd = errors.New("write beyond the end of the image")
	// ErrClosed reports use of a view after Close.
	ErrClosed = errors.New("image view is closed")
)

// View is the plaintext of an encrypted image, read and written in place:
// every byte is decrypted when read and encrypted when written, so no
// plaintext reaches the disk. Offsets and lengths need no alignment; a
// write that covers part of a 512-byte sector rewrites the whole sector.
//
// ReadAt follows os.File: it returns io.EOF only when it reads fewer bytes
// than asked because the end of the image was reached. WriteAt refuses to
// write past Size with ErrBeyondEnd (nothing is written). Implementations
// are safe for concurrent use: overlapping requests are serialised per
// sector range, so two read-modify-writes of one sector never lose an
// update.
type View interface {
	io.ReaderAt
	io.WriterAt
	// Size is the virtual (plaintext) size in bytes.
	Size() int64
	// Sync flushes written data to stable storage.
	Sync() error
	// Close flushes a writable view and releases it; the file given to
	// View stays open and belongs to the caller, as does the key.
	Close() error
}

// View opens the plaintext of the image in f (the file e was read from)
// with an unlocked key. A read-only view refuses writes with ErrReadOnly;
// f must be open for writing otherwise.
func (e *Encrypted) View(f *os.File, k *Key, readOnly bool) (View, error) {
	if k == nil || k.Cipher == nil {
		panic("image: View with a nil key")
	}
	return e.c.view(f, k, readOnly)
}

// KeyFromVolume builds a Key from a raw volume key, checked against the
// header's master key digest; a key that does not match gives
// header.ErrNoMatchingKeyslot. It lets a process that already unlocked the
// image hand the key to another (cryptimg open --background) without a
// second PBKDF2 run. vk is copied; the caller clears its own copy.
func (e *Encrypted) KeyFromVolume(vk []byte, slot int) (*Key, error) {
	if !e.Header.VerifyVolumeKey(vk) {
		return nil, fmt.Errorf("volume key does not match the header: %w", header.ErrNoMatchingKeyslot)
	}
	return newKey(e.Header, bytes.Clone(vk), slot)
}

const (
	// viewChunk bounds the bounce buffer of one step of a request; FUSE
	// sends at most 1 MiB per request, so one step usually does it all.
	viewChunk = 1 << 20
	// lockBlock is the span of one lock stripe slot. Requests lock every
	// stripe their blocks map to, in index order, so they cannot deadlock.
	lockBlock   = 64 << 10
	lockStripes = 256
)

// rawView is the View of a raw LUKS image: plaintext offset off lives at
// file offset base+off and is sector off/512 for the IV.
type rawView struct {
	viewCore
	store sectorStore
	ss    int64 // the cipher's sector size: the unit of read-modify-write
}

// sectorStore is where a rawView's sectors live and how they are
// transformed: plainly at an offset (plainStore), or with tags in a
// dm-integrity layout (authStore).
type sectorStore interface {
	// readSectors reads and decrypts whole sectors starting at
	// plaintext offset s into buf.
	readSectors(buf []byte, s int64) error
	// writeSectors encrypts the whole sectors src, at plaintext offset
	// s, into buf (as long as src, or src itself) and writes them.
	writeSectors(buf, src []byte, s int64) error
}

func newRawView(f *os.File, c cipher.Sector, base, size int64, readOnly bool) *rawView {
	return newStoreView(f, plainStore{f: f, c: c, base: base}, c.Geometry().SectorSize, size, readOnly)
}

func newStoreView(f *os.File, st sectorStore, sectorSize int, size int64, readOnly bool) *rawView {
	v := &rawView{store: st, ss: int64(sectorSize)}
	v.viewCore = viewCore{size: size, readOnly: readOnly, flush: f.Sync}
	v.bufs.size = viewChunk + 2*int(v.ss)
	return v
}

// plainStore keeps plaintext offset off at file offset base+off, sector
// off/512 for the IV.
type plainStore struct {
	f    readWriterAt // the image file, or a checked reader (ViewOver)
	c    cipher.Sector
	base int64
}

// viewCore is what both views share: the size, the mode, the stripe locks,
// the bounce buffers, and how to flush.
type viewCore struct {
	size     int64
	readOnly bool
	flush    func() error // makes writes durable: fsync, or the qcow2 metadata
	closed   atomic.Bool
	locks    [lockStripes]sync.RWMutex
	bufs     bouncePool
}

func (v *viewCore) Size() int64 { return v.size }

// lock takes the stripes covering [off, end) and returns their release.
func (v *viewCore) lock(off, end int64, write bool) func() {
	return lockStripeSet(&v.locks, off, end, write)
}

// startRead begins a read of len(p) bytes at off: it returns how many
// bytes lie within the view, and, when that is not zero, a bounce buffer
// and done, which releases it and the stripe locks. An offset at or past
// the end gives io.EOF (unless p is empty).
func (v *viewCore) startRead(p []byte, off int64) (n int64, bb *bounce, done func(), err error) {
	switch {
	case off < 0:
		return 0, nil, nil, fmt.Errorf("image: negative offset %d", off)
	case off >= v.size && len(p) > 0:
		return 0, nil, nil, io.EOF
	}
	n = max(0, min(int64(len(p)), v.size-off))
	if n == 0 {
		return 0, nil, nil, nil
	}
	bb, unlock, err := v.enter(off, n, false)
	if err != nil {
		return 0, nil, nil, err
	}
	return n, bb, func() { v.bufs.put(bb); unlock() }, nil
}

// enter takes the stripe locks of [off, off+n) and a bounce buffer, unless
// the view is closed; unlock releases the locks only.
func (v *viewCore) enter(off, n int64, write bool) (bb *bounce, unlock func(), err error) {
	unlock = v.lock(off, off+n, write)
	if v.closed.Load() {
		unlock()
		return nil, nil, ErrClosed
	}
	return v.bufs.get(), unlock, nil
}

// startWrite begins a write of len(p) bytes at off, which must lie inside
// the view (views never grow): it returns len(p) and, when that is not
// zero, a bounce buffer and done, which releases it and the stripe locks.
// A write that failed may have left plaintext in the buffer (merged partial
// sectors, or clusters being allocated); one that succeeded left only
// ciphertext. done clears the buffer in the first case.
func (v *viewCore) startWrite(p []byte, off int64) (n int64, bb *bounce, done func(failed bool), err error) {
	n = int64(len(p))
	if err := checkWrite(v.readOnly, off, n, v.size); err != nil || n == 0 {
		return 0, nil, nil, err
	}
	bb, unlock, err := v.enter(off, n, true)
	if err != nil {
		return 0, nil, nil, err
	}
	return n, bb, func(failed bool) {
		bb.plain = bb.plain || failed
		v.bufs.put(bb)
		unlock()
	}, nil
}

func (v *viewCore) Sync() error {
	if v.closed.Load() {
		return ErrClosed
	}
	if v.readOnly {
		return nil
	}
	return v.flush()
}

// Close waits for requests in flight, then flushes a writable view.
func (v *viewCore) Close() error {
	unlock := v.lock(0, lockBlock*lockStripes, true)
	defer unlock()
	if v.closed.Swap(true) {
		return ErrClosed
	}
	if v.readOnly {
		return nil
	}
	return v.flush()
}

// bounce is a view's step buffer. Plaintext passes through it on unaligned
// reads, and on writes until they are encrypted; put clears a buffer that
// may still hold some, so that none is left in pooled memory.
type bounce struct {
	b     []byte
	plain bool // may hold plaintext
}

// bouncePool pools the bounce buffers of one view.
type bouncePool struct {
	size int
	pool sync.Pool
}

func (p *bouncePool) get() *bounce {
	if bb, ok := p.pool.Get().(*bounce); ok {
		return bb
	}
	return &bounce{b: make([]byte, p.size)}
}

func (p *bouncePool) put(bb *bounce) {
	if bb.plain {
		clear(bb.b)
		bb.plain = false
	}
	p.pool.Put(bb)
}

// lockStripeSet takes the stripes of locks covering [off, end), in index
// order, and returns their release.
func lockStripeSet(locks *[lockStripes]sync.RWMutex, off, end int64, write bool) func() {
	first, last := off/lockBlock, (end-1)/lockBlock
	var mark [lockStripes]bool
	if last-first+1 >= lockStripes {
		for i := range mark {
			mark[i] = true
		}
	} else {
		for b := first; b <= last; b++ {
			mark[b%lockStripes] = true
		}
	}
	for i, m := range mark {
		if !m {
			continue
		}
		if write {
			locks[i].Lock()
		} else {
			locks[i].RLock()
		}
	}
	return func() {
		for i, m := range mark {
			if !m {
				continue
			}
			if write {
				locks[i].Unlock()
			} else {
				locks[i].RUnlock()
			}
		}
	}
}

func (v *rawView) ReadAt(p []byte, off int64) (int, error) {
	n, bb, done, err := v.startRead(p, off)
	if n == 0 {
		return 0, err
	}
	defer done()
	end := off + n
	for pos := off; pos < end; {
		// One step: the sectors from pos's sector up to viewChunk bytes.
		s := pos &^ (v.ss - 1)
		e := min(s+viewChunk, (end+v.ss-1)&^(v.ss-1))
		stepEnd := min(e, end)
		aligned := s == pos && e == stepEnd
		buf := bb.b[:e-s]
		if aligned {
			// Decrypt in the caller's buffer: no copy.
			buf = p[pos-off : stepEnd-off]
		} else {
			bb.plain = true
		}
		err := split(len(buf), func(lo, hi int) error { return v.store.readSectors(buf[lo:hi], s+int64(lo)) })
		if err != nil {
			return int(pos - off), err
		}
		if !aligned {
			copy(p[pos-off:stepEnd-off], buf[pos-s:])
		}
		pos = stepEnd
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

func (v plainStore) readSectors(buf []byte, s int64) error {
	if _, err := v.f.ReadAt(buf, v.base+s); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("image: %w", ErrTruncated)
		}
		return err
	}
	return v.c.DecryptSectors(buf, buf, rawIV(s))
}

// parallelMin is the request size from which the cipher work of one
// request is split across CPUs: a FUSE client such as dd sends one 1 MiB
// request at a time, and only splitting it uses more than one core.
const parallelMin = 256 << 10

// splitCrypt enables the split; benchmarks turn it off for a baseline.
var splitCrypt = true

// split runs fn over [0, n) in sector-aligned parts, one per CPU, when n
// is large enough to be worth it; each part does its own I/O and cipher
// work, so copies into and out of the page cache run in parallel too.
//
// Each part is handed to fn in steps of at most cacheStep bytes, so that
// what one step reads, transforms and writes stays in the CPU's L2 cache:
// a 1 MiB request in one step ran the cipher at a third of its speed.
func split(n int, fn func(lo, hi int) error) error {
	parts := min(runtime.GOMAXPROCS(0), n/(parallelMin/2))
	if !splitCrypt || n < parallelMin || parts < 2 {
		return steps(0, n, fn)
	}
	// Parts start on 4096-byte boundaries, which no sector size crosses.
	per := (n/splitAlign + parts - 1) / parts * splitAlign
	errs := make(chan error, parts)
	var wg sync.WaitGroup
	for lo := per; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Go(func() { errs <- steps(lo, hi, fn) })
	}
	err := steps(0, per, fn)
	wg.Wait()
	close(errs)
	for e := range errs {
		err = cmp.Or(err, e)
	}
	return err
}

// splitAlign is where split may cut: the largest sector size.
const splitAlign = 4096

// cacheStep is the largest range split hands to fn at once.
const cacheStep = 128 << 10

// steps calls fn over [lo, hi) in consecutive ranges of at most cacheStep
// bytes, stopping at the first error.
func steps(lo, hi int, fn func(lo, hi int) error) error {
	for a := lo; a < hi; a += cacheStep {
		if err := fn(a, min(a+cacheStep, hi)); err != nil {
			return err
		}
	}
	return nil
}

// checkWrite validates a write of n bytes at off into a view of size
// bytes: views never grow.
func checkWrite(readOnly bool, off, n, size int64) error {
	switch {
	case readOnly:
		return ErrReadOnly
	case off < 0:
		return fmt.Errorf("image: negative offset %d", off)
	case off > size || n > size-off:
		return fmt.Errorf("%w: %d bytes at offset %d, size %d", ErrBeyondEnd, n, off, size)
	}
	return nil
}

func (v *rawView) WriteAt(p []byte, off int64) (_ int, err error) {
	n, bb, done, err := v.startWrite(p, off)
	if n == 0 {
		return 0, err
	}
	defer func() { done(err != nil) }()
	end := off + n
	for pos := off; pos < end; {
		s := pos &^ (v.ss - 1)
		e := min(s+viewChunk, (end+v.ss-1)&^(v.ss-1))
		stepEnd := min(e, end)
		buf := bb.b[:e-s]
		// Partial first or last sector: read-modify-write. The stripe
		// locks cover every sector of the request, so no other write can
		// slip in between the read and the write.
		if pos > s {
			if err := v.store.readSectors(buf[:v.ss], s); err != nil {
				return int(pos - off), err
			}
		}
		if stepEnd < e && (e-v.ss > s || pos == s) {
			if err := v.store.readSectors(buf[int64(len(buf))-v.ss:], e-v.ss); err != nil {
				return int(pos - off), err
			}
		}
		src := buf
		if pos == s && stepEnd == e {
			src = p[pos-off : stepEnd-off]
		} else {
			copy(buf[pos-s:], p[pos-off:stepEnd-off])
		}
		err := split(len(buf), func(lo, hi int) error { return v.store.writeSectors(buf[lo:hi], src[lo:hi], s+int64(lo)) })
		if err != nil {
			return int(pos - off), err
		}
		pos = stepEnd
	}
	return int(n), nil
}

func (v plainStore) writeSectors(buf, src []byte, s int64) error {
	if err := v.c.EncryptSectors(buf, src, rawIV(s)); err != nil {
		return err
	}
	_, err := v.f.WriteAt(buf, v.base+s)
	return err
}
