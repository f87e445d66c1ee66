package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/diskfs/go-diskfs/backend"
)

// Storage presents a View as a go-diskfs backend.Storage, so
// diskfs.OpenBackend can read (and, unless read-only, write) partition
// tables and filesystems inside an encrypted image without plaintext on
// disk. It reports a regular file of the view's virtual size, has no OS
// file behind it (Sys gives backend.ErrNotSuitable) and no path.
//
// ReadAt, WriteAt and Size are safe for concurrent use; Read and Seek
// share one position, guarded by a mutex.
type Storage struct {
	View
	name     string
	readOnly bool

	mu  sync.Mutex
	pos int64

	failMu sync.Mutex
	failed error // the first read error
}

// ReadAt reads from the view, remembering the first failure (see
// ReadError).
func (s *Storage) ReadAt(p []byte, off int64) (int, error) {
	n, err := s.View.ReadAt(p, off)
	s.noteErr(err)
	return n, err
}

func (s *Storage) noteErr(err error) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if s.failed == nil {
		s.failed = err
	}
}

// ReadError is the first error a read of the view returned, or nil.
// go-diskfs reports a failed read of a filesystem's metadata as a plain
// message (or a missing path), dropping the cause; this keeps it, so a
// caller can tell "no such file" from an unreadable sector (an integrity
// tag mismatch, as a *CorruptError).
func (s *Storage) ReadError() error {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.failed
}

var (
	_ backend.Storage      = (*Storage)(nil)
	_ backend.WritableFile = (*Storage)(nil)
)

// NewStorage wraps v; name is what Stat reports as the file name. A
// read-only Storage makes Writable fail with backend.ErrIncorrectOpenMode,
// which go-diskfs reports at the first write.
func NewStorage(v View, name string, readOnly bool) *Storage {
	return &Storage{View: v, name: name, readOnly: readOnly}
}

// Stat reports a regular file of the virtual size: go-diskfs treats any
// other mode as a block device and then needs ioctls.
func (s *Storage) Stat() (fs.FileInfo, error) { return storageInfo{s}, nil }

// Read reads from the current position, as os.File.Read does.
func (s *Storage) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pos >= s.Size() {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n, err := s.ReadAt(p, s.pos)
	s.pos += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek sets the position for Read; io.SeekEnd is relative to the virtual
// size, which go-diskfs uses to find the backup GPT.
func (s *Storage) Seek(offset int64, whence int) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = s.pos
	case io.SeekEnd:
		base = s.Size()
	default:
		return 0, fmt.Errorf("image: invalid whence %d", whence)
	}
	if base+offset < 0 {
		return 0, errors.New("image: seek to a negative position")
	}
	s.pos = base + offset
	return s.pos, nil
}

// Sys returns backend.ErrNotSuitable: there is no OS file holding the
// plaintext.
func (s *Storage) Sys() (*os.File, error) { return nil, backend.ErrNotSuitable }

// Writable returns s itself, or backend.ErrIncorrectOpenMode when read-only.
func (s *Storage) Writable() (backend.WritableFile, error) {
	if s.readOnly {
		return nil, backend.ErrIncorrectOpenMode
	}
	return s, nil
}

// Path returns "": the plaintext has no path.
func (s *Storage) Path() string { return "" }

type storageInfo struct{ s *Storage }

func (i storageInfo) Name() string { return i.s.name }
func (i storageInfo) Size() int64  { return i.s.Size() }
func (i storageInfo) Mode() fs.FileMode {
	if i.s.readOnly {
		return 0o444
	}
	return 0o644
}
func (i storageInfo) ModTime() time.Time { return time.Time{} }
func (i storageInfo) IsDir() bool        { return false }
func (i storageInfo) Sys() any           { return nil }
