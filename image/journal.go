package image

// The journal of the in-place operations (reencrypt, in-place encrypt and
// decrypt): a sidecar file beside the image holding the operation's state,
// two alternating progress records and a blob (header areas, a saved
// sector). Its format, the write and fsync order and the resume rules are
// in docs/REENCRYPT.md.

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/cryptimg/cryptimg/header"
)

// File is what the in-place operations need of a file: *os.File
// satisfies it, and tests substitute a fault-injecting one. ReadAt and
// WriteAt may be called from two goroutines at once, on disjoint ranges.
type File interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Truncate(size int64) error
	Stat() (fs.FileInfo, error)
}

// JournalStore creates, opens and removes the journal of one image.
type JournalStore interface {
	// Open opens the existing journal; an error matching fs.ErrNotExist
	// if there is none.
	Open() (File, error)
	// Create makes a new, empty journal whose directory entry is durable
	// when it returns; an error if one exists.
	Create() (File, error)
	// Remove deletes the journal durably. The storage returned by Open or
	// Create must not be used afterwards.
	Remove() error
	// Name describes the journal in messages.
	Name() string
}

// JournalSuffix is appended to the image path to name its journal.
const JournalSuffix = ".cryptimg-journal"

// Sidecar is the JournalStore of the image at path: the file
// path+JournalSuffix, created with mode 0600.
func Sidecar(path string) JournalStore { return sidecar{path: path + JournalSuffix} }

type sidecar struct {
	path string
}

func (s sidecar) Name() string { return s.path }

func (s sidecar) Open() (File, error) {
	return os.OpenFile(s.path, os.O_RDWR, 0)
}

func (s sidecar) Create() (File, error) {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syncDir(s.path); err != nil {
		f.Close()
		os.Remove(s.path)
		return nil, err
	}
	return f, nil
}

func (s sidecar) Remove() error {
	if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(s.path)
}

// Op names an in-place operation.
type Op uint8

const (
	OpReencrypt Op = 1 + iota
	OpEncrypt
	OpDecrypt
	OpConvert
)

func (o Op) String() string {
	switch o {
	case OpReencrypt:
		return "reencrypt"
	case OpEncrypt:
		return "in-place encryption"
	case OpDecrypt:
		return "in-place decryption"
	case OpConvert:
		return "conversion"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

var (
	// ErrBusy reports an image with an unfinished in-place operation: the
	// command that started it must be run again (it resumes) before
	// anything else writes to the image. It wraps into *BusyError.
	ErrBusy = errors.New("busy: the image has an unfinished operation")
	// ErrJournalMissing reports an image marked as being converted whose
	// journal is gone.
	ErrJournalMissing = errors.New("the image is marked as being converted (LUKS\\xde\\xad) but its journal is missing")
	// ErrJournalCorrupt reports a journal that cannot be used.
	ErrJournalCorrupt = errors.New("corrupt cryptimg journal")
	// ErrNothingToResume reports a resume without an unfinished operation.
	ErrNothingToResume = errors.New("no unfinished operation to resume")
)

// BusyError reports the unfinished operation found on an image.
type BusyError struct {
	Op      Op
	Journal string
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("busy: an unfinished %s is recorded in %s", e.Op, e.Journal)
}

// Image is the path of the image the journal belongs to.
func (e *BusyError) Image() string { return strings.TrimSuffix(e.Journal, JournalSuffix) }

func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// Journal layout (all integers big-endian).
const (
	stateSize   = 512
	stateOffA   = 0
	recordsOff  = 2 * stateSize
	fpSize      = 8 // fingerprint bytes kept per 512-byte sector
	recordHead  = 48
	stateMagic  = "CRYPTIMG-JOURNAL"
	recordMagic = "CRYPTIMG-RECORD\x00"
	journalVer  = 1
)

const (
	phaseData   = 1
	phaseFinish = 2
)

// state is the fixed description of an operation, written at its start and
// once more when the data phase ends.
type state struct {
	Op        Op
	Phase     uint8
	Seq       uint64
	ID        [16]byte
	ImageSize int64 // image size when the operation started
	FinalSize int64 // image size when it is done
	DataLen   int64 // bytes of data the windows cover
	Shift     int64 // payload offset in bytes (in-place encrypt/decrypt); convert: offset of the old LUKS2 header's second copy, or 0
	Window    int64 // bytes per durable step
	Windows   int64 // number of windows
	RecordLen int64 // bytes per progress record
	BlobOff   int64
	BlobLen   int64
	BlobSum   [32]byte
	HdrOff    int64 // byte offset of the LUKS header in the image
	Sec0Off   int64 // decrypt: where the plaintext of the marked head waits; 0 otherwise
	HeadLen   int64 // in-place encrypt/decrypt: bytes at the start the mark takes (0 in old journals: 512)
}

// head is the length of the marked head of the image: the bytes the
// header's mark writes, which the journal keeps instead.
func (s *state) head() int64 {
	if s.HeadLen == 0 {
		return SectorSize
	}
	return s.HeadLen
}

func (s *state) marshal() []byte {
	b := make([]byte, stateSize)
	be := binary.BigEndian
	copy(b, stateMagic)
	be.PutUint32(b[16:], journalVer)
	b[20], b[21] = byte(s.Op), s.Phase
	be.PutUint64(b[24:], s.Seq)
	copy(b[32:48], s.ID[:])
	for i, v := range []int64{s.ImageSize, s.FinalSize, s.DataLen, s.Shift, s.Window, s.Windows, s.RecordLen, s.BlobOff, s.BlobLen, s.HdrOff, s.Sec0Off} {
		be.PutUint64(b[48+8*i:], uint64(v))
	}
	copy(b[160:192], s.BlobSum[:])
	be.PutUint64(b[192:], uint64(s.HeadLen))
	sum := sha256.Sum256(b[:stateSize-32])
	copy(b[stateSize-32:], sum[:])
	return b
}

func parseState(b []byte) (*state, bool) {
	if len(b) != stateSize || string(b[:16]) != stateMagic {
		return nil, false
	}
	sum := sha256.Sum256(b[:stateSize-32])
	if subtle.ConstantTimeCompare(sum[:], b[stateSize-32:]) != 1 {
		return nil, false
	}
	be := binary.BigEndian
	if be.Uint32(b[16:]) != journalVer {
		return nil, false
	}
	s := &state{Op: Op(b[20]), Phase: b[21], Seq: be.Uint64(b[24:])}
	copy(s.ID[:], b[32:48])
	v := make([]int64, 11)
	for i := range v {
		v[i] = int64(be.Uint64(b[48+8*i:]))
	}
	s.ImageSize, s.FinalSize, s.DataLen, s.Shift, s.Window, s.Windows, s.RecordLen, s.BlobOff, s.BlobLen, s.HdrOff, s.Sec0Off =
		v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
	copy(s.BlobSum[:], b[160:192])
	s.HeadLen = int64(be.Uint64(b[192:]))
	if s.HeadLen < 0 || s.HeadLen%SectorSize != 0 || s.HeadLen > 1<<30 {
		return nil, false
	}
	if s.Op < OpReencrypt || s.Op > OpConvert || (s.Phase != phaseData && s.Phase != phaseFinish) ||
		s.Window <= 0 || s.Window%SectorSize != 0 || s.RecordLen < recordHead+32 || s.BlobOff < recordsOff+2*s.RecordLen ||
		s.BlobLen < 0 || s.DataLen < 0 || s.Windows != ceilDiv(s.DataLen, s.Window) {
		return nil, false
	}
	return s, true
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// recordLen is the size of a progress record for window bytes.
func recordLen(window int64, withFP bool) int64 {
	n := int64(recordHead + 32)
	if withFP {
		n += window / SectorSize * fpSize
	}
	return (n + SectorSize - 1) / SectorSize * SectorSize
}

// journal is an open journal and its state.
type journal struct {
	s  File
	st *state
}

// writeState writes st into the slot its sequence number selects, so the
// previous state stays intact until this one is durable, and syncs.
func (j *journal) writeState() error {
	b := j.st.marshal()
	if _, err := j.s.WriteAt(b, int64(j.st.Seq%2)*stateSize+stateOffA); err != nil {
		return fmt.Errorf("failed to write journal: %w", err)
	}
	return syncErr(j.s, "journal")
}

// readState returns the valid state with the highest sequence number, or
// nil if neither slot holds one.
func readState(s File) (*state, error) {
	b := make([]byte, 2*stateSize)
	n, err := s.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read journal: %w", err)
	}
	b = b[:n]
	var best *state
	for off := 0; off+stateSize <= len(b); off += stateSize {
		if st, ok := parseState(b[off : off+stateSize]); ok && (best == nil || st.Seq > best.Seq) {
			best = st
		}
	}
	return best, nil
}

// record is the progress mark written before window Window is touched:
// every window before it is complete. For reencrypt it carries the first
// fpSize bytes of each old ciphertext sector of the window.
type record struct {
	Window int64
	FP     []byte
	// Tags, for an authenticated image's reencryption, are the new tags of
	// the window's sectors (with a random-IV mode's IVs), so that a redo
	// writes exactly what the step would have.
	Tags []byte
}

func (j *journal) writeRecord(r record) error {
	b := make([]byte, j.st.RecordLen)
	copy(b, recordMagic)
	copy(b[16:32], j.st.ID[:])
	binary.BigEndian.PutUint64(b[32:], uint64(r.Window))
	binary.BigEndian.PutUint32(b[40:], uint32(len(r.FP)/fpSize))
	binary.BigEndian.PutUint32(b[44:], uint32(len(r.Tags)))
	if int64(recordHead+len(r.FP)+len(r.Tags)+32) > j.st.RecordLen {
		panic("image: record too large")
	}
	copy(b[recordHead:], r.FP)
	copy(b[recordHead+len(r.FP):], r.Tags)
	sum := sha256.Sum256(b[:len(b)-32])
	copy(b[len(b)-32:], sum[:])
	if _, err := j.s.WriteAt(b, recordsOff+(r.Window%2)*j.st.RecordLen); err != nil {
		return fmt.Errorf("failed to write journal: %w", err)
	}
	return syncErr(j.s, "journal")
}

// lastRecord returns the valid record of this operation with the highest
// window, or nil.
func (j *journal) lastRecord() (*record, error) {
	var best *record
	for i := int64(0); i < 2; i++ {
		b := make([]byte, j.st.RecordLen)
		if _, err := j.s.ReadAt(b, recordsOff+i*j.st.RecordLen); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("failed to read journal: %w", err)
		}
		if string(b[:16]) != recordMagic || !bytes.Equal(b[16:32], j.st.ID[:]) {
			continue
		}
		sum := sha256.Sum256(b[:len(b)-32])
		if subtle.ConstantTimeCompare(sum[:], b[len(b)-32:]) != 1 {
			continue
		}
		w := int64(binary.BigEndian.Uint64(b[32:]))
		n := int64(binary.BigEndian.Uint32(b[40:]))
		nt := int64(binary.BigEndian.Uint32(b[44:]))
		if w < 0 || w >= j.st.Windows || w%2 != i || recordHead+n*fpSize+nt+32 > j.st.RecordLen {
			continue
		}
		if best == nil || w > best.Window {
			fp := recordHead + n*fpSize
			best = &record{Window: w, FP: bytes.Clone(b[recordHead:fp]), Tags: bytes.Clone(b[fp : fp+nt])}
		}
	}
	return best, nil
}

// blob reads and checks the operation's static blob.
func (j *journal) blob() ([]byte, error) {
	b := make([]byte, j.st.BlobLen)
	if _, err := j.s.ReadAt(b, j.st.BlobOff); err != nil {
		return nil, fmt.Errorf("failed to read journal: %w", err)
	}
	sum := sha256.Sum256(b)
	if subtle.ConstantTimeCompare(sum[:], j.st.BlobSum[:]) != 1 {
		return nil, fmt.Errorf("%w: blob checksum mismatch", ErrJournalCorrupt)
	}
	return b, nil
}

// createJournal writes a new journal with st (phase data) and blob, and
// makes it durable before returning. Nothing in the image has been changed
// before this point, so a journal it fails to complete (a full disk) is
// removed: left, it would only ask for a --resume that has nothing to
// resume.
func createJournal(js JournalStore, st *state, blob []byte) (_ *journal, err error) {
	s, err := js.Create()
	if err != nil {
		return nil, fmt.Errorf("failed to create journal: %w", err)
	}
	defer func() {
		if err != nil {
			closeStorage(s)
			if rerr := js.Remove(); rerr != nil {
				err = fmt.Errorf("%w; and failed to remove the incomplete journal %s: %v", err, js.Name(), rerr)
			}
		}
	}()
	st.BlobOff = recordsOff + 2*st.RecordLen
	st.BlobLen = int64(len(blob))
	st.BlobSum = sha256.Sum256(blob)
	st.Phase, st.Seq = phaseData, 1
	j := &journal{s: s, st: st}
	if _, err := s.WriteAt(blob, st.BlobOff); err != nil {
		return nil, fmt.Errorf("failed to write journal: %w", err)
	}
	if st.Sec0Off != 0 {
		st.Sec0Off = st.BlobOff + st.BlobLen
		if _, err := s.WriteAt(make([]byte, st.head()), st.Sec0Off); err != nil {
			return nil, fmt.Errorf("failed to write journal: %w", err)
		}
	}
	// The blob must be durable before the state that vouches for it.
	if err := syncErr(s, "journal"); err != nil {
		return nil, err
	}
	if err := j.writeState(); err != nil {
		return nil, err
	}
	return j, nil
}

// Pending reports the unfinished operation of an image: nil if there is
// none. It returns ErrJournalMissing (wrapped) if the image is marked but
// has no journal, and ErrJournalCorrupt for a marked image whose journal
// is unusable. A journal that never became valid (a crash while creating
// it, before the image was touched) counts as no operation; Pending changes
// nothing, and the next operation on the image removes such a journal.
func Pending(img File, js JournalStore) (*BusyError, error) {
	j, err := loadJournal(img, js, false)
	if err != nil || j == nil {
		return nil, err
	}
	closeStorage(j.s)
	return &BusyError{Op: j.st.Op, Journal: js.Name()}, nil
}

// loadJournal opens the journal of img, or returns nil if no operation is
// pending (see Pending). With removeStale, a journal that never became
// valid is removed; without, it is left alone.
func loadJournal(img File, js JournalStore, removeStale bool) (*journal, error) {
	s, err := js.Open()
	if errors.Is(err, fs.ErrNotExist) {
		if marked, err := imageMarked(img); err != nil {
			return nil, err
		} else if marked {
			return nil, fmt.Errorf("%w (%s)", ErrJournalMissing, js.Name())
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to open journal: %w", err)
	}
	st, err := readState(s)
	if err != nil {
		return nil, err
	}
	if st == nil {
		// The journal is made durable before the image is touched, so an
		// invalid one belongs to an operation that never started.
		if marked, err := imageMarked(img); err != nil {
			return nil, err
		} else if marked {
			return nil, fmt.Errorf("%w: %s holds no valid state", ErrJournalCorrupt, js.Name())
		}
		if c, ok := s.(io.Closer); ok {
			c.Close()
		}
		if !removeStale {
			return nil, nil
		}
		if err := js.Remove(); err != nil {
			return nil, fmt.Errorf("failed to remove stale journal: %w", err)
		}
		return nil, nil
	}
	return &journal{s: s, st: st}, nil
}

// imageMarked reports whether the image has a marked header (LUKS\xde\xad,
// or LUKS2's busy requirement) at the start or, for qcow2, in its LUKS area.
func imageMarked(img File) (bool, error) {
	loc, err := locateLUKS(img)
	if errors.Is(err, ErrNotEncrypted) {
		return false, nil // a plain qcow2 cannot be mid-operation
	}
	if err != nil {
		return false, err
	}
	return header.Marked(img, loc.area.off, loc.area.limit)
}
