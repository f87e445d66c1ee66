package image

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

var (
	// ErrExists reports an output path that already exists when
	// overwriting was not asked for.
	ErrExists = errors.New("output file exists")
	// ErrNotRegularOutput refuses an output path that names a device, a
	// FIFO, a socket or a directory, itself or through symbolic links: an
	// output is written to a new file that is then renamed over the path,
	// which would replace a device node with a regular file instead of
	// writing to the device.
	ErrNotRegularOutput = errors.New("output exists and is not a regular file")
)

// CheckOutputPath is CreateOutput's check of path, to call before any
// work: a path that names something other than a regular file is refused
// (ErrNotRegularOutput), and an existing one unless force is set
// (ErrExists).
func CheckOutputPath(path string, force bool) error {
	if _, err := os.Lstat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	// A symbolic link is followed: /dev/disk/by-id names are links to
	// devices. A dangling one is left to the rename, which replaces it.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %w: it is %s", path, ErrNotRegularOutput, fileKind(st.Mode()))
	}
	if !force {
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	return nil
}

// fileKind names the type of a file that is not regular.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "of another kind"
}

// Output is a file being written under a temporary name next to its final
// path. Nothing appears under the final name until Commit, so an error, a
// crash or Ctrl-C never leaves a half-written image there.
type Output struct {
	*os.File
	path string
	tmp  string
	done bool
}

// CreateOutput creates the temporary file for path with mode 0600 (an image
// or a header holds key material). An existing path is refused unless force
// is set, and one that is not a regular file always (CheckOutputPath); it
// is replaced only when Commit succeeds, through a symbolic link if path is
// one.
func CreateOutput(path string, force bool) (*Output, error) {
	if err := CheckOutputPath(path, force); err != nil {
		return nil, err
	}
	// A symbolic link to an existing file is written through, as cp and
	// qemu-img write through one: the new file is made beside the link's
	// target and replaces the target, and the link stays. A dangling link
	// is replaced.
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		if target, err := filepath.EvalSymlinks(path); err == nil {
			path = target
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".cryptimg-*.tmp")
	if err != nil {
		return nil, fmt.Errorf("failed to create output: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &Output{File: f, path: path, tmp: f.Name()}, nil
}

// TempName returns the temporary file's path.
func (o *Output) TempName() string { return o.tmp }

// Commit flushes the file to stable storage, renames it to its final path
// and syncs the directory.
func (o *Output) Commit() error {
	if o.done {
		return errors.New("image: output already finished")
	}
	if err := o.File.Sync(); err != nil {
		o.Abort()
		return fmt.Errorf("failed to sync output: %w", err)
	}
	if err := o.File.Close(); err != nil {
		o.Abort()
		return fmt.Errorf("failed to close output: %w", err)
	}
	if err := os.Rename(o.tmp, o.path); err != nil {
		os.Remove(o.tmp)
		o.done = true
		return fmt.Errorf("failed to rename output: %w", err)
	}
	o.done = true
	if d, err := os.Open(filepath.Dir(o.path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort closes and removes the temporary file. It is safe to call after
// Commit, where it does nothing, so callers can defer it.
func (o *Output) Abort() {
	if o.done {
		return
	}
	o.done = true
	o.File.Close()
	os.Remove(o.tmp)
}
