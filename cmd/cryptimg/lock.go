package main

// Every command that reads or writes an image or a detached header opens
// it through openForRead (a shared lock) or openForWrite (an exclusive
// lock), or locks what it opened with lockFile; the lock lasts until the
// command exits (for open: until the mount goes). docs/ARCHITECTURE.md
// lists which command takes which.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
)

// openForRead opens an existing regular file (an image or a header) for
// reading under a shared lock: other readers go on, writers are refused,
// and it is refused while one writes.
func openForRead(path string) (*os.File, error) {
	f, err := openInput(path)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, path, filelock.Shared); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openForWrite opens an existing regular file read-write under an
// exclusive lock: no other cryptimg (or cryptsetup) reads or writes it
// meanwhile.
func openForWrite(path string) (*os.File, error) {
	f, err := openRW(path)
	if err != nil {
		return nil, err
	}
	if err := lockFile(f, path, filelock.Exclusive); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockFile takes a lock of mode m on f, opened from path; a conflict is
// exit 5 with the holder named.
func lockFile(f *os.File, path string, m filelock.Mode) error {
	err := filelock.Lock(f, path, m)
	var le *filelock.LockedError
	if errors.As(err, &le) {
		return &busyError{msg: busyMessage(le), err: le}
	}
	return err
}

// busyError is a lock held elsewhere, in the CLI's words; it matches
// filelock.ErrLocked (exit 5).
type busyError struct {
	msg string
	err *filelock.LockedError
}

func (e *busyError) Error() string { return e.msg }
func (e *busyError) Unwrap() error { return e.err }

// busyMessage says who holds path:
//
//	race.luks is busy: opened read-write by pid 4242 (cryptimg open, mounted at /tmp/mnt)
func busyMessage(le *filelock.LockedError) string {
	if len(le.Holders) == 0 {
		if le.Mode == filelock.Shared {
			// Only an exclusive lock stops a shared one.
			return le.Path + " is busy: opened read-write by another process"
		}
		return le.Path + " is busy: in use by another process"
	}
	h := le.Holders[0]
	how := "read-only"
	if h.Mode == filelock.Exclusive {
		how = "read-write"
	}
	s := fmt.Sprintf("%s is busy: opened %s by pid %d", le.Path, how, h.PID)
	var what []string
	if c := holderCommand(h); c != "" {
		what = append(what, c)
	}
	if m := mountOf(h.PID); m != "" {
		what = append(what, "mounted at "+m)
	}
	if len(what) > 0 {
		s += " (" + strings.Join(what, ", ") + ")"
	}
	switch n := len(le.Holders) - 1; n {
	case 0:
	case 1:
		s += " and 1 other process"
	default:
		s += fmt.Sprintf(" and %d other processes", n)
	}
	return s
}

// holderCommand names the holder's program, and for cryptimg its command
// ("cryptimg open").
func holderCommand(h filelock.Holder) string {
	p := h.Program()
	if p != "cryptimg" {
		return p
	}
	names := commandNames()
	if i := slices.IndexFunc(h.Args[1:], func(a string) bool { return names[a] }); i >= 0 {
		return p + " " + h.Args[1+i]
	}
	return p
}

var (
	commandNamesOnce sync.Once
	commandNamesSet  map[string]bool
)

// commandNames are cryptimg's commands, to find one in a command line
// whatever global flags precede it.
func commandNames() map[string]bool {
	commandNamesOnce.Do(func() {
		commandNamesSet = map[string]bool{}
		for _, c := range newRootCommand(&globalOptions{}).Commands() {
			commandNamesSet[c.Name()] = true
		}
	})
	return commandNamesSet
}

// opCommand is the command line that runs (or resumes) each operation.
var opCommand = map[image.Op]string{image.OpReencrypt: "reencrypt", image.OpEncrypt: "encrypt --in-place", image.OpDecrypt: "decrypt --in-place", image.OpConvert: "convert"}

// lockOp opens the image at path for op under an exclusive lock (see
// openForWrite) and reports whether an unfinished op is to be continued;
// it refuses an unfinished operation of another kind, and --resume
// (resume) with none.
func lockOp(path string, op image.Op, resume bool) (f *os.File, resuming bool, err error) {
	if f, err = openForWrite(path); err != nil {
		return nil, false, err
	}
	p, err := image.Pending(f, image.Sidecar(path))
	switch {
	case err != nil:
		err = fmt.Errorf("%s: %w", path, err)
	case p != nil && p.Op != op:
		err = fmt.Errorf("%s: %w", path, p)
	case p == nil && resume:
		err = fmt.Errorf("%s: %w", path, image.ErrNothingToResume)
	}
	if err != nil {
		f.Close()
		return nil, false, err
	}
	return f, p != nil, nil
}

// openLocked opens path for writing (see openForWrite), and refuses an
// image with an unfinished in-place operation: its header is about to be
// rewritten by the resumed operation.
func openLocked(path string) (*os.File, error) {
	f, err := openForWrite(path)
	if err != nil {
		return nil, err
	}
	p, err := image.Pending(f, image.Sidecar(path))
	if err == nil && p != nil {
		err = p
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
