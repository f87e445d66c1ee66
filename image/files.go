package image

// General file helpers of the package: sizes, syncs and names of files
// and of the File interface the in-place operations use.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// syncDir syncs the directory holding path, so that a file created or
// removed there stays so.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("failed to sync directory of %s: %w", path, err)
	}
	return nil
}

// syncErr syncs s, naming it what in the error.
func syncErr(s File, what string) error {
	if err := s.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", what, err)
	}
	return nil
}

// writeSyncAt writes b at off of s and syncs it, naming it what in errors.
func writeSyncAt(s File, b []byte, off int64, what string) error {
	if _, err := s.WriteAt(b, off); err != nil {
		return fmt.Errorf("failed to write %s: %w", what, err)
	}
	return syncErr(s, what)
}

// closeStorage closes s if it can be closed.
func closeStorage(s File) {
	if c, ok := s.(io.Closer); ok {
		c.Close()
	}
}

// storageSize is the size of s.
func storageSize(s File) (int64, error) {
	st, err := s.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// nameOf names a file in messages.
func nameOf(f any) string {
	if n, ok := f.(interface{ Name() string }); ok {
		return n.Name()
	}
	return "the image"
}
