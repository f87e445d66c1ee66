package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// zeroHead overwrites the first n bytes of path with zeros, as a stray dd
// or a partitioning tool does.
func zeroHead(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), 0); err != nil {
		t.Fatal(err)
	}
}

// lostPrimaryWarning is the line every command prints for an image whose
// primary LUKS2 header is lost and whose secondary is at off.
func lostPrimaryWarning(path, off string) string {
	return "cryptimg: warning: " + path + ": primary LUKS2 header damaged, using the secondary copy at " + off + "; run cryptimg repair\n"
}

// checkRecovered runs what must work on img, a LUKS2 image whose first
// 4 KiB are zeroed and whose secondary copy is at off, with the header in
// hdr ("" for an attached one): dump, test-key, decrypt (byte-exact to
// plain) and header-backup, each with the warning and none writing; then
// repair, after which the header reads from its primary without a warning.
func checkRecovered(t *testing.T, img, hdr, key, off string, plain []byte) {
	t.Helper()
	dir := t.TempDir()
	opt := func(args ...string) []string {
		if hdr != "" {
			args = append([]string{args[0], "--header", hdr}, args[1:]...)
		}
		return args
	}
	meta := img
	if hdr != "" {
		meta = hdr
	}
	before := fileSHA(t, meta)
	warning := lostPrimaryWarning(meta, off)
	for _, args := range [][]string{
		{"dump", img},
		{"test-key", "-d", key, img},
		{"decrypt", "-d", key, img, filepath.Join(dir, "out")},
		{"header-backup", img, filepath.Join(dir, "backup")},
	} {
		if r := mustRun(t, opt(args...)...); !strings.HasPrefix(r.stderr, warning) || strings.Count(r.stderr, "warning") != 1 {
			t.Errorf("%s: stderr %q, want the warning %q", args[0], r.stderr, warning)
		}
	}
	if got := mustRead(t, filepath.Join(dir, "out")); !bytes.Equal(got[:len(plain)], plain) {
		t.Error("decrypt: the plaintext differs")
	}
	if fileSHA(t, meta) != before {
		t.Error("a command that reads wrote to the header")
	}
	// The backup holds both copies made anew: it restores a primary.
	if b := readLUKS2(t, filepath.Join(dir, "backup")); b.Warning != "" {
		t.Errorf("backup: %s", b.Warning)
	}

	if r := mustRun(t, opt("repair", img)...); strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "repaired") {
		t.Errorf("repair: %q", r.stderr)
	}
	if h := readLUKS2(t, meta); h.Warning != "" || h.Recovered() != 0 {
		t.Errorf("after repair: %s (copy at %d)", h.Warning, h.Recovered())
	}
	if r := mustRun(t, opt("test-key", "-d", key, img)...); strings.Contains(r.stderr, "warning") {
		t.Errorf("after repair: %q", r.stderr)
	}
}

// TestLUKS2LostPrimary: a LUKS2 image (and a detached LUKS2 header) whose
// first 4 KiB are zeroed is read from its secondary copy by dump, test-key,
// decrypt (from a file, and streamed) and header-backup, each warning
// once; repair writes the primary
// back, and so does a key change (add-key). With the secondary damaged too,
// the image is not LUKS (exit 4), and a LUKS1 image with a zeroed phdr
// stays not LUKS.
func TestLUKS2LostPrimary(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second passphrase")
	src := randomFile(t, dir, "plain.raw", 64<<10)
	plain := mustRead(t, src)
	enc := []string{"encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter}

	t.Run("attached", func(t *testing.T) {
		img := filepath.Join(dir, "a.luks")
		mustRun(t, append(enc, src, img)...)
		zeroHead(t, img, 4096)
		// Streamed: decrypt - - reads the header area through the
		// secondary as well.
		r := cryptimg(t, string(mustRead(t, img)), "decrypt", "-d", key, "-", "-")
		if r.code != 0 || r.stdout != string(plain) || !strings.HasPrefix(r.stderr, lostPrimaryWarning("stdin", "16 KiB")) {
			t.Errorf("decrypt - -: exit %d, %d bytes, %q", r.code, len(r.stdout), r.stderr)
		}
		checkRecovered(t, img, "", key, "16 KiB", plain)
	})
	t.Run("detached", func(t *testing.T) {
		hdr, data := filepath.Join(dir, "d.hdr"), filepath.Join(dir, "d.data")
		mustRun(t, append(enc, "--header", hdr, src, data)...)
		zeroHead(t, hdr, 4096)
		checkRecovered(t, data, hdr, key, "16 KiB", plain)
	})
	t.Run("add-key", func(t *testing.T) {
		img := filepath.Join(dir, "k.luks")
		mustRun(t, append(enc, src, img)...)
		zeroHead(t, img, 4096)
		mustRun(t, "add-key", "-d", key, "--new-key-file", key2, fastIter, "--pbkdf", "pbkdf2", img)
		if h := readLUKS2(t, img); h.Warning != "" || h.Recovered() != 0 || !h.SlotActive(1) {
			t.Errorf("after add-key: %q, copy at %d", h.Warning, h.Recovered())
		}
	})
	t.Run("both-damaged", func(t *testing.T) {
		img := filepath.Join(dir, "b.luks")
		mustRun(t, append(enc, src, img)...)
		zeroHead(t, img, 4096)
		flipByte(t, img, 16384+4096+10) // the secondary's JSON
		if r := cryptimg(t, "", "dump", img); r.code != exitBadImage {
			t.Errorf("both copies damaged: exit %d, want %d (%s)", r.code, exitBadImage, r.stderr)
		}
	})
	t.Run("luks1", func(t *testing.T) {
		img := filepath.Join(dir, "l1.luks")
		mustRun(t, "encrypt", "-d", key, "--type", "luks1", fastIter, src, img)
		zeroHead(t, img, 4096)
		if r := cryptimg(t, "", "dump", img); r.code != exitBadImage || !strings.Contains(r.stderr, "not a LUKS") {
			t.Errorf("LUKS1, zeroed phdr: exit %d (%s)", r.code, r.stderr)
		}
	})
}

// TestLUKS2LostPrimaryCryptsetup: for every metadata size cryptsetup 2.6.1
// formats (16 KiB to 4 MiB), an image whose first 4 KiB are zeroed unlocks,
// decrypts byte-exact and backs up from its secondary copy; repair writes a
// primary that cryptsetup opens with --test-passphrase on its own (the
// secondary zeroed in a copy), and the repaired image as it is.
func TestLUKS2LostPrimaryCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	vk := randomFile(t, dir, "vk", 64)
	src := randomFile(t, dir, "plain.raw", 64<<10)
	plain := mustRead(t, src)
	// One payload under the volume key, at 16 MiB; each size's header is
	// cryptsetup's, over a copy of it, with the data where cryptimg put it.
	base := filepath.Join(dir, "base.luks")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--sector-size", "512",
		"--cipher", "aes-xts-plain64", "--volume-key-file", vk, src, base)
	for _, size := range []int64{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20} {
		name := fmt.Sprintf("%d KiB", size>>10)
		if size >= 1<<20 {
			name = fmt.Sprintf("%d MiB", size>>20)
		}
		t.Run(strings.ReplaceAll(name, " ", ""), func(t *testing.T) {
			t.Parallel()
			img := filepath.Join(t.TempDir(), "img")
			if err := os.WriteFile(img, mustRead(t, base), 0o600); err != nil {
				t.Fatal(err)
			}
			sh(t, cs, "luksFormat", "--type", "luks2", "--batch-mode", "--disable-locks", "--key-file", key,
				"--volume-key-file", vk, "--key-size", "512", "--cipher", "aes-xts-plain64", "--sector-size", "512",
				"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
				"--luks2-metadata-size", strconv.FormatInt(size, 10),
				"--luks2-keyslots-size", strconv.FormatInt(16<<20-2*size, 10), "--offset", "32768", img)
			if h := readLUKS2(t, img); h.MetadataSize() != size {
				t.Fatalf("cryptsetup made metadata of %d bytes", h.MetadataSize())
			}
			zeroHead(t, img, 4096)
			checkRecovered(t, img, "", key, name, plain)
			sh(t, cs, "open", "--test-passphrase", "--disable-locks", "--key-file", key, img)
			// The primary on its own: cryptsetup finds no secondary.
			alone := img + ".primary"
			if err := os.WriteFile(alone, mustRead(t, img), 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(alone, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt(make([]byte, 4096), size)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			sh(t, cs, "open", "--test-passphrase", "--disable-locks", "--key-file", key, alone)
		})
	}
}
