package image

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestOutputCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.img")
	o, err := CreateOutput(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := o.Stat(); st.Mode().Perm() != 0o600 {
		t.Errorf("temporary output mode %v, want 0600", st.Mode().Perm())
	}
	o.WriteString("data")
	if _, err := os.Stat(path); err == nil {
		t.Fatal("final path exists before Commit")
	}
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	o.Abort() // after Commit: a no-op
	if b, err := os.ReadFile(path); err != nil || string(b) != "data" {
		t.Fatalf("after Commit: %q, %v", b, err)
	}
	if _, err := os.Stat(o.TempName()); err == nil {
		t.Error("temporary file still there after Commit")
	}

	// An existing file is refused without force and kept as it is.
	if _, err := CreateOutput(path, false); !errors.Is(err, ErrExists) {
		t.Fatalf("existing output: %v, want ErrExists", err)
	}
	o, err = CreateOutput(path, true)
	if err != nil {
		t.Fatal(err)
	}
	o.WriteString("new")
	o.Abort()
	if b, _ := os.ReadFile(path); string(b) != "data" {
		t.Errorf("Abort changed the existing file: %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("Abort left files behind: %v", entries)
	}
}

func TestSameFile(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a")
	os.WriteFile(a, nil, 0o600)
	os.Symlink(a, filepath.Join(dir, "link"))
	if !SameFile(a, filepath.Join(dir, "link")) || !SameFile(a, filepath.Join(dir, ".", "a")) {
		t.Error("SameFile misses the same file")
	}
	if SameFile(a, filepath.Join(dir, "missing")) {
		t.Error("SameFile matched a missing file")
	}
}
