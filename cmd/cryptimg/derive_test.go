package main

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header/derive"
	"github.com/cryptimg/cryptimg/image"
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

// derivedKey is header/derive's volume key of n bytes for uuid from the
// master in file.
func derivedKey(t *testing.T, file, uuid string, n int) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := derive.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Clear()
	k, err := m.VolumeKey(uuid, n)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestReencryptMasterKey: reencrypt --master-key-file gives a LUKS1 and a
// LUKS2 image made with the same master a fresh UUID and the volume key
// header/derive gives for it, as cryptsetup reads them; the data stays and
// cryptsetup's offline decryption of the LUKS2 result gives it back;
// add-key with the master alone restores access. --uuid of the image's
// own UUID with that master would give the same key and is refused without
// a write; with another master it keeps the UUID. An interrupted run is
// resumed by the same command (with the UUID it started with) and refused
// with another master.
func TestReencryptMasterKey(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "reencrypt derived")
	key2 := writeFile(t, filepath.Join(dir, "key2"), "restored by the master")
	mk := randomFile(t, dir, "master.key", 64)
	mk2 := randomFile(t, dir, "master2.key", 32)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	for _, c := range []struct {
		name string
		args []string // encrypt's and reencrypt's
		n    int
	}{
		{"luks1", nil, 32},
		{"luks2", []string{"--type", "luks2", "--pbkdf", "pbkdf2"}, 64},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".luks")
			fastEncrypt(t, key, plain, img, append([]string{"--master-key-file", mk}, c.args...)...)
			u0, vk0 := uuidOf(t, cs, img), dumpedKey(t, cs, key, img)
			kdf := []string{fastIter}
			if c.name == "luks2" {
				kdf = append(kdf, "--pbkdf", "pbkdf2")
			}
			r := mustRun(t, append(append([]string{"reencrypt", "-d", key, "--master-key-file", mk, "--json"}, kdf...), img)...)
			var s inPlaceSummary
			if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Op != "reencrypt" {
				t.Fatalf("summary %q: %v", r.stdout, err)
			}
			noFile(t, img+image.JournalSuffix)
			u1 := uuidOf(t, cs, img)
			vk1 := dumpedKey(t, cs, key, img)
			if u1 == u0 || s.UUID != u1 {
				t.Fatalf("UUID %s before, %s after, %s in the summary: want a fresh one reported", u0, u1, s.UUID)
			}
			if !bytes.Equal(vk1, derivedKey(t, mk, u1, c.n)) || bytes.Equal(vk1, vk0) {
				t.Fatalf("volume key %x: want HKDF-SHA512(master, %s), not the old %x", vk1, u1, vk0)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
			out := filepath.Join(dir, c.name+".out")
			mustRun(t, "decrypt", "-d", key, img, out)
			sameContent(t, plain, out)

			// The passphrase is lost: the master alone adds one.
			mustRun(t, append(append([]string{"add-key", "--master-key-file", mk, "--new-key-file", key2}, kdf...), img)...)
			sh(t, cs, "open", "--test-passphrase", "--key-file", key2, img)

			// The image's own UUID with its master: the same key.
			before := mustRead(t, img)
			r = cryptimg(t, "", append(append([]string{"reencrypt", "-d", key, "--keep-key-file", key2, "--master-key-file", mk, "--uuid", strings.ToUpper(u1)}, kdf...), img)...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "leave out --uuid") {
				t.Fatalf("same master and UUID: exit %d\n%s", r.code, r.stderr)
			}
			if !bytes.Equal(mustRead(t, img), before) {
				t.Fatal("the refused reencrypt changed the image")
			}
			noFile(t, img+image.JournalSuffix)
			// Another master keeps the UUID it is given.
			mustRun(t, append(append([]string{"reencrypt", "-d", key, "--keep-key-file", key2, "--master-key-file", mk2, "--uuid", u1}, kdf...), img)...)
			if u := uuidOf(t, cs, img); u != u1 || !bytes.Equal(dumpedKey(t, cs, key2, img), derivedKey(t, mk2, u1, c.n)) {
				t.Fatalf("UUID %s (want %s kept) or not the key of the second master", u, u1)
			}

			if c.name == "luks2" && os.Geteuid() == 0 {
				// cryptsetup reencrypt runs as root only.
				sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
					"--disable-locks", "--batch-mode", "--key-file", key, img)
				got, _ := os.ReadFile(img)
				if want, _ := os.ReadFile(plain); len(got) < len(want) || !bytes.Equal(got[:len(want)], want) {
					t.Error("cryptsetup reencrypt --decrypt does not give the plaintext")
				}
			}
		})
	}

	// Interrupted after the first window with a derived key and UUID:
	// another master is refused (exit 2), the same command finishes it.
	img := filepath.Join(dir, "resume.luks")
	big := randomFile(t, dir, "big.raw", 4<<20)
	fastEncrypt(t, key, big, img)
	const uuid = "6c1b8e0a-2f3d-4e5f-8a9b-0c1d2e3f4a5b"
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := os.ReadFile(mk)
	m, err := derive.New(mb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, err = image.Reencrypt(ctx, f, image.Sidecar(img), image.ReencryptOptions{
		Passphrases: [][]byte{[]byte("reencrypt derived")}, UUID: uuid, VolumeKey: m.VolumeKey, ForceIterations: 1000,
		InPlaceOptions: image.InPlaceOptions{Window: 1 << 20, Pipeline: image.Pipeline{Progress: func(done, _ int64) {
			if done > 0 {
				cancel()
			}
		}}}})
	cancel()
	f.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted reencrypt: %v", err)
	}
	if r := cryptimg(t, "", "reencrypt", "-d", key, "--master-key-file", mk2, img); r.code != exitNoKey || !strings.Contains(r.stderr, "another new key") {
		t.Fatalf("resume with another master: exit %d\n%s", r.code, r.stderr)
	}
	mustRun(t, "reencrypt", "-d", key, "--master-key-file", mk, img)
	if u := uuidOf(t, cs, img); u != uuid || !bytes.Equal(dumpedKey(t, cs, key, img), derivedKey(t, mk, uuid, 32)) {
		t.Fatalf("resumed: UUID %s, want %s and its derived key", u, uuid)
	}
	out := filepath.Join(dir, "resume.out")
	mustRun(t, "decrypt", "-d", key, img, out)
	sameContent(t, big, out)
}
