package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCiphersOnEveryCommand runs every command that touches encrypted data
// or key slots on images of each non-default cipher: encrypt and decrypt
// (raw and qcow2), dump, the key commands, header backup and restore,
// reencrypt, the in-place conversions, ls and cat, --partition and, where
// FUSE works, open.
func TestCiphersOnEveryCommand(t *testing.T) {
	for _, c := range []struct {
		spec string
		bits int
	}{{"aes-xts-plain64", 512}, {"aes-xts-plain", 256}, {"aes-cbc-plain64", 256}, {"aes-cbc-plain", 128}} {
		t.Run(c.spec+"-"+strconv.Itoa(c.bits), func(t *testing.T) {
			dir := t.TempDir()
			key := writeFile(t, filepath.Join(dir, "key"), "every command")
			key2 := writeFile(t, filepath.Join(dir, "key2"), "a second key")
			key3 := writeFile(t, filepath.Join(dir, "key3"), "a third key")
			plain := randomFile(t, dir, "plain.raw", 3<<20)
			opts := []string{"--cipher", c.spec, "--key-size", strconv.Itoa(c.bits)}
			roundTrip := func(img, k string, extra ...string) {
				t.Helper()
				out := filepath.Join(dir, "rt.raw")
				os.Remove(out)
				mustRun(t, append(append([]string{"decrypt", "-d", k, "-O", "raw"}, extra...), img, out)...)
				sameContent(t, plain, out)
			}

			img := filepath.Join(dir, "img.luks")
			fastEncrypt(t, key, plain, img, opts...)
			if d := dumpOf(t, img); d.Cipher != c.spec || d.KeyBits != c.bits {
				t.Fatalf("dump: %s %d", d.Cipher, d.KeyBits)
			}
			roundTrip(img, key)

			// Key slots.
			mustRun(t, "add-key", "-d", key, "--new-key-file", key2, fastIter, img)
			mustRun(t, "test-key", "-d", key2, img)
			mustRun(t, "change-key", "-d", key2, "--new-key-file", key3, fastIter, img)
			expectCode(t, exitNoKey, "test-key", "-d", key2, img)
			roundTrip(img, key3)
			backup := filepath.Join(dir, "hdr.backup")
			mustRun(t, "header-backup", img, backup)
			mustRun(t, "remove-key", "-q", "-d", key3, img)
			expectCode(t, exitNoKey, "test-key", "-d", key3, img)
			mustRun(t, "header-restore", "-q", img, backup)
			roundTrip(img, key3)
			if r := mustRun(t, "dump", "--dump-volume-key", "-q", "-d", key, "--json", img); !strings.Contains(r.stdout, `"cipher": "`+c.spec+`"`) {
				t.Errorf("volume key dump: %s", r.stdout)
			}

			// Reencrypt keeps the cipher.
			mustRun(t, "reencrypt", "-d", key, "--keep-key-file", key3, fastIter, "-q", img)
			if d := dumpOf(t, img); d.Cipher != c.spec || d.KeyBits != c.bits {
				t.Errorf("after reencrypt: %s %d", d.Cipher, d.KeyBits)
			}
			roundTrip(img, key3)

			// In place, both ways.
			inplace := filepath.Join(dir, "inplace.img")
			copyImage(t, plain, inplace)
			mustRun(t, append(append([]string{"encrypt", "--in-place", "-d", key, fastIter, "-q"}, opts...), inplace)...)
			if d := dumpOf(t, inplace); d.Cipher != c.spec {
				t.Errorf("in-place: %s", d.Cipher)
			}
			roundTrip(inplace, key)
			mustRun(t, "decrypt", "--in-place", "-d", key, "-q", inplace)
			sameContent(t, plain, inplace)

			// qcow2 output and input.
			q := filepath.Join(dir, "img.qcow2")
			fastEncrypt(t, key, plain, q, append([]string{"-O", "qcow2"}, opts...)...)
			if d := dumpOf(t, q); d.Cipher != c.spec || d.Format != "qcow2" {
				t.Errorf("qcow2 dump: %s %s", d.Cipher, d.Format)
			}
			roundTrip(q, key)

			// A GPT disk: ls and cat, and --partition.
			disk := gptDisk(t, dir)
			encDisk := filepath.Join(dir, "disk.luks")
			fastEncrypt(t, key, disk, encDisk, opts...)
			if r := mustRun(t, "cat", "-d", key, encDisk, "2:/etc/hostname"); r.stdout != testDisk.rootFiles["etc/hostname"] {
				t.Errorf("cat: %q", r.stdout)
			}
			part := filepath.Join(dir, "part.img")
			mustRun(t, append(append([]string{"encrypt", "-d", key, fastIter, "--partition", "2"}, opts...), disk, part)...)
			back := filepath.Join(dir, "back.img")
			mustRun(t, "decrypt", "-d", key, "--partition", "2", part, back)
			sameContent(t, disk, back)

			if checkFUSE() == nil && !testing.Short() {
				mnt := filepath.Join(dir, "mnt")
				os.Mkdir(mnt, 0o755)
				runBin(t, binary(t), "open", "--background", "--read-only", "-d", key3, img, mnt)
				got, err := os.ReadFile(filepath.Join(mnt, "img.raw"))
				runBin(t, binary(t), "close", mnt)
				if err != nil || fileSHA(t, plain) != shaOf(got) {
					t.Errorf("open: %v, or the mounted plaintext differs", err)
				}
			}
		})
	}
}

// TestVolumeKeyFile: encrypt --volume-key-file uses the given volume key
// (cryptsetup luksFormat --volume-key-file): two images of one plaintext
// under one key have the same payload bytes, the dumped volume key is the
// file, and in-place encryption takes it too; a key of the wrong size is
// refused before anything is written.
func TestVolumeKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "passphrase")
	vk := randomFile(t, dir, "vk.bin", 64)
	vkBytes, _ := os.ReadFile(vk)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	xts := []string{"--cipher", "aes-xts-plain64", "--volume-key-file", vk}
	a, b, c := filepath.Join(dir, "a.luks"), filepath.Join(dir, "b.luks"), filepath.Join(dir, "c.luks")
	fastEncrypt(t, key, plain, a, xts...)
	fastEncrypt(t, key, plain, b, xts...)
	fastEncrypt(t, key, plain, c, "--cipher", "aes-xts-plain64")
	payload := func(p string) []byte {
		d := dumpOf(t, p)
		raw, _ := os.ReadFile(p)
		return raw[d.PayloadOffsetBytes:]
	}
	if string(payload(a)) != string(payload(b)) {
		t.Error("two images under one volume key have different payloads")
	}
	if string(payload(a)) == string(payload(c)) {
		t.Error("a random volume key gave the same payload")
	}
	if dumpOf(t, a).UUID == dumpOf(t, b).UUID {
		t.Error("the UUID should still be random")
	}
	r := mustRun(t, "dump", "--dump-volume-key", "-q", "-d", key, "--json", a)
	if !strings.Contains(r.stdout, hexOf(vkBytes)) {
		t.Errorf("dumped volume key is not the file's:\n%s", r.stdout)
	}
	inplace := filepath.Join(dir, "inplace.img")
	copyImage(t, plain, inplace)
	mustRun(t, append(append([]string{"encrypt", "--in-place", "-d", key, fastIter, "-q"}, xts...), inplace)...)
	if string(payload(inplace)[:1<<20]) != string(payload(a)) {
		t.Error("in-place encryption did not use the volume key file")
	}
	short := randomFile(t, dir, "short.bin", 32)
	out := filepath.Join(dir, "d.luks")
	r = expectCode(t, exitFailure, "encrypt", "-d", key, fastIter, "--cipher", "aes-xts-plain64", "--volume-key-file", short, plain, out)
	if !strings.Contains(r.stderr, "32 bytes") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("short volume key: %q", r.stderr)
	}
	// LUKS2 without --cipher: the message names the cipher the header gets.
	r = expectCode(t, exitFailure, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--volume-key-file", short, plain, out)
	if !strings.Contains(r.stderr, "the aes-xts-plain64 key is 512 bits") {
		t.Errorf("short volume key, LUKS2 default cipher: %q", r.stderr)
	}
	noFile(t, out)
}

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }
