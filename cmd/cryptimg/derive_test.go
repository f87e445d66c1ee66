package main

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha512"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header/derive"
)

// dumpedKey is the volume key cryptsetup's luksDump --dump-volume-key
// prints for img.
func dumpedKey(t *testing.T, cs, key, img string) []byte {
	t.Helper()
	out := sh(t, cs, "luksDump", "--dump-volume-key", "--batch-mode", "--key-file", key, img)
	_, rest, ok := strings.Cut(out, "MK dump:")
	if !ok {
		t.Fatalf("no volume key in:\n%s", out)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(rest), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// uuidOf is the UUID cryptsetup reads from img.
func uuidOf(t *testing.T, cs, img string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, cs, "luksUUID", img))
}

// TestDerivedKeys: --master-key-file gives the image the volume key
// HKDF-SHA512(master, UUID) of the README's construction (checked against
// crypto/hkdf and cryptsetup's view of the key); images with other UUIDs
// get other keys; add-key with the master restores access with no
// passphrase; a wrong master is refused as a wrong key.
func TestDerivedKeys(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "derived passphrase")
	mk := randomFile(t, dir, "master.key", 64)
	mb, _ := os.ReadFile(mk)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	want := func(uuid string, n int) []byte {
		k, err := hkdf.Key(sha512.New, mb, []byte("cryptimg derived volume keys v1"),
			"cryptimg volume key v1\x00"+uuid+"\x00"+string([]byte{byte(n >> 8), byte(n)}), n)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	var keys [][]byte
	for _, c := range []struct {
		name string
		args []string
		n    int
	}{
		{"luks1-uuid", []string{"--uuid", "0f0e0d0c-0b0a-4908-8706-050403020100"}, 32},
		{"luks1", nil, 32},
		{"luks1-again", nil, 32},
		{"luks2-xts", []string{"--type", "luks2", "--pbkdf", "pbkdf2"}, 64},
		{"luks2-integrity", []string{"--type", "luks2", "--pbkdf", "pbkdf2", "--integrity", "hmac-sha256"}, 96},
	} {
		img := filepath.Join(dir, c.name+".luks")
		fastEncrypt(t, key, plain, img, append([]string{"--master-key-file", mk}, c.args...)...)
		u := uuidOf(t, cs, img)
		got := dumpedKey(t, cs, key, img)
		if !bytes.Equal(got, want(u, c.n)) {
			t.Fatalf("%s: volume key %x, want HKDF-SHA512(master, %s) = %x", c.name, got, u, want(u, c.n))
		}
		keys = append(keys, got)
	}
	if uuidOf(t, cs, filepath.Join(dir, "luks1-uuid.luks")) != "0f0e0d0c-0b0a-4908-8706-050403020100" {
		t.Fatal("--uuid was not used")
	}
	if bytes.Equal(keys[1], keys[2]) {
		t.Fatal("two images with random UUIDs share a derived key")
	}

	// The passphrase is lost: the master alone adds a new one.
	img := filepath.Join(dir, "luks2-integrity.luks")
	key2 := writeFile(t, filepath.Join(dir, "key2"), "restored access")
	mustRun(t, "add-key", "--master-key-file", mk, "--new-key-file", key2, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", img)
	sh(t, cs, "open", "--test-passphrase", "--key-file", key2, img)
	wrong := randomFile(t, dir, "wrong.key", 64)
	if r := cryptimg(t, "", "add-key", "--master-key-file", wrong, "--new-key-file", key2, img); r.code != 2 {
		t.Fatalf("add-key with the wrong master: exit %d\n%s", r.code, r.stderr)
	}
	short := randomFile(t, dir, "short.key", derive.MinMasterBytes-1)
	out := filepath.Join(dir, "x")
	if r := cryptimg(t, "", "encrypt", "-d", key, "--master-key-file", short, plain, out); r.code != 1 || !strings.Contains(r.stderr, "shorter") {
		t.Fatalf("a short master: exit %d\n%s", r.code, r.stderr)
	}
	if r := cryptimg(t, "", "encrypt", "-d", key, "--master-key-file", mk, "--volume-key-file", mk, plain, out); r.code != 1 {
		t.Fatalf("--master-key-file with --volume-key-file: exit %d", r.code)
	}
	noFile(t, out)
}
