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
}

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

func runOpts(p Pipeline, progress func(int64)) sectors.Options {
	return sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: SectorSize, Progress: progress}
}

// sector0Reader reads img with its first sector replaced by sec0.
type sector0Reader struct {
	img  io.ReaderAt
	sec0 []byte
}

func (r sector0Reader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.img.ReadAt(p, off)
	if off < SectorSize {
		copy(p[:n], r.sec0[off:])
	}
	return n, err
}

// sector0Writer writes to img, except the first sector, which goes to
// the journal at off0.
type sector0Writer struct {
	img, j File
	off0   int64
}

func (w sector0Writer) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	if off < SectorSize {
		m := min(int64(len(p)), SectorSize-off)
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

func writeSyncAt(s File, b []byte, off int64, what string) error {
	if _, err := s.WriteAt(b, off); err != nil {
		return fmt.Errorf("failed to write %s: %w", what, err)
	}
	return syncErr(s, what)
}

// EncryptInPlaceOptions configure EncryptInPlace.
type EncryptInPlaceOptions struct {
	Header     header.Params // as for Encrypt
	Passphrase []byte
	InPlaceOptions
}

// EncryptInPlace turns the plaintext raw image img into a raw LUKS1 image
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
	blob, err := j.blob()
	if err != nil {
		return nil, err
	}
	sec0, area := blob[:SectorSize], blob[SectorSize:]
	h, err := header.Read(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	if int64(len(area)) != st.Shift || h.Info().PayloadOffset != st.Shift {
		return nil, fmt.Errorf("%w: header area does not match", ErrJournalCorrupt)
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	if st.Phase == phaseData {
		vk, _, err := h.Unlock(bytes.NewReader(area), 0, o.Passphrase, -1)
		if err != nil {
			return nil, err
		}
		ciph, err := h.NewSectorCipher(vk)
		clear(vk)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		// Mark the image and give it its final size; both idempotent.
		m := bytes.Clone(area[:SectorSize])
		header.Mark(m)
		if err := writeSyncAt(img, m, 0, "image marker"); err != nil {
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
		src := sector0Reader{img: img, sec0: sec0}
		t := ciph.EncryptSectors
		window := func(ctx context.Context, k int64, progress func(int64)) error {
			y := st.DataLen - k*st.Window
			x := max(0, y-st.Window)
			ext := []sectors.Extent{{SrcOffset: x, DstOffset: x + st.Shift, Length: y - x, Sector: rawIV(x)}}
			if err := sectors.Run(ctx, writerOnly{img}, src, ext, t, runOpts(o.Pipeline, progress)); err != nil {
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
		if _, err := img.WriteAt(area[SectorSize:], SectorSize); err != nil {
			return fmt.Errorf("failed to write header: %w", err)
		}
		if err := syncErr(img, "image"); err != nil {
			return err
		}
		if err := writeSyncAt(img, area[:SectorSize], 0, "header"); err != nil {
			return err
		}
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
	if p.Version == 2 {
		return nil, ErrLUKS2NotYet
	}
	h, vk, area, err := header.Format(o.Passphrase, p)
	if err != nil {
		return nil, err
	}
	clear(vk)
	shift := h.Info().PayloadOffset
	blob := make([]byte, SectorSize+len(area))
	if _, err := img.ReadAt(blob[:SectorSize], 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read image: %w", err)
	}
	copy(blob[SectorSize:], area)
	clear(area)
	w := o.window(shift)
	st := &state{
		Op: OpEncrypt, ImageSize: size, FinalSize: size + shift, DataLen: size, Shift: shift,
		Window: w, Windows: ceilDiv(size, w), RecordLen: recordLen(w, false),
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, blob)
}

// DecryptInPlace turns the raw LUKS1 image img into its plaintext where it
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
		vk, _, err := h.Unlock(bytes.NewReader(blob), 0, passphrase, slot)
		if err != nil {
			return nil, err
		}
		ciph, err := h.NewSectorCipher(vk)
		clear(vk)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		m := bytes.Clone(blob[:SectorSize])
		header.Mark(m)
		if err := writeSyncAt(img, m, 0, "image marker"); err != nil {
			return nil, err
		}
		dst := sector0Writer{img: img, j: j.s, off0: st.Sec0Off}
		t := ciph.DecryptSectors
		window := func(ctx context.Context, k int64, progress func(int64)) error {
			x := k * st.Window
			ext := []sectors.Extent{{SrcOffset: x + st.Shift, DstOffset: x, Length: c.windowLen(k), Sector: rawIV(x)}}
			if err := sectors.Run(ctx, dst, img, ext, t, runOpts(o.Pipeline, progress)); err != nil {
				return err
			}
			if k == 0 {
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
		sec0 := make([]byte, SectorSize)
		if _, err := j.s.ReadAt(sec0, st.Sec0Off); err != nil {
			return fmt.Errorf("failed to read journal: %w", err)
		}
		if st.DataLen > 0 {
			if err := writeSyncAt(img, sec0[:min(SectorSize, st.DataLen)], 0, "image"); err != nil {
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
	if isQcow2(img) {
		return nil, ErrInPlaceQcow2
	}
	h, err := header.Read(img, 0, size)
	if err != nil {
		return nil, err
	}
	shift, err := attachedPayload(h)
	if err != nil {
		return nil, err
	}
	if size < shift || (size-shift)%SectorSize != 0 {
		return nil, fmt.Errorf("%w: payload of %d bytes is not a whole number of sectors", ErrTruncated, size-shift)
	}
	// Check the key before anything is written.
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
	w := o.window(shift)
	st := &state{
		Op: OpDecrypt, ImageSize: size, FinalSize: data, DataLen: data, Shift: shift,
		Window: w, Windows: ceilDiv(data, w), RecordLen: recordLen(w, false), Sec0Off: 1,
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, blob)
}
