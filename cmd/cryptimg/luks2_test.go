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

	"github.com/cryptimg/cryptimg/image"
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
// wrong passphrase exits 2; header changes are refused without a write.
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
			if r := cryptimg(t, "", "add-key", "-d", key, "--new-key-file", key, img); r.code != exitFailure || !strings.Contains(r.stderr, "LUKS2") {
				t.Errorf("add-key on LUKS2: exit %d, %s", r.code, r.stderr)
			}
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
	flip := func(off int64) {
		f, err := os.OpenFile(img, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		f.ReadAt(b, off)
		b[0] ^= 0x20
		f.WriteAt(b, off)
	}
	flip(4096 + 10) // inside the primary's JSON
	before := fileSHA(t, img)
	r := mustRun(t, "dump", img)
	if !strings.Contains(r.stderr, "primary LUKS2 header copy is damaged") {
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
	flip(16384 + 4096 + 10) // the secondary's JSON too
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
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := image.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte(testPassphrase), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
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
// keyslot, KDF, digest), cryptsetup opens its key slot, and decrypt gives
// the plaintext back.
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
			theirs := filepath.Join(dir, "theirs.luks2")
			writeFile(t, theirs, "")
			os.Truncate(theirs, 20<<20)
			sh(t, cs, append(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", key}, c.opts...), theirs)...)
			if a, b := luks2Shape(t, cs, ours), luks2Shape(t, cs, theirs); a != b {
				t.Errorf("metadata differs from cryptsetup's:\n%s\nwant\n%s", a, b)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, ours)
			out := filepath.Join(dir, "out.raw")
			mustRun(t, "decrypt", "-d", key, ours, out)
			sameContent(t, plain, out)
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
