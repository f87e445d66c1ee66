package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// volumeKeyOf is the volume key of img as cryptsetup's luksDump gives it.
func volumeKeyOf(t *testing.T, cs, img, key string) []byte {
	t.Helper()
	vk := filepath.Join(t.TempDir(), "vk")
	sh(t, cs, "luksDump", "-q", "--dump-volume-key", "--volume-key-file", vk, "-d", key, img)
	b, err := os.ReadFile(vk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLUKS2Reencrypt reencrypts a LUKS2 image that cryptsetup's offline
// encryption made, with a second key slot that has a token and a priority:
// the data decrypts byte-exact in cryptimg and in cryptsetup's offline
// decryption, cryptsetup opens both passphrases and reads a new volume key,
// and the label, sector size, token and priority stay. A second run that
// keeps one key removes the other slot and drops it from the token.
func TestLUKS2Reencrypt(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second passphrase")
	img, plain := luks2Image(t, dir, key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--label", "data", "--sector-size", "4096")
	sh(t, cs, "luksAddKey", "-q", "--key-file", key, "--new-keyfile", key2, "--key-slot", "7", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", img)
	sh(t, cs, "token", "add", "--key-description", "cryptimg-test", "--key-slot", "7", img)
	sh(t, cs, "config", "--priority", "prefer", "--key-slot", "7", img)
	oldVK := volumeKeyOf(t, cs, img, key)
	decrypts := func() {
		t.Helper()
		out := filepath.Join(dir, "out.raw")
		os.Remove(out)
		mustRun(t, "decrypt", "-d", key, img, out)
		got, _ := os.ReadFile(out)
		if len(got) < len(plain) || !bytes.Equal(got[:len(plain)], plain) {
			t.Fatal("the data does not decrypt to the plaintext")
		}
	}

	r := mustRun(t, "reencrypt", "-q", "-d", key, "--keep-key-file", key2, "--pbkdf", "pbkdf2", fastIter, "--hotzone-size", "1048576", "--json", img)
	var s struct {
		Op        string
		KeptSlots []int `json:"kept_slots"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Op != "reencrypt" || len(s.KeptSlots) != 2 {
		t.Fatalf("summary %q (%v)", r.stdout, err)
	}
	noFile(t, img+".cryptimg-journal")
	decrypts()
	for _, k := range []string{key, key2} {
		sh(t, cs, "open", "--test-passphrase", "--key-file", k, img)
	}
	if bytes.Equal(volumeKeyOf(t, cs, img, key2), oldVK) {
		t.Fatal("the volume key did not change")
	}
	dump := sh(t, cs, "luksDump", img)
	for _, want := range []string{"Label:         \tdata", "sector: 4096 [bytes]", "  7: luks2", "\tPriority:   preferred",
		"  0: luks2-keyring", "\tKeyslot:    7", "Epoch:         \t"} {
		if !strings.Contains(dump, want) {
			t.Errorf("luksDump lacks %q:\n%s", want, dump)
		}
	}
	if strings.Contains(dump, "Requirements:") {
		t.Errorf("the busy mark is left:\n%s", dump)
	}

	// Keep only key: slot 7 goes, and so does the token's reference.
	mustRun(t, "reencrypt", "-q", "-d", key, "--pbkdf", "pbkdf2", fastIter, img)
	dump = sh(t, cs, "luksDump", img)
	if strings.Contains(dump, "  7: luks2") || strings.Contains(dump, "\tKeyslot:    7") || !strings.Contains(dump, "  0: luks2-keyring") {
		t.Errorf("after keeping one key:\n%s", dump)
	}
	if csCode(t, cs, "open", "--test-passphrase", "--key-file", key2, img) == 0 {
		t.Error("the removed passphrase still opens")
	}
	decrypts()

	// cryptsetup decrypts the result offline (root, as luks2Image).
	sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
		"--disable-locks", "--batch-mode", "--key-file", key, img)
	got, _ := os.ReadFile(img)
	if len(got) < len(plain) || !bytes.Equal(got[:len(plain)], plain) {
		t.Error("cryptsetup reencrypt --decrypt does not give the plaintext")
	}
}

// TestLUKS2InPlace: encrypt --in-place --type luks2 makes an image that
// cryptsetup opens and decrypts offline and that decrypt --in-place turns
// back into the plaintext; decrypt --in-place also takes cryptsetup's own
// LUKS2 encryption apart.
func TestLUKS2InPlace(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "inplace.raw", 8<<20)
	img := filepath.Join(dir, "img")
	copyFile(t, plain, img)
	mustRun(t, "encrypt", "--in-place", "-q", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--hotzone-size", "1048576", img)
	noFile(t, img+".cryptimg-journal")
	sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
	if d := sh(t, cs, "luksDump", img); !strings.Contains(d, "Version:       \t2") || !strings.Contains(d, "sector: 4096 [bytes]") || strings.Contains(d, "Requirements") {
		t.Errorf("luksDump:\n%s", d)
	}
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, img, out)
	sameContent(t, plain, out)
	cp := filepath.Join(dir, "cp")
	copyFile(t, img, cp)

	mustRun(t, "decrypt", "--in-place", "-d", key, "--hotzone-size", "1048576", img)
	noFile(t, img+".cryptimg-journal")
	sameContent(t, plain, img)

	requireRoot(t) // cryptsetup's offline reencryption
	sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
		"--disable-locks", "--batch-mode", "--key-file", key, cp)
	want, _ := os.ReadFile(plain)
	got, _ := os.ReadFile(cp)
	if len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
		t.Error("cryptsetup reencrypt --decrypt does not give the plaintext")
	}

	theirs, tplain := luks2Image(t, dir, key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
	mustRun(t, "decrypt", "--in-place", "-d", key, theirs)
	got, _ = os.ReadFile(theirs)
	if len(got) < len(tplain) || !bytes.Equal(got[:len(tplain)], tplain) {
		t.Error("decrypt --in-place of cryptsetup's LUKS2 does not give the plaintext")
	}
}
