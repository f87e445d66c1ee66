package main

import (
	be "encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHostileKDFCost: a LUKS1 slot mutated to 2^31 PBKDF2 iterations (a
// quarter of an hour here) is refused at once, with the estimate and the
// flag that allows it, before any key derivation; nothing is written.
func TestHostileKDFCost(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "img.luks")
	fastEncrypt(t, key, randomFile(t, dir, "plain.raw", 1<<20), img)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var it [4]byte
	be.BigEndian.PutUint32(it[:], 1<<31)
	f.WriteAt(it[:], 208+4) // key slot 0's iterations
	f.Close()
	for _, args := range [][]string{
		{"decrypt", "-d", key, img, filepath.Join(dir, "out.raw")},
		{"test-key", "-d", key, img},
		{"ls", "-d", key, img},
		// The in-place commands' start unlocks the same header: the same
		// decision (they used to derive regardless).
		{"decrypt", "--in-place", "-d", key, img},
		{"reencrypt", "--batch-mode", "-d", key, fastIter, img},
	} {
		start := time.Now()
		r := cryptimg(t, "", args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "would take about") || !strings.Contains(r.stderr, "--allow-slow-kdf") {
			t.Errorf("%s: exit %d: %s", args[0], r.code, r.stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s took %v", args[0], d)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.raw")); err == nil {
		t.Error("decrypt left an output")
	}
	noFile(t, img+".cryptimg-journal")
}
