package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

// luks2Image makes a LUKS2 image with cryptsetup the only way it can fill
// one on a plain file: reencrypt --encrypt of a plaintext file, which moves
// the data behind a 16 MiB header (userspace crypto, no device-mapper). It
// returns the image and the plaintext that its payload starts with.
func luks2Image(t *testing.T, dir, key string, opts ...string) (img string, plain []byte) {
	t.Helper()
	cs := requireTool(t, "cryptsetup")
	requireRoot(t) // cryptsetup reencrypt --encrypt runs as root only
	const size, reduce = 36 << 20, 32 << 20
	src := randomFile(t, dir, "plain.raw", size)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"reencrypt", "--encrypt", "--type", "luks2", "--reduce-device-size", "32M",
		"--batch-mode", "--disable-locks", "--key-file", key}, opts...)
	sh(t, cs, append(args, src)...)
	return src, b[:size-reduce]
}

// TestLUKS2FromCryptsetup: LUKS2 images cryptsetup 2.6.1 makes with each
// KDF, several ciphers and every sector size decrypt byte-exact; dump
// prints what cryptsetup luksDump prints, and the same JSON metadata; a
// wrong passphrase exits 2, for reencrypt too, without a write.
func TestLUKS2FromCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	for _, c := range []struct {
		name string
		opts []string
	}{
		{"xts-argon2id-512", []string{"--pbkdf", "argon2id", "--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4"}},
		{"xts-argon2i-4096", []string{"--sector-size", "4096", "--pbkdf", "argon2i", "--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4", "--pbkdf-parallel", "1"}},
		{"essiv-pbkdf2-4096", []string{"--sector-size", "4096", "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256",
			"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}},
		{"cbc-plain64-sha512-2048", []string{"--sector-size", "2048", "--cipher", "aes-cbc-plain64", "--key-size", "128",
			"--pbkdf", "pbkdf2", "--hash", "sha512", "--pbkdf-force-iterations", "1000"}},
		{"xts-256-1024", []string{"--sector-size", "1024", "--key-size", "256", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
			img, plain := luks2Image(t, dir, key, c.opts...)
			before := fileSHA(t, img)

			if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
				t.Errorf("dump differs from cryptsetup luksDump:\n%s\nwant:\n%s", got, want)
			}
			var ours, theirs any
			json.Unmarshal([]byte(mustRun(t, "dump", "--dump-json-metadata", img).stdout), &ours)
			json.Unmarshal([]byte(sh(t, cs, "luksDump", "--dump-json-metadata", img)), &theirs)
			if ours == nil || !reflect.DeepEqual(ours, theirs) {
				t.Error("dump --dump-json-metadata differs from cryptsetup's")
			}
			var d luks2JSON
			if err := json.Unmarshal([]byte(mustRun(t, "dump", "--json", img).stdout), &d); err != nil || d.Version != 2 || len(d.Keyslots) != 1 {
				t.Errorf("dump --json: %+v, %v", d, err)
			}

			out := filepath.Join(dir, "out.raw")
			mustRun(t, "decrypt", "-d", key, img, out)
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:len(plain)], plain) {
				t.Fatal("decrypted payload differs from the plaintext")
			}
			mustRun(t, "test-key", "-d", key, img)
			mustRun(t, "is-luks", img)
			if got, want := strings.TrimSpace(mustRun(t, "uuid", img).stdout), strings.TrimSpace(sh(t, cs, "luksUUID", img)); got != want {
				t.Errorf("uuid %q, cryptsetup %q", got, want)
			}
			bOurs, bTheirs := filepath.Join(dir, "ours.hdr"), filepath.Join(dir, "theirs.hdr")
			mustRun(t, "header-backup", img, bOurs)
			sh(t, cs, "luksHeaderBackup", img, "--header-backup-file", bTheirs)
			sameContent(t, bOurs, bTheirs)

			bad := writeFile(t, filepath.Join(dir, "bad"), "wrong")
			if r := cryptimg(t, "", "decrypt", "-d", bad, img, filepath.Join(dir, "bad.raw")); r.code != exitNoKey {
				t.Errorf("wrong key: exit %d, want %d (%s)", r.code, exitNoKey, r.stderr)
			}
			if r := cryptimg(t, "", "reencrypt", "-q", "-d", bad, img); r.code != exitNoKey {
				t.Errorf("reencrypt with a wrong key: exit %d, %s", r.code, r.stderr)
			}
			noFile(t, img+".cryptimg-journal")
			if fileSHA(t, img) != before {
				t.Error("the image changed")
			}
		})
	}
}

// TestLUKS2DamagedCopy: with the primary header copy's checksum broken,
// cryptimg reads the secondary, warns, and (unlike cryptsetup, which
// rewrites the bad copy even on luksDump) leaves the file unchanged; with
// both copies broken the image is refused with exit 4.
func TestLUKS2DamagedCopy(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img, plain := luks2Image(t, dir, key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
	flipByte(t, img, 4096+10) // inside the primary's JSON
	before := fileSHA(t, img)
	r := mustRun(t, "dump", img)
	if r.stderr != lostPrimaryWarning(img, "16 KiB") {
		t.Errorf("no warning: %q", r.stderr)
	}
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, img, out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got[:len(plain)], plain) {
		t.Error("decrypted payload differs from the plaintext")
	}
	if fileSHA(t, img) != before {
		t.Error("a read-only command wrote to the image")
	}
	flipByte(t, img, 16384+4096+10) // the secondary's JSON too
	if r := cryptimg(t, "", "dump", img); r.code != exitBadImage {
		t.Errorf("both copies damaged: exit %d, want %d (%s)", r.code, exitBadImage, r.stderr)
	}
}

// TestLUKS2UnfinishedReencrypt: an image whose cryptsetup reencryption was
// only initialised dumps like cryptsetup, but decrypting it is refused with
// exit 5 and a message naming the requirement.
func TestLUKS2UnfinishedReencrypt(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img, _ := luks2Image(t, dir, key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
	sh(t, cs, "reencrypt", "--init-only", "--batch-mode", "--disable-locks", "--force-offline-reencrypt",
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", key, img)
	if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
		t.Errorf("dump differs from cryptsetup luksDump:\n%s\nwant:\n%s", got, want)
	}
	r := cryptimg(t, "", "decrypt", "-d", key, img, filepath.Join(dir, "out.raw"))
	if r.code != exitBusy || !strings.Contains(r.stderr, "online-reencrypt") {
		t.Errorf("decrypt: exit %d, want %d: %s", r.code, exitBusy, r.stderr)
	}
}

// TestLUKS2View: the plaintext view behind open, ls and cat reads a
// 4096-byte-sector LUKS2 image at unaligned offsets, and an unaligned write
// through it lands where decrypt then finds it, around read-modify-written
// 4096-byte sectors.
func TestLUKS2View(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img, plain := luks2Image(t, dir, key, "--sector-size", "4096", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
	f, e, k := unlockedImage(t, img, testPassphrase, os.O_RDWR)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 4096}, {1, 100}, {4095, 2}, {5000, 300000}, {len(plain) - 777, 777}} {
		got := make([]byte, r[1])
		if _, err := v.ReadAt(got, int64(r[0])); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, plain[r[0]:r[0]+r[1]]) {
			t.Fatalf("read of %d bytes at %d differs", r[1], r[0])
		}
	}
	w := bytes.Repeat([]byte("cryptimg"), 1250) // 10000 bytes, across three sectors
	if _, err := v.WriteAt(w, 3*4096+100); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	copy(plain[3*4096+100:], w)
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, img, out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got[:len(plain)], plain) {
		t.Fatal("decrypt after the write differs")
	}
}

// TestKernelLUKS2: dm-crypt reads the LUKS2 images encrypt --type luks2
// makes; and the kernel's cryptsetup formats LUKS2 images on virtio disks
// (its default cipher, argon2id and pbkdf2, 512- to 4096-byte sectors) and
// dm-crypt writes plaintext into them, which cryptimg decrypts to the same
// bytes, its dump equal to the host cryptsetup's luksDump.
func TestKernelLUKS2(t *testing.T) {
	o := newOracle(t)
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "kernel oracle passphrase")
	src := randomFile(t, dir, "source.raw", 8<<20)
	cases := []struct {
		name string
		opts string
	}{
		{"default-cipher-4096", "--sector-size 4096 --pbkdf pbkdf2 --pbkdf-force-iterations 1000"},
		{"argon2id-512", "--sector-size 512 --pbkdf argon2id --pbkdf-memory 32768 --pbkdf-force-iterations 4"},
		{"essiv-2048", "--sector-size 2048 --cipher aes-cbc-essiv:sha256 --key-size 256 --pbkdf pbkdf2 --pbkdf-force-iterations 1000"},
		{"cbc-plain64-1024", "--sector-size 1024 --cipher aes-cbc-plain64 --key-size 128 --pbkdf pbkdf2 --pbkdf-force-iterations 1000"},
	}
	// cryptimg's own LUKS2 images, for dm-crypt to read.
	ours := map[string][]string{
		"ours-xts-4096-argon2id": {"--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4"},
		"ours-essiv-512":         {"--cipher", "aes-cbc-essiv:sha256", "--sector-size", "512", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"},
		"ours-xts-256-2048":      {"--key-size", "256", "--sector-size", "2048", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"},
	}
	for name, opts := range ours {
		img := filepath.Join(dir, name+".luks2")
		mustRun(t, append(append([]string{"encrypt", "-d", key, "--type", "luks2"}, opts...), src, img)...)
		o.reads(name, img, key, fileSHA(t, src))
	}
	// Key commands: a slot added to a LUKS2 image opens in the kernel, a
	// killed one does not.
	added := filepath.Join(dir, "ours-keys.luks2")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, src, added)
	k2 := writeFile(t, filepath.Join(dir, "k2"), "second kernel passphrase")
	mustRun(t, "add-key", "-q", "-d", key, "--new-key-file", k2, "-S", "17", "--pbkdf", "argon2id", "--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4", added)
	killed := filepath.Join(dir, "ours-killed.luks2")
	copyImage(t, added, killed)
	mustRun(t, "kill-slot", "-q", killed, "17")
	o.reads("added-slot", added, k2, fileSHA(t, src))
	o.refuses("killed-slot", killed, k2)
	o.reads("kept-slot", killed, key, fileSHA(t, src))
	// Reencryption and in-place encryption: the kernel reads the data under
	// the new key; and an image marked busy, as they mark it while they
	// run, is refused.
	reenc := filepath.Join(dir, "ours-reencrypted.luks2")
	copyImage(t, added, reenc)
	mustRun(t, "reencrypt", "-q", "-d", key, "--cipher", "aes-cbc-essiv:sha256", "--pbkdf", "pbkdf2", fastIter, reenc)
	o.reads("reencrypted", reenc, key, fileSHA(t, src))
	inplace := filepath.Join(dir, "ours-in-place.luks2")
	copyImage(t, src, inplace)
	mustRun(t, "encrypt", "--in-place", "-q", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, inplace)
	o.reads("in-place", inplace, key, fileSHA(t, src))
	// Detached headers, LUKS1 and LUKS2: the data from offset 0 of one
	// disk, the header on another.
	for _, typ := range []string{"luks1", "luks2"} {
		hdr, data := filepath.Join(dir, "detached-"+typ+".hdr"), filepath.Join(dir, "detached-"+typ+".data")
		mustRun(t, "encrypt", "-d", key, "--type", typ, "--pbkdf", "pbkdf2", fastIter, "--header", hdr, src, data)
		o.reads("detached-"+typ, data, key, fileSHA(t, src), "--header", o.disk(hdr))
		if typ == "luks1" {
			continue // the VM takes 20 disks; LUKS1's reencrypt is the same code
		}
		// And after reencrypt --header.
		hdr2, data2 := hdr+".re", data+".re"
		copyImage(t, hdr, hdr2)
		copyImage(t, data, data2)
		mustRun(t, "reencrypt", "-q", "-d", key, "--pbkdf", "pbkdf2", fastIter, "--header", hdr2, data2)
		o.reads("detached-reencrypted-"+typ, data2, key, fileSHA(t, src), "--header", o.disk(hdr2))
	}
	busy := filepath.Join(dir, "ours-busy.luks2")
	copyImage(t, added, busy)
	markBusy(t, busy)
	m := o.mapper()
	o.check("busy", fmt.Sprintf("if unlock %s %s %s --readonly 2>/tmp/busy.err; then echo opened; lock %s; else echo refused; cat /tmp/busy.err; fi",
		o.disk(busy), m, o.key(key), m))
	imgs := map[string]string{}
	for _, c := range cases {
		img := filepath.Join(dir, c.name+".luks2")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Truncate(img, 24<<20) // the 16 MiB header, then 8 MiB of data
		imgs[c.name] = img
		m := o.mapper()
		o.check(c.name, fmt.Sprintf("cryptsetup luksFormat --type luks2 --batch-mode --key-file %s %s %s\n"+
			"unlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 conv=fsync 2>/dev/null\nlock %s",
			o.key(key), c.opts, o.disk(img), o.disk(img), m, o.key(key), o.disk(src), m, m))
	}
	r := o.run()
	if got := r.Want(t, "busy"); !strings.Contains(got, "refused") || !strings.Contains(got, "requirements") {
		t.Errorf("the kernel's cryptsetup opened an image marked busy, or for another reason than the requirement:\n%s", got)
	}
	for _, c := range cases {
		r.Want(t, c.name)
		img := imgs[c.name]
		if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
			t.Errorf("%s: dump differs from cryptsetup luksDump:\n%s\nwant:\n%s", c.name, got, want)
		}
		out := img + ".out"
		mustRun(t, "decrypt", "-d", key, img, out)
		sameContent(t, src, out)
	}
}

// csFormatLUKS2 makes a size-byte file at path and runs cryptsetup
// luksFormat --type luks2 on it with key and opts; it returns path.
func csFormatLUKS2(t *testing.T, cs, path, key string, size int64, opts ...string) string {
	t.Helper()
	writeFile(t, path, "")
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	sh(t, cs, append(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", key}, opts...), path)...)
	return path
}

// luks2Shape is a LUKS2 image's metadata with what is random or measured
// (salts, digests, digest iterations) masked.
func luks2Shape(t *testing.T, cs, img string) string {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal([]byte(sh(t, cs, "luksDump", "--dump-json-metadata", img)), &d); err != nil {
		t.Fatal(err)
	}
	for _, k := range d["keyslots"].(map[string]any) {
		k.(map[string]any)["kdf"].(map[string]any)["salt"] = "salt"
	}
	for _, g := range d["digests"].(map[string]any) {
		g := g.(map[string]any)
		g["salt"], g["digest"], g["iterations"] = "salt", "digest", "iterations"
	}
	b, _ := json.Marshal(d)
	return string(b)
}

// TestLUKS2Encrypt: encrypt --type luks2 makes the metadata cryptsetup
// luksFormat --type luks2 makes with the same choices (layout, segment,
// keyslot, KDF, digest), cryptsetup opens its key slot, decrypt gives the
// plaintext back, and so does cryptsetup's own offline decryption.
func TestLUKS2Encrypt(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	for _, c := range []struct {
		name string
		opts []string
	}{
		{"defaults", []string{"--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4"}},
		{"essiv-512-pbkdf2-sha512", []string{"--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--sector-size", "512",
			"--pbkdf", "pbkdf2", "--hash", "sha512", "--pbkdf-force-iterations", "1000"}},
		{"cbc-plain64-2048-argon2i", []string{"--cipher", "aes-cbc-plain64", "--key-size", "128", "--sector-size", "2048",
			"--pbkdf", "argon2i", "--pbkdf-memory", "32768", "--pbkdf-parallel", "1", "--pbkdf-force-iterations", "5", "--label", "root", "--subsystem", "ci"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
			plain := randomFile(t, dir, "plain.raw", 4<<20)
			ours := filepath.Join(dir, "ours.luks2")
			mustRun(t, append(append([]string{"encrypt", "-d", key, "--type", "luks2"}, c.opts...), plain, ours)...)
			theirs := csFormatLUKS2(t, cs, filepath.Join(dir, "theirs.luks2"), key, 20<<20, c.opts...)
			if a, b := luks2Shape(t, cs, ours), luks2Shape(t, cs, theirs); a != b {
				t.Errorf("metadata differs from cryptsetup's:\n%s\nwant\n%s", a, b)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, ours)
			out := filepath.Join(dir, "out.raw")
			mustRun(t, "decrypt", "-d", key, ours, out)
			sameContent(t, plain, out)

			// cryptsetup decrypts it offline (root only): the plaintext
			// moves to the start of the file, the header to a new file.
			requireRoot(t)
			sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
				"--disable-locks", "--batch-mode", "--key-file", key, ours)
			want, _ := os.ReadFile(plain)
			got, _ := os.ReadFile(ours)
			if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
				t.Error("cryptsetup reencrypt --decrypt does not give the plaintext")
			}
		})
	}
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	for _, bad := range [][]string{
		{"--type", "luks3"}, {"--pbkdf", "argon2id"}, {"--type", "luks2", "--sector-size", "1000"},
		{"--type", "luks2", "--pbkdf", "scrypt"}, {"--type", "luks2", "--align-payload", "8"},
		{"--type", "luks2", "-O", "qcow2"}, {"--type", "luks2", "--pbkdf-force-iterations", "3"},
	} {
		args := append(append([]string{"encrypt", "-d", key}, bad...), plain, filepath.Join(dir, "x.luks"))
		if r := cryptimg(t, "", args...); r.code == 0 {
			t.Errorf("encrypt %v succeeded", bad)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.luks")); err == nil {
			t.Fatalf("encrypt %v left an output", bad)
		}
	}
}

// TestLUKS2KeyCommands: the key and header commands on LUKS2 images, each
// checked by cryptsetup: add-key (argon2id and pbkdf2, slots up to 31),
// change-key, remove-key, kill-slot, uuid and header-restore, on a LUKS2
// image of cryptimg's and on one of cryptsetup's.
func TestLUKS2KeyCommands(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	k0 := writeFile(t, filepath.Join(dir, "k0"), "key zero")
	k1 := writeFile(t, filepath.Join(dir, "k1"), "key one")
	k2 := writeFile(t, filepath.Join(dir, "k2"), "key two")
	argon := []string{"--pbkdf", "argon2id", "--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4"}
	opens := func(img, key string, slot int) bool {
		return csCode(t, cs, "open", "--test-passphrase", "--key-slot", fmt.Sprint(slot), "--key-file", key, img) == 0
	}
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	ours := filepath.Join(dir, "ours.luks2")
	mustRun(t, "encrypt", "-d", k0, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, plain, ours)
	theirs := csFormatLUKS2(t, cs, filepath.Join(dir, "theirs.luks2"), k0, 20<<20, argon...)

	for _, img := range []string{ours, theirs} {
		name := filepath.Base(img)
		mustRun(t, append([]string{"add-key", "-q", "-d", k0, "--new-key-file", k1, "-S", "31"}, append(argon, img)...)...)
		mustRun(t, "add-key", "-q", "-d", k0, "--new-key-file", k2, "--pbkdf", "pbkdf2", fastIter, "--priority", "prefer", img)
		if d := sh(t, cs, "luksDump", img); !strings.Contains(d, "Priority:   preferred") {
			t.Errorf("%s: add-key --priority prefer:\n%s", name, d)
		}
		if !opens(img, k1, 31) || !opens(img, k2, 1) || !opens(img, k0, 0) {
			t.Fatalf("%s: cryptsetup does not open the added slots", name)
		}
		if d := sh(t, cs, "luksDump", img); !strings.Contains(d, "31: luks2") || !strings.Contains(d, "PBKDF:      argon2id") {
			t.Fatalf("%s: luksDump after add-key:\n%s", name, d)
		}
		if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
			t.Errorf("%s: dump differs from luksDump after add-key", name)
		}
		backup := img + ".hdr"
		mustRun(t, "header-backup", img, backup)

		// change-key moves k2 to a new passphrase, in a free slot.
		k3 := writeFile(t, filepath.Join(dir, name+".k3"), "key three")
		mustRun(t, "change-key", "-q", "-d", k2, "--new-key-file", k3, "--pbkdf", "pbkdf2", fastIter, img)
		if opens(img, k2, 1) || csCode(t, cs, "open", "--test-passphrase", "--key-file", k3, img) != 0 {
			t.Errorf("%s: after change-key the old key still opens or the new one does not", name)
		}
		mustRun(t, "remove-key", "-q", "-d", k3, img)
		mustRun(t, "kill-slot", "-q", "-d", k0, img, "31")
		if csCode(t, cs, "open", "--test-passphrase", "--key-file", k3, img) == 0 || opens(img, k1, 31) || !opens(img, k0, 0) {
			t.Errorf("%s: after remove-key and kill-slot", name)
		}
		const uuid = "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
		mustRun(t, "uuid", "-q", "--uuid", uuid, img)
		if got := strings.TrimSpace(sh(t, cs, "luksUUID", img)); got != uuid {
			t.Errorf("%s: luksUUID %s", name, got)
		}
		mustRun(t, "header-restore", "-q", "--force", img, backup)
		if !opens(img, k1, 31) || !opens(img, k2, 1) {
			t.Errorf("%s: header-restore did not bring the slots back", name)
		}
		if r := cryptimg(t, "", "add-key", "-q", "-d", k0, "--new-key-file", k1, "-S", "32", img); r.code != exitFailure {
			t.Errorf("%s: slot 32: exit %d", name, r.code)
		}
	}
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", k1, ours, out)
	sameContent(t, plain, out)
}

// TestLUKS2ConfigTokens: config, token, repair and is-luks --type on a
// LUKS2 image, each checked by cryptsetup's luksDump and token export.
func TestLUKS2ConfigTokens(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	k0 := writeFile(t, filepath.Join(dir, "k0"), "key zero")
	k1 := writeFile(t, filepath.Join(dir, "k1"), "key one")
	img := filepath.Join(dir, "img.luks2")
	mustRun(t, "encrypt", "-d", k0, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, randomFile(t, dir, "plain.raw", 1<<20), img)
	mustRun(t, "add-key", "-q", "-d", k0, "--new-key-file", k1, "--pbkdf", "pbkdf2", fastIter, img)
	sameDump := func(when string) {
		t.Helper()
		if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
			t.Errorf("%s: dump differs from luksDump:\n%s\nwant:\n%s", when, got, want)
		}
	}
	mustRun(t, "config", "--label", "rootfs", "--subsystem", "ci", img)
	mustRun(t, "config", "--priority", "prefer", "-S", "1", img)
	d := sh(t, cs, "luksDump", img)
	if !strings.Contains(d, "Label:         \trootfs") || !strings.Contains(d, "Subsystem:     \tci") || !strings.Contains(d, "Priority:   preferred") {
		t.Errorf("luksDump after config:\n%s", d)
	}
	sameDump("config")
	// The preferred slot is tried first: k1 opens slot 1 without -S.
	if r := mustRun(t, "test-key", "-d", k1, img); !strings.Contains(r.stderr, "slot 1") {
		t.Errorf("test-key: %s", r.stderr)
	}

	tok := writeFile(t, filepath.Join(dir, "tok.json"), `{"type":"x-ci","keyslots":[],"note":{"pcrs":[7]}}`)
	if r := mustRun(t, "token", "import", "--json-file", tok, "--key-slot", "0", img); !strings.Contains(r.stdout, "Token 0 created") {
		t.Errorf("token import: %q", r.stdout)
	}
	var ours, theirs any
	json.Unmarshal([]byte(mustRun(t, "token", "export", "--token-id", "0", img).stdout), &ours)
	json.Unmarshal([]byte(sh(t, cs, "token", "export", "--token-id", "0", img)), &theirs)
	want := map[string]any{"type": "x-ci", "keyslots": []any{"0"}, "note": map[string]any{"pcrs": []any{7.0}}}
	if !reflect.DeepEqual(ours, want) || !reflect.DeepEqual(theirs, want) {
		t.Errorf("token 0: ours %v, cryptsetup's %v", ours, theirs)
	}
	mustRun(t, "token", "add", "--key-description", "cryptimg:ci", "--token-id", "5", img)
	if d := sh(t, cs, "luksDump", img); !strings.Contains(d, "5: luks2-keyring") {
		t.Errorf("luksDump after token add:\n%s", d)
	}
	sameDump("token")
	reserved := writeFile(t, filepath.Join(dir, "reserved.json"), `{"type":"luks2-fake","keyslots":[]}`)
	if r := cryptimg(t, "", "token", "import", "--json-file", reserved, img); r.code != exitFailure {
		t.Errorf("luks2- token type: exit %d", r.code)
	}
	sh(t, cs, "token", "import", "--token-id", "9", "--json-file", tok, img)
	json.Unmarshal([]byte(mustRun(t, "token", "export", "--token-id", "9", img).stdout), &ours)
	if ours.(map[string]any)["type"] != "x-ci" {
		t.Errorf("cryptsetup's token 9 reads as %v", ours)
	}
	mustRun(t, "token", "remove", "--token-id", "9", img)
	if csCode(t, cs, "token", "export", "--token-id", "9", img) == 0 {
		t.Error("token 9 still there for cryptsetup")
	}
	// Killing slot 0 takes it out of token 0.
	mustRun(t, "kill-slot", "-q", "-d", k1, img, "0")
	json.Unmarshal([]byte(sh(t, cs, "token", "export", "--token-id", "0", img)), &theirs)
	if ks := theirs.(map[string]any)["keyslots"]; len(ks.([]any)) != 0 {
		t.Errorf("token 0 keyslots after kill-slot 0: %v", ks)
	}

	// repair: a damaged primary is rewritten from the secondary.
	flipByte(t, img, 4096+20)
	if r := mustRun(t, "dump", img); !strings.Contains(r.stderr, "damaged") {
		t.Fatalf("no warning: %s", r.stderr)
	}
	mustRun(t, "repair", img)
	if r := mustRun(t, "dump", img); r.stderr != "" {
		t.Errorf("after repair: %s", r.stderr)
	}
	before := fileSHA(t, img)
	sh(t, cs, "luksDump", img)
	if fileSHA(t, img) != before {
		t.Error("cryptsetup still rewrote a copy after repair")
	}
	mustRun(t, "is-luks", "--type", "luks2", img)
	if r := cryptimg(t, "", "is-luks", "--type", "luks1", img); r.code != 1 {
		t.Errorf("is-luks --type luks1 on LUKS2: exit %d", r.code)
	}
}

// TestLUKS2MetadataSizes: cryptsetup's LUKS2 images with every metadata
// size from 16 KiB to 4 MiB dump as luksDump does and unlock.
func TestLUKS2MetadataSizes(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, size := range []string{"16k", "32k", "64k", "128k", "256k", "512k", "1m", "2m", "4m"} {
		img := csFormatLUKS2(t, cs, filepath.Join(dir, size+".luks2"), key, 32<<20, "--luks2-metadata-size", size,
			"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
		if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
			t.Errorf("%s: dump differs from luksDump:\n%s\nwant:\n%s", size, got, want)
		}
		mustRun(t, "test-key", "-d", key, img)
	}
}

// markBusy marks the LUKS2 image at path as cryptimg's in-place operations
// do while they run.
func markBusy(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, err := header.Read(f, 0, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	u, err := h.Mark()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range u.Writes {
		if _, err := f.WriteAt(w.Data, w.Offset); err != nil {
			t.Fatal(err)
		}
	}
}
