package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDetachedHeader: --header FILE keeps the header and key slots in FILE
// and the data from offset 0 of the image, as cryptsetup's --header does.
// cryptimg's detached headers, LUKS1 and LUKS2, are read by cryptsetup
// (luksDump, open --test-passphrase, LUKS2's offline decryption), the key
// and header commands change only the header file, and cryptimg decrypts
// what cryptsetup's offline encryption with a detached header wrote.
func TestDetachedHeader(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second passphrase")
	plain := randomFile(t, dir, "plain.raw", 4<<20)
	for _, c := range []struct {
		typ, payload string
		opts         []string
	}{
		{"luks1", "Payload offset:\t0", nil},
		{"luks2", "offset: 0 [bytes]", []string{"--pbkdf", "pbkdf2"}},
	} {
		t.Run(c.typ, func(t *testing.T) {
			hdr, data := filepath.Join(dir, c.typ+".hdr"), filepath.Join(dir, c.typ+".data")
			mustRun(t, append(append([]string{"encrypt", "-d", key, "--type", c.typ, fastIter, "--header", hdr}, c.opts...), plain, data)...)
			if st, _ := os.Stat(data); st.Size() != 4<<20 {
				t.Fatalf("the data file is %d bytes, want the plaintext's 4 MiB", st.Size())
			}
			if st, _ := os.Stat(hdr); st.Mode().Perm() != 0o600 {
				t.Errorf("header file mode %v, want 0600", st.Mode().Perm())
			}
			dump := sh(t, cs, "luksDump", hdr)
			if !strings.Contains(dump, c.payload) {
				t.Errorf("luksDump of the header lacks %q:\n%s", c.payload, dump)
			}
			// LUKS2's dump is luksDump's byte for byte; LUKS1's differs in
			// whitespace only.
			got := mustRun(t, "dump", "--header", hdr, data).stdout
			norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			if (c.typ == "luks2" && got != dump) || strings.Replace(norm(got), "Payload size: 0 bytes ", "", 1) != norm(dump) {
				t.Errorf("dump --header differs from luksDump:\n%s\nwant\n%s", got, dump)
			}
			sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key, data)
			out := filepath.Join(dir, c.typ+".out")
			mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
			sameContent(t, plain, out)

			// Key and header commands change the header file only.
			dataSum := fileSHA(t, data)
			mustRun(t, append([]string{"add-key", "-q", "-d", key, "--new-key-file", key2, fastIter, "--header", hdr, data}, c.opts...)...)
			sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key2, data)
			mustRun(t, "test-key", "-d", key2, "--header", hdr, data)
			if got, want := strings.TrimSpace(mustRun(t, "uuid", "--header", hdr, data).stdout), strings.TrimSpace(sh(t, cs, "luksUUID", hdr)); got != want {
				t.Errorf("uuid --header %q, cryptsetup %q", got, want)
			}
			mustRun(t, "is-luks", "--type", c.typ, "--header", hdr, data)
			mustRun(t, "is-luks", hdr) // a detached header is LUKS, as for isLuks
			ours, theirs := filepath.Join(dir, c.typ+".bk"), filepath.Join(dir, c.typ+".csbk")
			mustRun(t, "header-backup", "--header", hdr, data, ours)
			sh(t, cs, "luksHeaderBackup", hdr, "--header-backup-file", theirs)
			sameContent(t, ours, theirs)
			// Restore the header file from its backup after damaging it.
			flipByte(t, hdr, 300)
			mustRun(t, "header-restore", "-q", "--header", hdr, data, ours)
			mustRun(t, "test-key", "-d", key2, "--header", hdr, data)
			mustRun(t, "remove-key", "-q", "-d", key, "--header", hdr, data)
			if csCode(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key, data) == 0 {
				t.Error("the removed key still opens")
			}
			if fileSHA(t, data) != dataSum {
				t.Error("a key command changed the data file")
			}

			// The header file alone is not an image.
			r := cryptimg(t, "", "decrypt", "-d", key2, hdr, filepath.Join(dir, "x"))
			if r.code != exitBadImage || !strings.Contains(r.stderr, "detached") || !strings.Contains(r.stderr, "--header") {
				t.Errorf("decrypt of the header file: exit %d, %s", r.code, r.stderr)
			}
			if c.typ == "luks2" {
				requireRoot(t) // cryptsetup's offline reencryption
				sh(t, cs, "reencrypt", "--decrypt", "--header", hdr, "--key-file", key2, "--batch-mode", "--disable-locks", "--force-offline-reencrypt", data)
				sameContent(t, plain, data)
			}
		})
	}
	for _, args := range [][]string{
		{"encrypt", "--header", "h", "--partition", "2", "a", "b"},
		{"encrypt", "-O", "qcow2", "-d", key, "--header", filepath.Join(dir, "q.hdr"), plain, filepath.Join(dir, "q.qcow2")},
	} {
		if r := cryptimg(t, "", args...); r.code != exitFailure || !strings.Contains(r.stderr, "header") {
			t.Errorf("%v: exit %d, %s", args, r.code, r.stderr)
		}
	}
	noFile(t, filepath.Join(dir, "q.hdr"))
	noFile(t, filepath.Join(dir, "q.qcow2"))
}

// TestDetachedFromCryptsetup: cryptsetup's offline encryption with a
// detached LUKS2 header (root only) decrypts byte-exact in cryptimg.
func TestDetachedFromCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	requireRoot(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 4<<20)
	data, hdr := filepath.Join(dir, "data"), filepath.Join(dir, "hdr")
	copyFile(t, plain, data)
	sh(t, cs, "reencrypt", "--encrypt", "--type", "luks2", "--header", hdr, "--key-file", key, "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--batch-mode", "--disable-locks", data)
	if a, b := fileSHA(t, data), fileSHA(t, plain); a == b {
		t.Fatal("cryptsetup did not encrypt the data")
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
	sameContent(t, plain, out)
	b, _ := os.ReadFile(out)
	if !bytes.Equal(b, mustRead(t, plain)) {
		t.Fatal("plaintext differs")
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDetachedViews: ls and cat read a disk image whose LUKS2 header is
// detached.
func TestDetachedViews(t *testing.T) {
	dir := t.TempDir()
	plain := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "ls passphrase")
	hdr, data := filepath.Join(dir, "hdr"), filepath.Join(dir, "data")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--header", hdr, plain, data)
	if r := mustRun(t, "ls", "-d", key, "--header", hdr, data); !strings.Contains(r.stdout, "table: gpt") {
		t.Errorf("ls --header:\n%s", r.stdout)
	}
	if r := mustRun(t, "cat", "-d", key, "--header", hdr, data, "1:/hello.txt"); r.stdout != testDisk.espFiles["hello.txt"] {
		t.Errorf("cat --header: %q", r.stdout)
	}
	if r := cryptimg(t, "", "ls", "-d", key, data); r.code == 0 {
		t.Error("ls of the data without its header worked")
	}
}

// TestDetachedOpen: open --header mounts the plaintext of a data file whose
// header is detached (through the background child, which gets --header
// too), and what is written there decrypts with the header.
func TestDetachedOpen(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 4<<20)
	plain := randomFile(t, fx.dir, "random.raw", 4<<20)
	hdr := filepath.Join(fx.dir, "disk.hdr")
	os.Remove(fx.img)
	mustRun(t, "encrypt", "-d", fx.key, fastIter, "--header", hdr, plain, fx.img)
	fx.openBackground(t, "--header", hdr)
	want := mustRead(t, plain)
	got := mustRead(t, filepath.Join(fx.mnt, "disk.raw"))
	if !bytes.Equal(got, want) {
		t.Fatal("the mounted plaintext differs")
	}
	w := []byte("written through a detached header")
	f, err := os.OpenFile(filepath.Join(fx.mnt, "disk.raw"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(w, 12345); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runBin(t, binary(t), "close", fx.mnt)
	copy(want[12345:], w)
	out := filepath.Join(fx.dir, "out.raw")
	mustRun(t, "decrypt", "-d", fx.key, "--header", hdr, fx.img, out)
	if !bytes.Equal(mustRead(t, out), want) {
		t.Fatal("the write through the mount did not land")
	}
}

// TestDetachedReencrypt: reencrypt --header gives a detached LUKS1 or LUKS2
// image a new volume key: the header file is marked, then replaced, and the
// data file converted where it lies. Killed at random moments and run
// again, it finishes with the data intact; cryptsetup opens the result.
func TestDetachedReencrypt(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 24<<20)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			hdr, data := filepath.Join(dir, typ+".hdr"), filepath.Join(dir, typ+".data")
			mustRun(t, "encrypt", "-d", key, "--type", typ, "--pbkdf", "pbkdf2", fastIter, "--header", hdr, plain, data)
			args := []string{"reencrypt", "-q", "-d", key, "--pbkdf", "pbkdf2", fastIter, "--hotzone-size", "1048576", "--header", hdr, data}
			start := time.Now()
			mustRun(t, args...)
			full := time.Since(start)
			check := func() {
				t.Helper()
				out := filepath.Join(dir, typ+".out")
				os.Remove(out)
				mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
				sameContent(t, plain, out)
			}
			check()
			sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key, data)
			rng := rand.New(rand.NewPCG(7, uint64(len(typ))))
			killed := 0
			for range 8 {
				if !runKilled(t, time.Duration(rng.Int64N(int64(full)+1)), args...) {
					killed++
					// The header file holds the old header, marked, or
					// the new one: never anything else.
					if r := cryptimg(t, "", "dump", "--header", hdr, data); r.code != 0 && r.code != exitBusy {
						t.Fatalf("after a kill: dump --header exits %d: %s", r.code, r.stderr)
					}
					mustRun(t, args...)
				}
				check()
			}
			t.Logf("%s: %d of 8 runs killed (a clean run takes %v)", typ, killed, full)
		})
	}
}

// TestDetachedInPlace: encrypt --in-place --header encrypts the data file
// where it lies and writes the header file at the end; cryptsetup opens
// and (LUKS2, root) decrypts the result offline; decrypt --in-place
// --header gives the plaintext back and empties the header file. Both are
// killed at random moments and run again.
func TestDetachedInPlace(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 16<<20)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			hdr, data := filepath.Join(dir, typ+".hdr"), filepath.Join(dir, typ+".data")
			copyFile(t, plain, data)
			enc := []string{"encrypt", "--in-place", "-q", "-d", key, "--type", typ, "--pbkdf", "pbkdf2", fastIter, "--hotzone-size", "1048576", "--header", hdr, data}
			dec := []string{"decrypt", "--in-place", "-d", key, "--hotzone-size", "1048576", "--header", hdr, data}
			rng := rand.New(rand.NewPCG(11, uint64(len(typ))))
			// Up to three kills, each at a random moment of the first
			// second, then the same command again to the end. A kill
			// that lands after the run finished (journal removed, header
			// file in its final state) but before the process exited
			// ends it too: running the command again would rightly be
			// refused, as the image is no longer what it expects.
			finished := func(wantHeader bool) bool {
				if _, err := os.Stat(data + ".cryptimg-journal"); err == nil {
					return false
				}
				st, err := os.Stat(hdr)
				return err == nil && (st.Size() > 0) == wantHeader
			}
			killedRun := func(args []string) {
				t.Helper()
				for range 3 {
					if runKilled(t, time.Duration(rng.Int64N(int64(time.Second))), args...) || finished(args[0] == "encrypt") {
						return
					}
				}
				if !runKilled(t, time.Hour, args...) {
					t.Fatal("the last run did not finish")
				}
			}
			killedRun(enc)
			noFile(t, data+".cryptimg-journal")
			if st, _ := os.Stat(data); st.Size() != 16<<20 {
				t.Fatalf("data file is %d bytes", st.Size())
			}
			sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key, data)
			out := filepath.Join(dir, typ+".out")
			mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
			sameContent(t, plain, out)
			if typ == "luks2" && os.Geteuid() == 0 {
				cp, cph := filepath.Join(dir, "cp.data"), filepath.Join(dir, "cp.hdr")
				copyFile(t, data, cp)
				copyFile(t, hdr, cph)
				sh(t, cs, "reencrypt", "--decrypt", "--header", cph, "--key-file", key, "--batch-mode", "--disable-locks", "--force-offline-reencrypt", cp)
				sameContent(t, plain, cp)
			}
			killedRun(dec)
			noFile(t, data+".cryptimg-journal")
			sameContent(t, plain, data)
			if st, _ := os.Stat(hdr); st.Size() != 0 {
				t.Errorf("the header file keeps %d bytes", st.Size())
			}
		})
	}
	// An existing header file is not overwritten.
	data := filepath.Join(dir, "x.data")
	copyFile(t, plain, data)
	old := writeFile(t, filepath.Join(dir, "old.hdr"), "keep me")
	if r := cryptimg(t, "", "encrypt", "--in-place", "-q", "-d", key, fastIter, "--header", old, data); r.code == 0 || !strings.Contains(r.stderr, "exists") {
		t.Errorf("encrypt --in-place over an existing header file: exit %d, %s", r.code, r.stderr)
	}
	if string(mustRead(t, old)) != "keep me" || fileSHA(t, data) != fileSHA(t, plain) {
		t.Error("a refused run changed a file")
	}
}

// TestDetachedHeaderIsData: encrypt and create refuse a --header that is
// the output or the input, under any spelling and with --force, and leave
// the files as they were; the header once was renamed over the ciphertext
// and encrypt exited 0.
func TestDetachedHeaderIsData(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	want := mustRead(t, plain)
	x := filepath.Join(dir, "x")
	for _, args := range [][]string{
		{"encrypt", "--header", x, plain, x},
		{"encrypt", "--header", "./x", plain, x},
		{"encrypt", "--header", "x", "--force", plain, x},
		{"encrypt", "--header", plain, "--force", plain, x},
		{"encrypt", "--header", "plain.raw", plain, x},
		{"create", "--header", "./x", "--size", "1M", "x"},
	} {
		r := cryptimg(t, "", append([]string{args[0], "-d", key, fastIter}, args[1:]...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "input and output are the same file") {
			t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		if _, err := os.Stat(x); err == nil {
			t.Fatalf("%v: left %s", args, x)
		}
		if !bytes.Equal(mustRead(t, plain), want) {
			t.Fatalf("%v: the input changed", args)
		}
	}
}

// TestDetachedInPlaceHeaderFile: encrypt --in-place --header reuses an
// empty header file (as a killed run leaves) with mode 0600 whatever mode
// it had, since it will hold the key slots; a symbolic link as the header
// is refused, and the file it points to stays as it was.
func TestDetachedInPlaceHeaderFile(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	data := filepath.Join(dir, "data")
	copyFile(t, plain, data)
	args := func(hdr string) []string {
		return []string{"encrypt", "--in-place", "-q", "-d", key, fastIter, "--header", hdr, data}
	}

	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.hdr")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	r := cryptimg(t, "", args(link)...)
	if r.code != 1 || !strings.Contains(r.stderr, "symbolic link") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("a link as the header: exit %d, stderr %q", r.code, r.stderr)
	}
	if st, err := os.Stat(target); err != nil || st.Size() != 0 || st.Mode().Perm() != 0o644 {
		t.Errorf("the link's target changed: %v, %v", st, err)
	}
	sameContent(t, plain, data)

	hdr := filepath.Join(dir, "empty.hdr")
	if err := os.WriteFile(hdr, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(hdr, 0o644) // whatever the umask
	mustRun(t, args(hdr)...)
	st, err := os.Stat(hdr)
	if err != nil || st.Size() == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("the reused header file: %v, %v; want it filled, mode 0600", st, err)
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
	sameContent(t, plain, out)
}
