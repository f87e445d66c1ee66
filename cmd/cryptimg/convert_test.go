package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestConvert takes images both ways between LUKS1 and LUKS2 with cryptimg
// convert, and the peers open each result: cryptsetup unlocks both
// passphrases (key slot 0 and 5) and decrypts the LUKS2 one offline, qemu-img
// decrypts the LUKS1 one, and cryptimg decrypts all of them byte-exact.
// cryptsetup's own conversions of cryptimg's images open in cryptimg.
func TestConvert(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second passphrase")
	plain := randomFile(t, dir, "plain.raw", 4<<20)
	img := filepath.Join(dir, "img.luks")
	mustRun(t, "encrypt", "-d", key, fastIter, "--cipher", "aes-xts-plain64", plain, img)
	mustRun(t, "add-key", "-q", "-d", key, "--new-key-file", key2, "--key-slot", "5", fastIter, img)
	uuid := strings.TrimSpace(mustRun(t, "uuid", img).stdout)
	decrypts := func(path string) {
		t.Helper()
		out := filepath.Join(dir, "out.raw")
		os.Remove(out)
		mustRun(t, "decrypt", "-d", key2, path, out)
		sameContent(t, plain, out)
	}
	opens := func(path, version string) {
		t.Helper()
		if !strings.Contains(sh(t, cs, "luksDump", path), "Version:       \t"+version) {
			t.Fatalf("luksDump does not say version %s", version)
		}
		for _, k := range []string{key, key2} {
			sh(t, cs, "open", "--test-passphrase", "--key-file", k, path)
		}
		if got := strings.TrimSpace(sh(t, cs, "luksUUID", path)); got != uuid {
			t.Fatalf("uuid %s, want %s", got, uuid)
		}
	}

	r := mustRun(t, "convert", "-q", "--type", "luks2", "--json", img)
	var s struct{ Op, Type, UUID string }
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Op != "convert" || s.Type != "luks2" || s.UUID != uuid {
		t.Fatalf("summary %q (%v)", r.stdout, err)
	}
	noFile(t, img+".cryptimg-journal")
	opens(img, "2")
	decrypts(img)
	for _, slot := range []string{"0", "5"} {
		if !strings.Contains(mustRun(t, "dump", img).stdout, "  "+slot+": luks2") {
			t.Fatalf("dump lacks keyslot %s", slot)
		}
	}
	// cryptsetup takes it back to LUKS1, and cryptimg reads that.
	cp := filepath.Join(dir, "cs.luks")
	copyFile(t, img, cp)
	sh(t, cs, "convert", "-q", "--type", "luks1", cp)
	decrypts(cp)

	mustRun(t, "convert", "-q", "--type", "luks1", img)
	opens(img, "1")
	decrypts(img)
	if a, b := readPrefix(t, img, 2<<20), readPrefix(t, cp, 2<<20); !bytes.Equal(a, b) {
		t.Error("cryptimg's LUKS2 → LUKS1 differs from cryptsetup's")
	}
	back := filepath.Join(dir, "qemu.raw")
	sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+img, "-O", "raw", back)
	sameContent(t, plain, back)

	// Converted to LUKS2 once more, cryptsetup decrypts it offline (root
	// only).
	mustRun(t, "convert", "-q", "--type", "luks2", img)
	requireRoot(t)
	sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
		"--disable-locks", "--batch-mode", "--key-file", key, img)
	want, _ := os.ReadFile(plain)
	got, _ := os.ReadFile(img)
	if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
		t.Error("cryptsetup reencrypt --decrypt does not give the plaintext")
	}
}

// TestConvertRefused: what cryptsetup refuses to convert is refused with
// its reason and exit 1, nothing in the image changes and no journal is
// left; without a terminal or --batch-mode nothing starts.
func TestConvertRefused(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := csFormatLUKS2(t, cs, filepath.Join(dir, "l2.img"), key, 20<<20, "--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4")
	before := fileSHA(t, img)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"convert", "-q", "--type", "luks1", img}, 1, "sector size is not 512 bytes"},
		{[]string{"convert", "-q", "--type", "luks2", img}, 1, "LUKS2 already"},
		{[]string{"convert", "-q", "--type", "luks3", img}, 1, "--type"},
		{[]string{"convert", "-q", img}, 1, "--type"},
		{[]string{"convert", "-q", "--resume", "--type", "luks1", img}, 1, "no unfinished operation"},
	} {
		r := cryptimg(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want exit %d saying %q on one line", c.args, r.code, r.stderr, c.code, c.want)
		}
	}
	l1 := filepath.Join(dir, "l1.img")
	mustRun(t, "encrypt", "-d", key, fastIter, randomFile(t, dir, "p", 1<<20), l1)
	l1sum := fileSHA(t, l1)
	if r := cryptimg(t, "", "convert", "--type", "luks2", l1); r.code != 1 || !strings.Contains(r.stderr, "batch-mode") {
		t.Errorf("convert without confirmation: exit %d, %q", r.code, r.stderr)
	}
	if fileSHA(t, img) != before || fileSHA(t, l1) != l1sum {
		t.Fatal("a refused conversion changed the image")
	}
	noFile(t, img+".cryptimg-journal")
	noFile(t, l1+".cryptimg-journal")
}

func readPrefix(t *testing.T, path string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:min(n, len(b))]
}

// TestConvertDetached: convert --header converts a detached header in its
// own file as cryptsetup convert --header does (LUKS2 → LUKS1 byte for
// byte; LUKS1 → LUKS2 in a header file with room for the move), and the
// data still decrypts.
func TestConvertDetached(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 2<<20)
	hdr, data := filepath.Join(dir, "hdr"), filepath.Join(dir, "data")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--sector-size", "512", "--pbkdf", "pbkdf2", fastIter, "--header", hdr, plain, data)
	theirs := filepath.Join(dir, "theirs")
	copyFile(t, hdr, theirs)
	mustRun(t, "convert", "-q", "--type", "luks1", "--header", hdr, data)
	sh(t, cs, "convert", "-q", "--type", "luks1", "--header", theirs, data)
	sameContent(t, hdr, theirs)
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
	sameContent(t, plain, out)

	// And back: the 16 MiB header file has room for the move.
	mustRun(t, "convert", "-q", "--type", "luks2", "--header", hdr, data)
	sh(t, cs, "convert", "-q", "--type", "luks2", "--header", theirs, data)
	a, b := sh(t, cs, "luksDump", "--dump-json-metadata", hdr), sh(t, cs, "luksDump", "--dump-json-metadata", theirs)
	var ja, jb any
	if json.Unmarshal([]byte(a), &ja) != nil || json.Unmarshal([]byte(b), &jb) != nil || !reflect.DeepEqual(ja, jb) {
		t.Errorf("LUKS2 metadata differs from cryptsetup's:\n%s\nwant\n%s", a, b)
	}
	// cryptsetup's own detached LUKS1 header file ends with its key slots:
	// both tools grow it by the 28672 bytes of the move.
	full, fullCS := filepath.Join(dir, "full"), filepath.Join(dir, "full-cs")
	sh(t, cs, "luksFormat", "-q", "--type", "luks1", "--header", full, "--key-file", key, "--pbkdf-force-iterations", "1000", data)
	copyFile(t, full, fullCS)
	mustRun(t, "convert", "-q", "--type", "luks2", "--header", full, data)
	sh(t, cs, "convert", "-q", "--type", "luks2", "--header", fullCS, data)
	a, b = sh(t, cs, "luksDump", "--dump-json-metadata", full), sh(t, cs, "luksDump", "--dump-json-metadata", fullCS)
	if json.Unmarshal([]byte(a), &ja) != nil || json.Unmarshal([]byte(b), &jb) != nil || !reflect.DeepEqual(ja, jb) {
		t.Errorf("LUKS2 metadata of the grown header differs from cryptsetup's:\n%s\nwant\n%s", a, b)
	}
	if sa, sb := fileSize(t, full), fileSize(t, fullCS); sa != sb || sa != 2068480+28672 {
		t.Errorf("grown header files: %d bytes, cryptsetup's %d", sa, sb)
	}
	sh(t, cs, "open", "--test-passphrase", "--header", full, "--key-file", key, data)
	os.Remove(out)
	mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
	sameContent(t, plain, out)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}
