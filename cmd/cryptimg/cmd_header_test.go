package main

import (
	"bytes"
	bin "encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// damage zeroes the first MiB of the file, as a stray mkfs or dd would.
func damage(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestHeaderBackupInterop(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	k := newKeyFixture(t)
	img, key := k.img, k.keys
	mustRun(t, "add-key", "-q", "-d", key[0], "--new-key-file", key[1], fastIter, img)

	ours, theirs := filepath.Join(k.dir, "ours.hdr"), filepath.Join(k.dir, "theirs.hdr")
	mustRun(t, "header-backup", img, ours)
	sh(t, cs, "luksHeaderBackup", img, "--header-backup-file", theirs)
	if fileSHA(t, ours) != fileSHA(t, theirs) {
		t.Error("cryptimg and cryptsetup header backups differ")
	}
	st, err := os.Stat(ours)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != 1052672 {
		t.Errorf("backup mode %v, size %d; want 0600, 1052672", st.Mode().Perm(), st.Size())
	}
	r := expectCode(t, 1, "header-backup", img, ours)
	if !strings.Contains(r.stderr, "exists") {
		t.Errorf("existing backup file: %q", r.stderr)
	}

	// cryptsetup restores our backup onto a damaged copy.
	a := filepath.Join(k.dir, "a.luks")
	copyFile(t, img, a)
	damage(t, a)
	expectCode(t, 4, "test-key", "-d", key[0], a)
	sh(t, cs, "luksHeaderRestore", "-q", a, "--header-backup-file", ours)
	if c := csCode(t, cs, "open", "--test-passphrase", "--key-slot", "1", "-d", key[1], a); c != 0 {
		t.Errorf("cryptsetup after restoring our backup: exit %d", c)
	}
	sameContent(t, img, a)

	// cryptimg restores cryptsetup's backup onto a damaged copy, which
	// then decrypts identically.
	b := filepath.Join(k.dir, "b.luks")
	copyFile(t, img, b)
	damage(t, b)
	mustRun(t, "header-restore", "-q", b, theirs)
	sameContent(t, img, b)
	k.img = b
	k.decryptsTo(t, key[0])
	k.decryptsTo(t, key[1])
}

// TestHeaderBackupForce: header-backup refuses an existing FILE and says
// to use --force, which it has: with it the file is replaced whole (mode
// 0600, the same bytes as a new backup). The hint once named a flag the
// command did not have.
func TestHeaderBackupForce(t *testing.T) {
	k := newKeyFixture(t)
	fresh, old := filepath.Join(k.dir, "fresh.hdr"), filepath.Join(k.dir, "old.hdr")
	mustRun(t, "header-backup", k.img, fresh)
	if err := os.WriteFile(old, []byte("someone's file"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(old, 0o644)
	r := expectCode(t, 1, "header-backup", k.img, old)
	if !strings.Contains(r.stderr, "exists") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("existing backup file: %q", r.stderr)
	}
	if b, _ := os.ReadFile(old); string(b) != "someone's file" {
		t.Fatal("the refused backup changed the file")
	}
	mustRun(t, "header-backup", "--force", k.img, old)
	if fileSHA(t, old) != fileSHA(t, fresh) {
		t.Error("the forced backup differs from a new one")
	}
	if st, err := os.Stat(old); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("forced backup: %v, %v; want mode 0600", st, err)
	}
}

func TestHeaderRestoreChecksBackup(t *testing.T) {
	k := newKeyFixture(t)
	other := newKeyFixture(t)
	hdr := filepath.Join(k.dir, "hdr")
	mustRun(t, "header-backup", k.img, hdr)
	before := fileSHA(t, other.img)
	r := expectCode(t, 1, "header-restore", "-q", other.img, hdr)
	if !strings.Contains(r.stderr, "UUID") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("mismatched UUID: %q", r.stderr)
	}
	if fileSHA(t, other.img) != before {
		t.Fatal("a refused restore changed the image")
	}
	// Same UUID, other payload offset (a 128-bit key puts it at 2048).
	uuid := strings.TrimSpace(mustRun(t, "uuid", k.img).stdout)
	small := filepath.Join(k.dir, "small.luks")
	fastEncrypt(t, k.keys[0], k.plain, small, "--key-size", "128", "--uuid", uuid)
	r = expectCode(t, 1, "header-restore", "-q", small, hdr)
	if !strings.Contains(r.stderr, "payload offset") {
		t.Errorf("mismatched payload offset: %q", r.stderr)
	}
	// --force restores anyway: the other image then opens with our key.
	mustRun(t, "header-restore", "-q", "--force", other.img, hdr)
	expectCode(t, 0, "test-key", "-d", k.keys[0], other.img)
	// Not a backup at all.
	junk := randomFile(t, k.dir, "junk", 1<<20)
	expectCode(t, 4, "header-restore", "-q", k.img, junk)
	expectCode(t, 1, "header-restore", "-q", k.img, k.img)
}

func TestUUIDAndIsLUKS(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	k := newKeyFixture(t)
	got := strings.TrimSpace(mustRun(t, "uuid", k.img).stdout)
	if want := strings.TrimSpace(sh(t, cs, "luksUUID", k.img)); got != want {
		t.Errorf("uuid %q, cryptsetup %q", got, want)
	}
	mustRun(t, "uuid", "-q", "--uuid", "0123ABCD-4567-489A-8BCD-EF0123456789", k.img)
	if u := strings.TrimSpace(sh(t, cs, "luksUUID", k.img)); u != "0123abcd-4567-489a-8bcd-ef0123456789" {
		t.Errorf("cryptsetup sees UUID %q", u)
	}
	expectCode(t, 1, "uuid", "-q", "--uuid", "nope", k.img)
	sh(t, cs, "luksUUID", "-q", "--uuid", "11111111-2222-4333-8444-555555555555", k.img)
	if u := strings.TrimSpace(mustRun(t, "uuid", k.img).stdout); u != "11111111-2222-4333-8444-555555555555" {
		t.Errorf("uuid set by cryptsetup: %q", u)
	}
	expectCode(t, 0, "test-key", "-d", k.keys[0], k.img)

	if r := expectCode(t, 0, "is-luks", k.img); r.stdout != "" {
		t.Errorf("is-luks without -v printed %q", r.stdout)
	}
	if r := expectCode(t, 0, "is-luks", "-v", k.img); !strings.Contains(r.stdout, "LUKS1") {
		t.Errorf("is-luks -v: %q", r.stdout)
	}
	expectCode(t, 1, "is-luks", k.plain)
	if r := expectCode(t, 1, "is-luks", "-v", k.plain); !strings.Contains(r.stderr, "bad magic") {
		t.Errorf("is-luks -v on plaintext: %q", r.stderr)
	}
	if c := csCode(t, cs, "isLuks", k.plain); c != 1 {
		t.Errorf("cryptsetup isLuks on plaintext: %d", c)
	}
}

// TestHostileHeaders feeds every kind of malformed LUKS1 header the issue
// lists through dump, test-key and add-key: each exits 4 with a message
// naming the problem, and none panics.
func TestHostileHeaders(t *testing.T) {
	k := newKeyFixture(t)
	good, err := os.ReadFile(k.img)
	if err != nil {
		t.Fatal(err)
	}
	be := bin.BigEndian
	slot := func(i int) int { return 208 + 48*i }
	cases := []struct {
		name, want string
		mutate     func(b []byte) []byte
	}{
		{"bad magic", "bad magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version 2", "LUKS2", func(b []byte) []byte { be.PutUint16(b[6:], 2); return b }},
		{"version 7", "version", func(b []byte) []byte { be.PutUint16(b[6:], 7); return b }},
		{"stripes", "stripes", func(b []byte) []byte { be.PutUint32(b[slot(3)+44:], 3999); return b }},
		{"material in the header", "overlaps the header", func(b []byte) []byte { be.PutUint32(b[slot(2)+40:], 1); return b }},
		{"overlapping slots", "overlaps", func(b []byte) []byte { be.PutUint32(b[slot(1)+40:], 100); return b }},
		{"slot crossing the payload", "payload", func(b []byte) []byte { be.PutUint32(b[104:], 2000); return b }},
		{"payload beyond the file", "truncated", func(b []byte) []byte { return b[:4096*512-512] }},
		{"key material beyond the file", "beyond the end", func(b []byte) []byte { be.PutUint32(b[104:], 0); return b[:1<<20] }},
		{"zero digest iterations", "zero iterations", func(b []byte) []byte { be.PutUint32(b[164:], 0); return b }},
		{"zero slot iterations", "zero iterations", func(b []byte) []byte { be.PutUint32(b[slot(0)+4:], 0); return b }},
		{"zero key bytes", "key size", func(b []byte) []byte { be.PutUint32(b[108:], 0); return b }},
		{"absurd key bytes", "key size", func(b []byte) []byte { be.PutUint32(b[108:], 1<<30); return b }},
		{"unknown slot state", "invalid state", func(b []byte) []byte { be.PutUint32(b[slot(4):], 0xCAFE); return b }},
		{"unterminated cipher name", "NUL", func(b []byte) []byte { copy(b[8:40], bytes.Repeat([]byte("a"), 32)); return b }},
		{"unterminated UUID", "NUL", func(b []byte) []byte { copy(b[168:208], bytes.Repeat([]byte("1"), 40)); return b }},
		{"short file", "truncated", func(b []byte) []byte { return b[:300] }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.luks")
			if err := os.WriteFile(p, c.mutate(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"dump", p},
				{"test-key", "-d", k.keys[0], p},
				{"add-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[1], fastIter, p},
			} {
				r := expectCode(t, 4, args...)
				if !strings.Contains(r.stderr, c.want) {
					t.Errorf("%s: stderr %q lacks %q", args[0], r.stderr, c.want)
				}
			}
			expectCode(t, 1, "is-luks", p)
		})
	}
}
