package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEncryptVerity encrypts with --verity in one pass, with one worker and
// small chunks and with two, LUKS1 and LUKS2 with 4096-byte sectors: the
// tree is byte for byte what "verity format" makes of the finished image
// with the same salt and UUID; veritysetup verify and cryptimg verity
// verify accept it and the root hash (printed, in --json, in
// --root-hash-file) without the key, also over a sparse input of zeros; a flipped ciphertext byte fails both;
// the image still decrypts to the input.
func TestEncryptVerity(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "verity key")
	// 600 blocks: two levels over the payload and the header area.
	plain := randomFile(t, dir, "plain", 600*4096)
	cases := [][]string{
		{"-j", "1", "--chunk-size", "65536"},
		{"-j", "2"},
		{"--type", "luks2", "--pbkdf", "pbkdf2", "--sector-size", "4096", "-j", "2"},
	}
	// A sparse input of zeros: every chunk is still encrypted, and hashed.
	sparse := filepath.Join(dir, "sparse")
	if err := os.Truncate(writeFile(t, sparse, ""), 300*4096); err != nil {
		t.Fatal(err)
	}
	for i, extra := range cases {
		plain := plain
		if i == 1 {
			plain = sparse
		}
		enc := filepath.Join(dir, "enc"+string(rune('0'+i)))
		hash := enc + ".verity"
		rootFile := enc + ".root"
		args := append([]string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--verity", hash, "--root-hash-file", rootFile}, extra...)
		r := mustRun(t, append(args, plain, enc)...)
		line := strings.TrimSpace(r.stdout)
		root, _ := os.ReadFile(rootFile)
		if !strings.HasPrefix(line, "Root hash:") || !strings.HasSuffix(line, string(root)) || len(root) != 64 {
			t.Fatalf("%v: printed %q, root hash file %q", extra, r.stdout, root)
		}
		// --json gives the same parameters verity format needs.
		os.Remove(enc)
		os.Remove(hash)
		r = mustRun(t, append(append(args, "--json"), plain, enc)...)
		var s summary
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Verity == nil {
			t.Fatalf("%v: --json %q: %v", extra, r.stdout, err)
		}
		root, _ = os.ReadFile(rootFile)
		st, _ := os.Stat(enc)
		if s.Verity.RootHash != string(root) || s.Verity.DataBlocks != uint64(st.Size()/4096) || s.Verity.HashDevice != hash {
			t.Errorf("%v: json verity %+v, root hash file %s, image %d bytes", extra, *s.Verity, root, st.Size())
		}
		again := enc + ".again"
		mustRun(t, "verity", "format", enc, again, "--salt", s.Verity.Salt, "--uuid", s.Verity.UUID, "--root-hash-file", again+".root")
		if got, want := fileSHA(t, hash), fileSHA(t, again); got != want {
			t.Errorf("%v: the one-pass tree differs from verity format's of the image", extra)
		}
		if r2, _ := os.ReadFile(again + ".root"); string(r2) != string(root) {
			t.Errorf("%v: root hash %s, verity format's %s", extra, root, r2)
		}
		if out, code := veritysetup(t, "verify", enc, hash, string(root)); code != 0 {
			t.Errorf("%v: veritysetup verify: exit %d %s", extra, code, out)
		}
		mustRun(t, "verity", "verify", enc, hash, string(root))
		dec := enc + ".dec"
		mustRun(t, "decrypt", "-d", key, enc, dec)
		if fileSHA(t, dec) != fileSHA(t, plain) {
			t.Errorf("%v: decrypts to other data", extra)
		}
		// One ciphertext byte flipped in data block 300 (in the payload).
		b, _ := os.ReadFile(enc)
		b[300*4096+7] ^= 0x10
		bad := writeFile(t, enc+".bad", string(b))
		if _, code := veritysetup(t, "verify", bad, hash, string(root)); code == 0 {
			t.Errorf("%v: veritysetup verify accepts a flipped ciphertext byte", extra)
		}
		if r := cryptimg(t, "", "verity", "verify", bad, hash, string(root)); r.code != 4 || !strings.Contains(r.stderr, "data block 300 ") {
			t.Errorf("%v: verity verify of a flipped byte: exit %d %s", extra, r.code, r.stderr)
		}
	}
}

// TestEncryptVerityDetached: with --header the output is the ciphertext
// alone, and the tree covers exactly that.
func TestEncryptVerityDetached(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "verity key")
	plain := randomFile(t, dir, "plain", 200*4096)
	enc, hdr, hash, rootFile := filepath.Join(dir, "enc"), filepath.Join(dir, "hdr"), filepath.Join(dir, "h"), filepath.Join(dir, "r")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--header", hdr, "--verity", hash, "--root-hash-file", rootFile, plain, enc)
	root, _ := os.ReadFile(rootFile)
	if st, _ := os.Stat(enc); st.Size() != 200*4096 {
		t.Fatalf("detached output of %d bytes", st.Size())
	}
	if out, code := veritysetup(t, "verify", enc, hash, string(root)); code != 0 {
		t.Errorf("veritysetup verify: exit %d %s", code, out)
	}
	r := cryptimg(t, "", "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--header", hdr+"2", "--verity", hdr+"2", plain, enc+"2")
	if r.code != 1 || !strings.Contains(r.stderr, "file of its own") {
		t.Errorf("--verity naming the --header file: exit %d %s", r.code, r.stderr)
	}
}

// TestEncryptVerityRefusals: --verity makes the tree of a new raw image of
// whole 4096-byte blocks only, and leaves no hash file behind a refusal.
func TestEncryptVerityRefusals(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "verity key")
	plain := randomFile(t, dir, "plain", 64*4096)
	odd := randomFile(t, dir, "odd", 64*4096+512)
	hash := filepath.Join(dir, "h")
	enc := filepath.Join(dir, "enc")
	kdf := []string{"-d", key, "--pbkdf-force-iterations", "1000"}
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-O", "qcow2", "--verity", hash, plain, enc}, 1, "raw image"},
		{[]string{"--type", "luks2", "--integrity", "hmac-sha256", "--pbkdf", "pbkdf2", "--verity", hash, plain, enc}, 1, "--integrity"},
		{[]string{"--verity", hash, "--partition", "1", plain, enc}, 1, "--partition"},
		{[]string{"--verity", hash, plain, "-"}, 1, "standard input"},
		{[]string{"--verity", plain, plain, enc}, 1, "file of its own"},
		{[]string{"--root-hash-file", hash, plain, enc}, 1, "needs --verity"},
		{[]string{"--verity", hash, odd, enc}, 1, "whole 4096-byte data blocks"},
	}
	for _, c := range cases {
		r := cryptimg(t, "", append(append([]string{"encrypt"}, kdf...), c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d %q, want %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
		for _, p := range []string{hash, enc} {
			if _, err := os.Stat(p); err == nil {
				t.Errorf("%v: %s left behind", c.args, p)
				os.Remove(p)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(m) > 0 {
			t.Errorf("%v: temporary files left: %v", c.args, m)
		}
	}
}
