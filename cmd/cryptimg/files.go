package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
)

// openInput opens an existing regular file for reading, unlocked: images
// and headers are opened through openForRead (lock.go). What is not a
// regular file is refused before the open, which on a FIFO would wait for
// a writer.
func openInput(path string) (*os.File, error) {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return openRegular(path, os.O_RDONLY)
}

// openSource opens an existing image file to read from under a shared
// lock, refusing one with an unfinished reencrypt or in-place operation
// (see checkNotPending).
func openSource(path string) (*os.File, error) {
	f, err := openForRead(path)
	if err != nil {
		return nil, err
	}
	if err := checkNotPending(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkNotPending refuses an input with an unfinished reencrypt or
// in-place operation: its bytes are half converted, so reading it as
// plaintext or ciphertext would give garbage.
func checkNotPending(f *os.File, path string) error {
	busy, err := image.Pending(f, image.Sidecar(path))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if busy != nil {
		return busy
	}
	return nil
}

// checkOutputPath refuses an output that is the input, that is not a
// regular file, or that exists without --force, before any secret is
// asked for.
func checkOutputPath(in, out string, force bool) error {
	if image.SameFile(in, out) {
		return usagef("%s: %w", out, image.ErrSameFile)
	}
	if err := image.CheckOutputPath(out, force); err != nil {
		return usagef("%w", err)
	}
	return nil
}

// createOutput starts a temporary output file that is removed if the
// command fails or the process is interrupted. The caller defers
// done() and calls o.Commit on success.
func createOutput(g *globalOptions, path string, force bool) (o *image.Output, done func(), err error) {
	held, err := lockReplaced(path, force)
	if err != nil {
		return nil, nil, err
	}
	o, err = image.CreateOutput(path, force)
	if err != nil {
		held.Close()
		return nil, nil, err
	}
	unregister := g.cleanup.add(func() { os.Remove(o.TempName()) })
	return o, func() {
		o.Abort()
		unregister()
		held.Close()
	}, nil
}

// lockReplaced locks an existing OUTPUT that --force will replace,
// exclusively, until the command ends: it may be an image another command
// has open (a mount, a decrypt), whose writes would go on into the
// replaced file and be lost, so that is refused as busy instead. It
// returns nil (whose Close does nothing) when there is nothing to lock.
func lockReplaced(path string, force bool) (*os.File, error) {
	if !force {
		return nil, nil
	}
	// Stat first: opening a FIFO would wait for a writer (and
	// CreateOutput refuses what is not a regular file).
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil
	}
	if err := lockFile(f, path, filelock.Exclusive); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// commitOutputs renames a finished image and its detached header (hdr may
// be nil) into place: the data first, as a header without its data is no
// use to anyone, so neither appears until both are complete.
func commitOutputs(dst, hdr *image.Output) error {
	if err := dst.Commit(); err != nil {
		return err
	}
	if hdr != nil {
		return hdr.Commit()
	}
	return nil
}

// opProgress adapts the image layer's (done, total) callback to a
// progress reporter, created once the total is known.
type opProgress struct {
	g   *globalOptions
	op  string
	rep progressReporter
}

func (g *globalOptions) newProgress(op string) *opProgress { return &opProgress{g: g, op: op} }

func (p *opProgress) update(done, total int64) {
	if p.rep == nil {
		mode, err := parseProgressMode(p.g.progress)
		if err != nil {
			mode = "none"
		}
		p.rep = newProgress(mode, p.g.quiet, p.g.stderr, p.g.stderrIsTerminal(), p.op, total)
	}
	p.rep.Update(done)
}

// finish ends the display; a failed operation gets no final summary line.
func (p *opProgress) finish(ok bool) {
	if p.rep != nil && ok {
		p.rep.Finish()
	}
}

// openRW opens an existing regular file read-write.
func openRW(path string) (*os.File, error) { return openRegular(path, os.O_RDWR) }

// openRegular opens path with flag and refuses what is not a regular file
// once open (a path swapped after a check cannot slip through).
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}

// refuseLUKS refuses an input that already starts with a LUKS header,
// unless forced: encrypting it again is almost always a mistake, such as a
// pipeline step retried after it had succeeded.
func refuseLUKS(f io.ReaderAt, name string, force bool, why string) error {
	if force || !looksLUKS(f) {
		return nil
	}
	return usagef("%s is already a LUKS image: %s", name, why)
}

// looksLUKS reports whether f starts with a LUKS magic, or holds a LUKS2
// header whose primary copy is lost but whose secondary copy header.Read
// finds (encrypting that would bury a header that repair could restore).
func looksLUKS(f io.ReaderAt) bool {
	var magic [6]byte
	if _, err := f.ReadAt(magic[:], 0); err == nil && header.IsLUKSMagic(magic[:]) {
		return true
	}
	_, err := header.Read(f, 0, math.MaxInt64)
	return err == nil || errors.Is(err, header.ErrMarked)
}

// checkHeaderOutput refuses a --header file that is the input or the
// output, before any secret is asked for: renamed into place after the
// data, the header would replace the ciphertext (or the input).
func checkHeaderOutput(hdr, in, out string, force bool) error {
	if hdr == "" {
		return nil
	}
	for _, p := range []string{in, out} {
		if samePath(hdr, p) {
			return usagef("--header %s: %v", hdr, image.ErrSameFile)
		}
	}
	if err := image.CheckOutputPath(hdr, force); err != nil {
		return usagef("--header: %w", err)
	}
	return nil
}

// samePath reports whether two paths name the same file, existing or
// not (yet).
func samePath(a, b string) bool {
	if image.SameFile(a, b) {
		return true
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}

func readAllFrom(g *globalOptions, path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(g.stdin)
	}
	return os.ReadFile(path)
}

// writeNewFile creates path (refusing an existing one) with b.
func writeNewFile(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
