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

// TestENOSPCInPlaceJournal: encrypt --in-place on a disk too full for its
// journal fails in one line, leaves no journal and the image as it was,
// and offers no --resume (which used to answer "no unfinished operation
// to resume"). Where the journal fits and the image's growth does not,
// the journal stays and --resume takes it up.
func TestENOSPCInPlaceJournal(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.Mkdir(small, 0o700)
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=3m"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mount tmpfs: %v (CI runs as root and requires this test)", err)
		}
		t.Skipf("skipping: cannot mount a small tmpfs (needs root): %v", err)
	}
	defer unix.Unmount(small, unix.MNT_DETACH)
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	img := filepath.Join(small, "img.raw")
	journal := img + ".cryptimg-journal"
	args := []string{"encrypt", "--in-place", "-d", key, fastIter, img}

	plain := randomFile(t, dir, "plain.raw", 2832*1024) // no room for the journal
	copyFile(t, plain, img)
	r := cryptimg(t, "", args...)
	if r.code != exitFailure || !regexp.MustCompile(`^cryptimg: error: [^\n]*no space left on device\n$`).MatchString(r.stderr) ||
		regexp.MustCompile(`--resume`).MatchString(r.stderr) {
		t.Errorf("no room for the journal: exit %d, %q", r.code, r.stderr)
	}
	noFile(t, journal)
	sameContent(t, plain, img)

	os.Remove(img)
	plain = randomFile(t, dir, "half.raw", 512<<10) // the journal fits, the grown image not
	copyFile(t, plain, img)
	r = cryptimg(t, "", args...)
	if r.code != exitFailure || !regexp.MustCompile(`--resume`).MatchString(r.stderr) {
		t.Fatalf("no room to grow: exit %d, %q", r.code, r.stderr)
	}
	r = cryptimg(t, "", "encrypt", "--in-place", "--resume", "-d", key, img)
	if r.code != exitFailure || !regexp.MustCompile(`resuming`).MatchString(r.stderr) || regexp.MustCompile(`no unfinished`).MatchString(r.stderr) {
		t.Errorf("--resume after no room to grow: exit %d, %q", r.code, r.stderr)
	}
}
