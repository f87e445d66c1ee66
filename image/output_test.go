package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cryptimg/cryptimg/header"
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

// TestCheckOutputPath: what CreateOutput refuses, and that a refused path
// is left alone.
func TestCheckOutputPath(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o600)
	linkFifo, linkFile, dangling := filepath.Join(dir, "l1"), filepath.Join(dir, "l2"), filepath.Join(dir, "l3")
	os.Symlink(fifo, linkFifo)
	os.Symlink(file, linkFile)
	os.Symlink(filepath.Join(dir, "nothing"), dangling)
	for _, c := range []struct {
		path  string
		force bool
		want  error
	}{
		{filepath.Join(dir, "new"), false, nil},
		{file, false, ErrExists},
		{file, true, nil},
		{linkFile, true, nil},
		{dangling, false, ErrExists},
		{dangling, true, nil},
		{fifo, true, ErrNotRegularOutput},
		{fifo, false, ErrNotRegularOutput},
		{linkFifo, true, ErrNotRegularOutput},
		{dir, true, ErrNotRegularOutput},
	} {
		err := CheckOutputPath(c.path, c.force)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("CheckOutputPath(%s, %v) = %v, want %v", filepath.Base(c.path), c.force, err, c.want)
		}
		if c.want == ErrNotRegularOutput {
			if _, err := CreateOutput(c.path, c.force); !errors.Is(err, ErrNotRegularOutput) {
				t.Errorf("CreateOutput(%s, %v) = %v", filepath.Base(c.path), c.force, err)
			}
		}
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO changed: %v, %v", st, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Errorf("files left behind: %v", entries)
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

// TestFormatHeaderAndEncryptTo: encryption under a volume key the caller
// chose, then decryption with the key unlocked from the result.
func TestFormatHeaderAndEncryptTo(t *testing.T) {
	dir := t.TempDir()
	plainBytes := make([]byte, 256<<10)
	rand.Read(plainBytes)
	src := filepath.Join(dir, "plain.raw")
	os.WriteFile(src, plainBytes, 0o600)
	vk := make([]byte, 64)
	rand.Read(vk)
	f, err := FormatHeader([]byte("pw"), header.Params{Cipher: "aes-xts-plain64", VolumeKey: vk, ForceIterations: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Clear()
	if !bytes.Equal(f.Key.VolumeKey(), vk) || f.Header.(*header.LUKS1).KeyBytes != 64 {
		t.Fatalf("FormatHeader did not take the volume key (%d bytes)", f.Header.(*header.LUKS1).KeyBytes)
	}
	in, _ := os.Open(src)
	defer in.Close()
	p, err := OpenPlain(in)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := os.Create(filepath.Join(dir, "enc.luks"))
	defer out.Close()
	if err := EncryptTo(context.Background(), out, p, f, EncryptOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte("pw"), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	if !bytes.Equal(k.VolumeKey(), vk) {
		t.Fatal("unlocked volume key differs")
	}
	back, _ := os.Create(filepath.Join(dir, "back.raw"))
	defer back.Close()
	if err := e.Decrypt(context.Background(), back, k, Pipeline{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(back.Name())
	if !bytes.Equal(got, plainBytes) {
		t.Fatal("round trip differs")
	}
	if _, err := FormatHeader([]byte("pw"), header.Params{VolumeKey: vk}); err == nil {
		t.Fatal("a 512-bit volume key for the default ESSIV cipher was accepted")
	}
}

// TestOutputThroughSymlink: an output path that is a symbolic link to a
// file replaces the file and keeps the link, with the temporary file made
// beside the target (in another directory here); a dangling link is
// replaced by the new file.
func TestOutputThroughSymlink(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	target := filepath.Join(other, "target.raw")
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "out.raw")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	o, err := CreateOutput(link, true)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(o.TempName()) != other {
		t.Errorf("temporary file %s, want it beside the target in %s", o.TempName(), other)
	}
	o.WriteString("new")
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v, %v", st, err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "new" {
		t.Fatalf("target holds %q, %v; want the new output", b, err)
	}
	if st, _ := os.Stat(target); st.Mode().Perm() != 0o600 {
		t.Errorf("target mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := CreateOutput(link, false); !errors.Is(err, ErrExists) {
		t.Errorf("a link to an existing file without force: %v, want ErrExists", err)
	}

	dangling := filepath.Join(dir, "dangling.raw")
	os.Symlink(filepath.Join(dir, "nothing"), dangling)
	o, err = CreateOutput(dangling, true)
	if err != nil {
		t.Fatal(err)
	}
	o.WriteString("x")
	if err := o.Commit(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(dangling); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("dangling link: %v, %v; want a regular file in its place", st, err)
	}
	for _, d := range []string{dir, other} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".tmp") {
				t.Errorf("temporary file left in %s: %s", d, e.Name())
			}
		}
	}
}
