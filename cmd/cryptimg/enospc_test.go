package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

// A full disk mid-run gives one clear line naming the offset, exit 1, and
// no output or temporary file left behind.
func TestENOSPCRemovesOutput(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.Mkdir(small, 0o700)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=6m"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mount tmpfs: %v (CI runs as root and requires this test)", err)
		}
		t.Skipf("skipping: cannot mount a small tmpfs (needs root): %v", err)
	}
	defer unix.Unmount(small, unix.MNT_DETACH)
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	plain := randomFile(t, dir, "plain.raw", 16<<20)
	enc := filepath.Join(dir, "enc.luks")
	fastEncrypt(t, key, plain, enc)
	offset := regexp.MustCompile(`at offset \d+: no space left on device`)
	for _, args := range [][]string{
		{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, filepath.Join(small, "out.luks")},
		{"decrypt", "-d", key, enc, filepath.Join(small, "out.raw")},
	} {
		r := cryptimg(t, "", args...)
		if r.code != exitFailure {
			t.Fatalf("%s on a full disk: exit %d, want 1: %s", args[0], r.code, r.stderr)
		}
		if !offset.MatchString(r.stderr) || !regexp.MustCompile(`^cryptimg: error: [^\n]*\n$`).MatchString(r.stderr) {
			t.Errorf("%s: want one line naming the offset, got %q", args[0], r.stderr)
		}
		noFile(t, args[len(args)-1])
		if entries, _ := os.ReadDir(small); len(entries) != 0 {
			t.Errorf("%s left %v on the full file system", args[0], entries)
		}
	}
}
