package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/sectors"
)

// Authenticated images (LUKS2 with integrity): the payload is a
// dm-integrity device (package integrity) at the segment offset, and each
// of its sectors is encrypted and tagged by the segment's cipher.AuthMode.
// Logical sector N of the device (512-byte units, from 0) is both the
// sector's place in the plaintext and the N of its tag (dm-crypt maps the
// integrity device with offset 0 and iv_offset 0); its ciphertext and its
// tag live where the integrity geometry says, not at PayloadOffset+N*512.

var (
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("integrity check failed")
	// ErrAuthenticatedUnsupported refuses an operation that does not handle
	// authenticated images yet.
	ErrAuthenticatedUnsupported = errors.New("not supported on images with integrity protection")
)

// CorruptError lists sectors whose integrity tags did not match: data or
// tags were changed, or never written. Sectors are 512-byte units of the
// plaintext, the numbers the kernel logs as "INTEGRITY AEAD ERROR, sector
// N". It wraps syscall.EIO too, the error the kernel's reads of such a
// sector return.
type CorruptError struct {
	Sectors []uint64 // sorted; at most MaxReported
	Count   uint64   // how many sectors failed in all
}

// MaxReported bounds CorruptError.Sectors.
const MaxReported = 1000

func (e *CorruptError) Error() string {
	if e.Count == 1 {
		return fmt.Sprintf("integrity check failed at sector %d (byte offset %d)", e.Sectors[0], e.Sectors[0]*512)
	}
	return fmt.Sprintf("integrity check failed in %d sectors, the first at sector %d (byte offset %d)",
		e.Count, e.Sectors[0], e.Sectors[0]*512)
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt || target == syscall.EIO }

// badList collects failed sectors from concurrent transforms.
type badList struct {
	mu    sync.Mutex
	units []uint64
	count uint64
}

func (b *badList) add(units []uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count += uint64(len(units))
	b.units = append(b.units, units...)
	if len(b.units) > 4*MaxReported {
		b.trim()
	}
}

// trim keeps the lowest MaxReported units.
func (b *badList) trim() {
	slices.Sort(b.units)
	b.units = slices.Compact(b.units)
	if len(b.units) > MaxReported {
		b.units = b.units[:MaxReported]
	}
}

// err is the CorruptError of what was collected, or nil.
func (b *badList) err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count == 0 {
		return nil
	}
	b.trim()
	return &CorruptError{Sectors: slices.Clone(b.units), Count: b.count}
}

// authTagMode is the authenticated mode of h's data segment.
func authTagMode(h header.Header) (*cipher.AuthMode, error) {
	i := h.Info()
	m, err := cipher.ParseAuth(i.Cipher, i.Integrity)
	if err != nil {
		return nil, &header.UnsupportedCipherError{Spec: i.Cipher + " with integrity " + i.Integrity}
	}
	return m, nil
}

// refuseAuth refuses an operation that cannot handle authenticated images
// yet, before it changes anything: what names the operation.
func refuseAuth(h header.Header, what string) error {
	if h.Info().Integrity != "" {
		return fmt.Errorf("%s: %w", what, ErrAuthenticatedUnsupported)
	}
	return nil
}

// refuseAuthParams is refuseAuth for a header still to be made.
func refuseAuthParams(p header.Params, what string) error {
	if p.Integrity != "" {
		return fmt.Errorf("%s: %w", what, ErrAuthenticatedUnsupported)
	}
	return nil
}

// Authenticated reports whether the image has integrity protection.
func (e *Encrypted) Authenticated() bool { return e.c != nil && e.c.tagLayout() != nil }

// tagBufs pools the tag buffers of one chunk.
type tagBufs struct{ p sync.Pool }

func (t *tagBufs) get(n int) *[]byte {
	if b, ok := t.p.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func (t *tagBufs) put(b *[]byte) { t.p.Put(b) }

// openTransform verifies and decrypts a chunk with its tags, read from r
// at g's tag offsets. Bad sectors go to bad and come out as zeros; the
// transform fails only on I/O errors.
func openTransform(r io.ReaderAt, g *integrity.Geometry, a cipher.AuthSector, bad *badList) sectors.Transform {
	return tagTransform(r, g, a, bad, a.Open)
}

// checkTransform verifies a chunk as openTransform does and makes no
// plaintext (dst is left as it was), for runs whose output is discarded.
func checkTransform(r io.ReaderAt, g *integrity.Geometry, a cipher.AuthSector, bad *badList) sectors.Transform {
	return tagTransform(r, g, a, bad, func(_, src, tags []byte, n uint64) error { return a.Check(src, tags, n) })
}

// tagTransform reads a chunk's tags and hands them to open (Open, or
// Check), collecting the bad sectors.
func tagTransform(r io.ReaderAt, g *integrity.Geometry, a cipher.AuthSector, bad *badList, open func(dst, src, tags []byte, n uint64) error) sectors.Transform {
	ss, ts := a.Geometry().SectorSize, a.TagSize()
	var pool tagBufs
	return func(dst, src []byte, n uint64) error {
		tb := pool.get(len(src) / ss * ts)
		defer pool.put(tb)
		off := g.TagOffset(n)
		if _, err := r.ReadAt(*tb, off); err != nil {
			return &sectors.IOError{Op: "read tags", Offset: off, Err: err}
		}
		err := open(dst, src, *tb, n)
		var te *cipher.TagError
		if errors.As(err, &te) {
			bad.add(te.Units)
			return nil
		}
		return err
	}
}

// sealTransform encrypts a chunk and writes its tags to w at g's tag
// offsets (the data itself goes where the pipeline writes it). The tags of
// an area are gathered in memory and written once the area is complete:
// one write per interleave area (16 MiB of data) instead of one per chunk,
// which on tmpfs contended with the pipeline's data writes for the file's
// lock. At most the areas of the chunks in flight are held.
func sealTransform(w io.WriterAt, g *integrity.Geometry, a cipher.AuthSector) sectors.Transform {
	ss, ts := a.Geometry().SectorSize, a.TagSize()
	var pool tagBufs
	at := &areaTags{w: w, g: g, open: map[uint64]*areaTagBuf{}}
	return func(dst, src []byte, n uint64) error {
		tb := pool.get(len(src) / ss * ts)
		defer pool.put(tb)
		if err := a.Seal(dst, *tb, src, n); err != nil {
			return err
		}
		return at.add(n, *tb)
	}
}

// areaTags gathers the tags of each interleave area until all of them are
// there, then writes them in one piece.
type areaTags struct {
	w    io.WriterAt
	g    *integrity.Geometry
	mu   sync.Mutex
	open map[uint64]*areaTagBuf // by area index
	free [][]byte               // written areas' buffers, for the next ones
}

type areaTagBuf struct {
	area integrity.Area
	buf  []byte
	left int64 // tag bytes still to come
}

// add places the tags of the chunk whose first sector is n; the chunk lies
// inside one area (the pipeline's extents are the areas).
func (t *areaTags) add(n uint64, tags []byte) error {
	i := n >> t.g.Log2Interleave()
	t.mu.Lock()
	b := t.open[i]
	if b == nil {
		ar := t.g.Area(i)
		b = &areaTagBuf{area: ar, left: ar.TagLen}
		if n := len(t.free); n > 0 && int64(cap(t.free[n-1])) >= ar.TagLen {
			// Every byte is written again before the buffer goes out.
			b.buf, t.free = t.free[n-1][:ar.TagLen], t.free[:n-1]
		} else {
			b.buf = make([]byte, ar.TagLen)
		}
		t.open[i] = b
	}
	off := t.g.TagOffset(n) - b.area.TagOffset
	if off < 0 || off+int64(len(tags)) > b.area.TagLen {
		t.mu.Unlock()
		return fmt.Errorf("image: internal error: the tags of sector %d fall outside area %d", n, i)
	}
	copy(b.buf[off:], tags)
	b.left -= int64(len(tags))
	done := b.left == 0
	if done {
		delete(t.open, i)
	}
	t.mu.Unlock()
	if !done {
		return nil
	}
	_, err := t.w.WriteAt(b.buf, b.area.TagOffset)
	t.mu.Lock()
	t.free = append(t.free, b.buf)
	t.mu.Unlock()
	if err != nil {
		return &sectors.IOError{Op: "write tags", Offset: b.area.TagOffset, Err: err}
	}
	return nil
}

// authCipher is the authenticated cipher of k.
func authCipher(k *Key) (cipher.AuthSector, error) {
	if k.Auth == nil {
		return nil, errors.New("image: the key has no authenticated cipher")
	}
	return k.Auth, nil
}

// errBadSector stops a run at a bad sector.
var errBadSector = errors.New("bad sector")

// stopOnBad fails the run after a chunk with a bad sector.
func stopOnBad(t sectors.Transform, bad *badList) sectors.Transform {
	return func(dst, src []byte, n uint64) error {
		if err := t(dst, src, n); err != nil {
			return err
		}
		bad.mu.Lock()
		failed := bad.count > 0
		bad.mu.Unlock()
		if failed {
			return errBadSector
		}
		return nil
	}
}

// discard is a WriterAt that drops everything.
type discard struct{}

func (discard) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// VerifyReport is what Verify found.
type VerifyReport struct {
	Sectors uint64 // 512-byte sectors checked
	Bytes   int64
	// Corrupt lists the sectors that failed, nil when all passed.
	Corrupt *CorruptError
}

// Verify checks every sector of an authenticated image against its tag,
// writing no plaintext anywhere.
func (e *Encrypted) Verify(ctx context.Context, k *Key, p Pipeline) (*VerifyReport, error) {
	return e.c.verify(ctx, k, p)
}

// untagged is the Sector of an authenticated key: its sectors cannot be
// transformed without their tags, so every call is refused.
type untagged struct{ a cipher.AuthSector }

func (u untagged) Geometry() cipher.Geometry { return u.a.Geometry() }
func (u untagged) EncryptSectors(_, _ []byte, _ uint64) error {
	return header.ErrAuthenticated
}
func (u untagged) DecryptSectors(_, _ []byte, _ uint64) error {
	return header.ErrAuthenticated
}
func (u untagged) Clear() { u.a.Clear() }

// authStore keeps an authenticated image's sectors where the integrity
// geometry says, each with its tag. A sector whose tag fails reads as a
// *CorruptError (syscall.EIO), as the kernel's read does; a write seals
// the data and writes it, then its tags (there is no journal: a crash
// between the two leaves the sectors written failing, as dm-integrity
// without its journal would).
type authStore struct {
	f    *os.File
	g    *integrity.Geometry
	a    cipher.AuthSector
	tags tagBufs
}

func newAuthView(f *os.File, a cipher.AuthSector, g *integrity.Geometry, readOnly bool) *rawView {
	return newStoreView(f, &authStore{f: f, g: g, a: a}, a.Geometry().SectorSize, int64(g.DataSectors())*512, readOnly)
}

func (st *authStore) readSectors(buf []byte, s int64) error {
	ts, ss := st.a.TagSize(), st.a.Geometry().SectorSize
	return areaPieces(st.g, s, len(buf), func(lo, hi int, unit uint64) error {
		b := buf[lo:hi]
		if _, err := st.f.ReadAt(b, st.g.DataOffset(unit)); err != nil {
			return authReadErr(err)
		}
		tb := st.tags.get(len(b) / ss * ts)
		defer st.tags.put(tb)
		if _, err := st.f.ReadAt(*tb, st.g.TagOffset(unit)); err != nil {
			return authReadErr(err)
		}
		err := st.a.Open(b, b, *tb, unit)
		var te *cipher.TagError
		if errors.As(err, &te) {
			return &CorruptError{Sectors: te.Units, Count: uint64(len(te.Units))}
		}
		return err
	})
}

func authReadErr(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("image: %w", ErrTruncated)
	}
	return err
}

func (st *authStore) writeSectors(buf, src []byte, s int64) error {
	ts, ss := st.a.TagSize(), st.a.Geometry().SectorSize
	return areaPieces(st.g, s, len(src), func(lo, hi int, unit uint64) error {
		tb := st.tags.get((hi - lo) / ss * ts)
		defer st.tags.put(tb)
		if err := st.a.Seal(buf[lo:hi], *tb, src[lo:hi], unit); err != nil {
			return err
		}
		if _, err := st.f.WriteAt(buf[lo:hi], st.g.DataOffset(unit)); err != nil {
			return err
		}
		_, err := st.f.WriteAt(*tb, st.g.TagOffset(unit))
		return err
	})
}

// checkJournal refuses a journal the kernel would fail on
// (integrity.ErrJournal), or one holding committed writes that are not in
// place yet (ErrJournalPending): the kernel replays those at activation,
// and reading around them would give old data.
func checkJournal(r io.ReaderAt, g *integrity.Geometry) error {
	st, err := g.CheckJournal(r)
	if err != nil {
		return err
	}
	if st.Pending > 0 {
		return &JournalPendingError{Writes: st.Pending}
	}
	return nil
}

// ErrJournalPending is matched by every *JournalPendingError.
var ErrJournalPending = errors.New("the integrity journal holds writes not yet in place")

// JournalPendingError reports an authenticated image whose dm-integrity
// journal holds committed writes: it was not closed cleanly.
type JournalPendingError struct{ Writes int }

func (e *JournalPendingError) Error() string {
	return fmt.Sprintf("the integrity journal holds %d committed writes not yet in place (the image was not closed cleanly)", e.Writes)
}

func (e *JournalPendingError) Unwrap() error { return ErrJournalPending }

// ReplayJournal puts the committed writes of an authenticated image's
// journal in place, as the kernel does when it activates the image, and
// leaves an empty journal. It returns how many blocks it copied.
func ReplayJournal(f *os.File, hdr io.ReaderAt) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	h, err := header.Read(hdr, 0, fileSize(hdr, st.Size()))
	if err != nil {
		return 0, err
	}
	if h.Info().Integrity == "" {
		return 0, header.ErrNotAuthenticated
	}
	g, _, err := integrity.Read(f, uint64(h.Info().PayloadOffset/512), uint64(st.Size()/512))
	if err != nil {
		return 0, err
	}
	js, err := g.ApplyJournal(f)
	if err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	return js.Pending, nil
}

// fileSize is the size of hdr when it is a file of its own, else size.
func fileSize(hdr io.ReaderAt, size int64) int64 {
	if f, ok := hdr.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			return st.Size()
		}
	}
	return size
}
