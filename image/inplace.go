package image

// In-place encryption and decryption of raw images, and the window loop
// shared with reencryption. See docs/REENCRYPT.md for the design.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/sectors"
)

// ErrInPlaceQcow2 reports a qcow2 image given to an in-place conversion,
// which works on raw images only; qcow2 images are converted into a new
// file instead.
var ErrInPlaceQcow2 = errors.New("in-place conversion supports raw images only, not qcow2")

// DefaultWindow is the bytes converted per durable step: each window
// costs two fsyncs (progress record, then data).
const DefaultWindow = 8 << 20

// InPlaceOptions tune the in-place operations.
type InPlaceOptions struct {
	// Window is the bytes per durable step, a multiple of 512; 0 means
	// DefaultWindow. Shifting operations cap it at the payload offset.
	Window   int64
	Pipeline Pipeline
	// Resume requires an unfinished operation of this kind to continue;
	// without it one is continued if found, and a fresh one started if not.
	Resume bool
	// Rand is the source of keys, salts and wipe bytes; nil means
	// crypto/rand.
	Rand io.Reader
	// AllowCost lets the unlock that starts a decryption or reencryption
	// run whatever its key derivation costs; without it an estimate over
	// the limits is refused with a *CostError, as by Encrypted.Unlock. A
	// resumed operation unlocks the header its start accepted.
	AllowCost bool
}

// alignWindow rounds the window w down to whole ss-byte sectors, at least
// one.
func alignWindow(w, ss int64) int64 { return max(ss, w-w%ss) }

func (o InPlaceOptions) window(limit int64) int64 {
	w := o.Window
	if w <= 0 {
		w = DefaultWindow
	}
	if limit > 0 {
		w = min(w, limit)
	}
	w -= w % SectorSize
	return max(w, SectorSize)
}

// Result describes a finished in-place operation.
type Result struct {
	Op      Op
	Format  Format
	Header  header.Header // the header now in the image; nil after decrypt
	Bytes   int64         // data bytes converted
	Resumed bool          // an interrupted run was continued
	Kept    []int         // reencrypt: slots holding the new key
	Removed []int         // reencrypt: slots removed
}

// converter is one operation's data phase: how to run window k, how to
// redo the window of the last record after a crash, and how to finish.
type converter struct {
	img File
	j   *journal
	p   Pipeline
	// step converts window k; it writes the progress record first.
	step func(ctx context.Context, k int64, progress func(int64)) error
	// redo completes window r.Window after a crash.
	redo   func(ctx context.Context, r *record, progress func(int64)) error
	finish func() error
}

func (c *converter) windowLen(k int64) int64 {
	st := c.j.st
	return min(st.Window, st.DataLen-k*st.Window)
}

// run finishes the data phase from the last record, then the finish phase.
func (c *converter) run(ctx context.Context) error {
	st := c.j.st
	if st.Phase == phaseData {
		rec, err := c.j.lastRecord()
		if err != nil {
			return err
		}
		start := int64(0)
		var done int64
		report := func(base int64) func(int64) {
			return func(d int64) {
				if c.p.Progress != nil {
					c.p.Progress(base+d, st.DataLen)
				}
			}
		}
		if c.p.Progress != nil {
			c.p.Progress(0, st.DataLen)
		}
		if rec != nil {
			done = rec.Window * st.Window
			if err := c.redo(ctx, rec, report(done)); err != nil {
				return err
			}
			done += c.windowLen(rec.Window)
			start = rec.Window + 1
		}
		for k := start; k < st.Windows; k++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := c.step(ctx, k, report(done)); err != nil {
				return err
			}
			done += c.windowLen(k)
			report(done)(0)
		}
		st.Phase = phaseFinish
		st.Seq++
		if err := c.j.writeState(); err != nil {
			return err
		}
	}
	return c.finish()
}

// writerOnly hides Sync from sectors.Run, which would sync after the
// last write; the window loop syncs itself.
type writerOnly struct{ w io.WriterAt }

func (w writerOnly) WriteAt(p []byte, off int64) (int, error) { return w.w.WriteAt(p, off) }

func runOpts(p Pipeline, bufs *sectors.Buffers, progress func(int64)) sectors.Options {
	return sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: SectorSize, Progress: progress, Buffers: bufs}
}

// readerOnly hides the *os.File behind a ReaderAt from sectors.Run, which
// would look for holes in it.
type readerOnly struct{ r io.ReaderAt }

func (r readerOnly) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAt(p, off) }

// headReader reads img with its first len(head) bytes replaced by head.
type headReader struct {
	img  io.ReaderAt
	head []byte
}

func (r headReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.img.ReadAt(p, off)
	if off < int64(len(r.head)) {
		copy(p[:n], r.head[off:])
	}
	return n, err
}

// headWriter writes to img, except the first n bytes, which go to the
// journal at off0.
type headWriter struct {
	img, j  File
	off0, n int64
}

func (w headWriter) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	if off < w.n {
		m := min(int64(len(p)), w.n-off)
		if _, err := w.j.WriteAt(p[:m], w.off0+off); err != nil {
			return 0, err
		}
		n = int(m)
	}
	if n < len(p) {
		m, err := w.img.WriteAt(p[n:], off+int64(n))
		return n + m, err
	}
	return n, nil
}

// journalCipher unlocks h, read from area (a journal's header area), with
// passphrase (slot -1: any) and returns its sector cipher and sector size,
// checked against the journal's data length and window. The caller clears
// the cipher.
func journalCipher(h header.Header, area, passphrase []byte, slot int, st *state) (cipher.Sector, int64, error) {
	vk, _, err := h.Unlock(bytes.NewReader(area), 0, passphrase, slot)
	if err != nil {
		return nil, 0, err
	}
	ciph, err := h.NewSectorCipher(vk)
	clear(vk)
	if err != nil {
		return nil, 0, err
	}
	ss := int64(ciph.Geometry().SectorSize)
	if st.DataLen%ss != 0 || st.Window%ss != 0 {
		ciph.Clear()
		return nil, 0, fmt.Errorf("%w: %d bytes in %d-byte windows", ErrUnaligned, st.DataLen, st.Window)
	}
	return ciph, ss, nil
}

// begin loads the journal of img and decides: resume it (j != nil), start
// fresh (j == nil), or refuse (an error).
func begin(img File, js JournalStore, op Op, resume bool) (*journal, error) {
	j, err := loadJournal(img, js, true)
	if err != nil {
		return nil, err
	}
	if j == nil {
		if resume {
			return nil, ErrNothingToResume
		}
		return nil, nil
	}
	if j.st.Op != op {
		closeStorage(j.s)
		return nil, &BusyError{Op: j.st.Op, Journal: js.Name()}
	}
	return j, nil
}

// complete removes the journal once the image is final.
func complete(j *journal, js JournalStore) error {
	closeStorage(j.s)
	if err := js.Remove(); err != nil {
		return fmt.Errorf("failed to remove journal: %w", err)
	}
	return nil
}

// EncryptInPlaceOptions configure EncryptInPlace.
type EncryptInPlaceOptions struct {
	Header     header.Params // as for Encrypt
	Passphrase []byte
	InPlaceOptions
}

// EncryptInPlace turns the plaintext raw image img into a raw LUKS image (LUKS1 or LUKS2, as o.Header says)
// where it lies: the file grows by the payload offset and the data moves
// forward, converted from the end backwards, one window at a time. A run
// that was interrupted is continued (the passphrase must be the same),
// with the header chosen by the first run.
func EncryptInPlace(ctx context.Context, img File, js JournalStore, o EncryptInPlaceOptions) (*Result, error) {
	j, err := begin(img, js, OpEncrypt, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	if j == nil {
		if j, err = startEncrypt(img, js, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	st := j.st
	if st.Shift == 0 {
		return nil, errHeaderKind(false)
	}
	blob, err := j.blob()
	if err != nil {
		return nil, err
	}
	if int64(len(blob)) < st.head() {
		return nil, fmt.Errorf("%w: blob too short", ErrJournalCorrupt)
	}
	head, area := blob[:st.head()], blob[st.head():]
	h, err := header.Read(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	if int64(len(area)) != st.Shift || h.Info().PayloadOffset != st.Shift || h.MarkedBytes() != st.head() {
		return nil, fmt.Errorf("%w: header area does not match", ErrJournalCorrupt)
	}
	// The mark: the new header's own (LUKS1: its first sector with
	// LUKS\xde\xad; LUKS2: both copies with the busy requirement), over
	// the plaintext head that the journal keeps.
	mark, err := h.Mark()
	if err != nil {
		return nil, err
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	if st.Phase == phaseData {
		ciph, ss, err := journalCipher(h, area, o.Passphrase, -1, st)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		// Mark the image and give it its final size; both idempotent.
		if err := applyUpdate(img, 0, mark); err != nil {
			return nil, err
		}
		if size, err := storageSize(img); err != nil {
			return nil, err
		} else if size != st.FinalSize {
			if size < st.ImageSize {
				return nil, fmt.Errorf("%w: image is %d bytes, journal expects at least %d", ErrJournalCorrupt, size, st.ImageSize)
			}
			if err := img.Truncate(st.FinalSize); err != nil {
				return nil, fmt.Errorf("failed to grow image: %w", err)
			}
			if err := syncErr(img, "image"); err != nil {
				return nil, err
			}
		}
		src := headReader{img: img, head: head}
		t := ciph.EncryptSectors
		bufs := new(sectors.Buffers)
		window := func(ctx context.Context, k int64, progress func(int64)) error {
			y := st.DataLen - k*st.Window
			x := max(0, y-st.Window)
			ext := []sectors.Extent{{SrcOffset: x, DstOffset: x + st.Shift, Length: y - x, Sector: rawIV(x)}}
			ro := runOpts(o.Pipeline, bufs, progress)
			ro.SectorSize = int(ss)
			if err := sectors.Run(ctx, writerOnly{img}, src, ext, t, ro); err != nil {
				return err
			}
			return syncErr(img, "image")
		}
		c.step = func(ctx context.Context, k int64, progress func(int64)) error {
			if err := j.writeRecord(record{Window: k}); err != nil {
				return err
			}
			return window(ctx, k, progress)
		}
		c.redo = func(ctx context.Context, r *record, progress func(int64)) error {
			return window(ctx, r.Window, progress)
		}
	}
	c.finish = func() error {
		if size, err := storageSize(img); err != nil {
			return err
		} else if size != st.FinalSize {
			if err := img.Truncate(st.FinalSize); err != nil {
				return fmt.Errorf("failed to size image: %w", err)
			}
		}
		// The rest of the header area (key material), then the end of
		// the mark: the image holds the new header from here on.
		if err := writeSyncAt(img, area[st.head():], st.head(), "header"); err != nil {
			return err
		}
		u, err := mark.Header.Unmark()
		if err != nil {
			return err
		}
		if err := applyUpdate(img, 0, u); err != nil {
			return err
		}
		h = u.Header
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpEncrypt, Format: Raw, Header: h, Bytes: st.DataLen, Resumed: resumed}, nil
}

func startEncrypt(img File, js JournalStore, o EncryptInPlaceOptions) (*journal, error) {
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	if size%SectorSize != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSize, size)
	}
	if size == 0 {
		return nil, errors.New("image is empty")
	}
	p := o.Header
	if p.Rand == nil {
		p.Rand = o.Rand
	}
	luks2SectorSize(&p, size)
	if err := refuseAuthParams(p, "in-place encryption"); err != nil {
		return nil, err
	}
	h, vk, area, err := header.Format(o.Passphrase, p)
	if err != nil {
		return nil, err
	}
	clear(vk)
	if ss := int64(h.Info().SectorSize); size%ss != 0 {
		return nil, fmt.Errorf("%w: %d bytes are not whole %d-byte sectors", ErrUnaligned, size, ss)
	}
	shift, head := h.Info().PayloadOffset, h.MarkedBytes()
	blob := make([]byte, head+int64(len(area)))
	if _, err := img.ReadAt(blob[:min(head, size)], 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read image: %w", err)
	}
	copy(blob[head:], area)
	clear(area)
	w := alignWindow(o.window(shift), int64(h.Info().SectorSize))
	st := &state{
		Op: OpEncrypt, ImageSize: size, FinalSize: size + shift, DataLen: size, Shift: shift,
		Window: w, Windows: ceilDiv(size, w), RecordLen: recordLen(w, false), HeadLen: head,
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, blob)
}

// DecryptInPlace turns the raw LUKS image img into its plaintext where it
// lies: the data moves back over the header, converted from the start
// forwards, and the file shrinks by the payload offset at the end. slot -1
// tries every key slot.
func DecryptInPlace(ctx context.Context, img File, js JournalStore, passphrase []byte, slot int, o InPlaceOptions) (*Result, error) {
	j, err := begin(img, js, OpDecrypt, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	if j == nil {
		if j, err = startDecrypt(img, js, passphrase, slot, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	st := j.st
	if st.Shift == 0 {
		return nil, errHeaderKind(false)
	}
	blob, err := j.blob()
	if err != nil {
		return nil, err
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	var h header.Header
	if st.Phase == phaseData {
		if h, err = header.Read(bytes.NewReader(blob), 0, int64(len(blob))); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
		}
		if h.MarkedBytes() != st.head() {
			return nil, fmt.Errorf("%w: header does not match", ErrJournalCorrupt)
		}
		ciph, ss, err := journalCipher(h, blob, passphrase, slot, st)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		// The mark (idempotent), which the head of the plaintext is kept
		// off until the end.
		if err := applyMark(img, 0, h); err != nil {
			return nil, err
		}
		dst := headWriter{img: img, j: j.s, off0: st.Sec0Off, n: st.head()}
		t := ciph.DecryptSectors
		bufs := new(sectors.Buffers)
		window := func(ctx context.Context, k int64, progress func(int64)) error {
			x := k * st.Window
			ext := []sectors.Extent{{SrcOffset: x + st.Shift, DstOffset: x, Length: c.windowLen(k), Sector: rawIV(x)}}
			ro := runOpts(o.Pipeline, bufs, progress)
			ro.SectorSize = int(ss)
			// Ciphertext has no holes worth finding: handing Run the file
			// itself would cost a SEEK_DATA/SEEK_HOLE pair per window
			// (about 5 ms on tmpfs, per 2 MiB).
			if err := sectors.Run(ctx, dst, readerOnly{img}, ext, t, ro); err != nil {
				return err
			}
			if x < st.head() {
				if err := syncErr(j.s, "journal"); err != nil {
					return err
				}
			}
			return syncErr(img, "image")
		}
		c.step = func(ctx context.Context, k int64, progress func(int64)) error {
			if err := j.writeRecord(record{Window: k}); err != nil {
				return err
			}
			return window(ctx, k, progress)
		}
		c.redo = func(ctx context.Context, r *record, progress func(int64)) error {
			return window(ctx, r.Window, progress)
		}
	}
	c.finish = func() error {
		head := make([]byte, min(st.head(), st.DataLen))
		if _, err := j.s.ReadAt(head, st.Sec0Off); err != nil {
			return fmt.Errorf("failed to read journal: %w", err)
		}
		if len(head) > 0 {
			if err := writeSyncAt(img, head, 0, "image"); err != nil {
				return err
			}
		}
		if err := img.Truncate(st.FinalSize); err != nil {
			return fmt.Errorf("failed to shrink image: %w", err)
		}
		if err := syncErr(img, "image"); err != nil {
			return err
		}
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpDecrypt, Format: Raw, Bytes: st.DataLen, Resumed: resumed}, nil
}

func startDecrypt(img File, js JournalStore, passphrase []byte, slot int, o InPlaceOptions) (*journal, error) {
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	if err := refuseQcow2(img); err != nil {
		return nil, err
	}
	loc, err := locateLUKS(img)
	if err != nil {
		return nil, err
	}
	h, err := header.Read(img, loc.area.off, loc.area.limit)
	if err != nil {
		return nil, err
	}
	if err := refuseAuth(h, "in-place decryption"); err != nil {
		return nil, err
	}
	shift, err := attachedPayload(h)
	if err != nil {
		return nil, err
	}
	ss := int64(h.Info().SectorSize)
	if size < shift || (size-shift)%ss != 0 {
		return nil, fmt.Errorf("%w: payload of %d bytes is not a whole number of %d-byte sectors", ErrTruncated, size-shift, ss)
	}
	// Check the key before anything is written.
	if err := checkCost(h, slot, o.AllowCost); err != nil {
		return nil, err
	}
	vk, _, err := h.Unlock(img, 0, passphrase, slot)
	if err != nil {
		return nil, err
	}
	clear(vk)
	areaLen := (h.Info().AreaSize + SectorSize - 1) / SectorSize * SectorSize
	blob := make([]byte, areaLen)
	if _, err := img.ReadAt(blob, 0); err != nil {
		return nil, fmt.Errorf("failed to read header: %w", err)
	}
	data := size - shift
	w := alignWindow(o.window(shift), ss)
	st := &state{
		Op: OpDecrypt, ImageSize: size, FinalSize: data, DataLen: data, Shift: shift,
		Window: w, Windows: ceilDiv(data, w), RecordLen: recordLen(w, false), Sec0Off: 1, HeadLen: h.MarkedBytes(),
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, blob)
}
