package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// TestNewKeyfileAlias: cryptsetup's --new-keyfile spelling works as
// --new-key-file, and is not listed twice in the help.
func TestNewKeyfileAlias(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second key")
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	enc := filepath.Join(dir, "enc.luks")
	fastEncrypt(t, key, plain, enc)
	mustRun(t, "add-key", "-d", key, "--new-keyfile", key2, "--pbkdf-force-iterations", "1000", enc)
	if r := mustRun(t, "test-key", "--json", "-d", key2, enc); !strings.Contains(r.stdout, `"key_slot":1`) {
		t.Fatalf("the key added with --new-keyfile: %s", r.stdout)
	}
	mustRun(t, "change-key", "-d", key2, "--new-keyfile", key, "--pbkdf-force-iterations", "1000", enc)
	if h := mustRun(t, "add-key", "--help").stdout; strings.Contains(h, "--new-keyfile ") {
		t.Errorf("add-key --help lists the alias:\n%s", h)
	}
}

// TestResizeRelative: resize takes qemu-img's +N and -N; shrinking that way
// still needs --force, and cannot go to zero.
func TestResizeRelative(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	enc := filepath.Join(dir, "enc.luks")
	fastEncrypt(t, key, plain, enc)
	newSize := func(r result) int64 {
		t.Helper()
		var s resizeSummary
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("%q: %v", r.stdout, err)
		}
		return s.NewSize
	}
	if n := newSize(mustRun(t, "resize", "--json", "--size", "+1M", enc)); n != 2<<20 {
		t.Fatalf("+1M from 1 MiB: %d", n)
	}
	if r := cryptimg(t, "", "resize", "--size", "-512K", enc); r.code != exitFailure || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("-512K without --force: exit %d %q", r.code, r.stderr)
	}
	if n := newSize(mustRun(t, "resize", "--json", "--force", "--size", "-512K", enc)); n != 3<<19 {
		t.Fatalf("-512K from 2 MiB: %d", n)
	}
	for _, bad := range []string{"-2M", "+1000", "+", "--1M"} {
		if r := cryptimg(t, "", "resize", "--force", "--size", bad, enc); r.code != exitFailure {
			t.Errorf("--size %s: exit %d %q", bad, r.code, r.stderr)
		}
	}
	if n := newSize(mustRun(t, "resize", "--json", "--size", "1536K", enc)); n != 3<<19 {
		t.Fatalf("an unchanged size: %d", n)
	}
}

// TestCompletionFlagValues: the flags with a fixed set of values complete
// them, from the lists the checks use.
func TestCompletionFlagValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"encrypt", "--cipher", ""}, cipher.Supported()},
		{[]string{"encrypt", "--cipher", ""}, []string{"aes-gcm-random"}},
		{[]string{"reencrypt", "-c", ""}, cipher.Supported()},
		{[]string{"encrypt", "--type", ""}, []string{"luks1", "luks2"}},
		{[]string{"convert", "--type", ""}, []string{"luks1", "luks2"}},
		{[]string{"encrypt", "-O", ""}, []string{"raw", "qcow2"}},
		{[]string{"decrypt", "--output-format", ""}, []string{"raw", "qcow2"}},
		{[]string{"encrypt", "--hash", ""}, []string{"sha1", "sha256", "sha512"}},
		{[]string{"create", "--pbkdf", ""}, []string{"argon2id", "argon2i", "pbkdf2"}},
		{[]string{"add-key", "--pbkdf", ""}, []string{"argon2id", "argon2i", "pbkdf2"}},
		{[]string{"encrypt", "--integrity", ""}, cipher.IntegrityOptions()},
		{[]string{"encrypt", "--progress", ""}, []string{"auto", "bar", "plain", "json", "none"}},
		{[]string{"benchmark", "--cipher", ""}, []string{"essiv", "xts", "integrity", "all"}},
	} {
		got := completions(t, c.args...)
		for _, w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("completing %q: %q, want %q among them", c.args, got, w)
			}
		}
	}
	if got := completions(t, "benchmark", "--cipher", ""); slices.Contains(got, "aes-xts-plain64") {
		t.Errorf("benchmark --cipher offers the cipher specifications: %q", got)
	}
	if got := completions(t, "encrypt", "--type", "luks"); !slices.Equal(got, []string{"luks1", "luks2"}) {
		t.Errorf("completing --type luks: %q", got)
	}
}

// TestHelpSaysTheDefaults: cryptimg --help names the cipher and key size a
// new header gets for each --type, as encrypt gives them.
func TestHelpSaysTheDefaults(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	help := strings.Join(strings.Fields(mustRun(t, "--help").stdout), " ")
	for _, typ := range []string{"luks1", "luks2"} {
		out := filepath.Join(dir, typ+".luks")
		r := mustRun(t, "encrypt", "--json", "-d", key, "--type", typ, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", plain, out)
		var s summary
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s with %s (%d-bit key)", strings.ToUpper(typ), s.Cipher, s.KeyBits)
		if typ == "luks2" {
			want = fmt.Sprintf("LUKS2 gets %s (%d-bit key)", s.Cipher, s.KeyBits)
		}
		if !strings.Contains(help, want) {
			t.Errorf("--help does not say %q:\n%s", want, help)
		}
	}
}

// TestForceIterationsPerKDF: --pbkdf-force-iterations is pbkdf2's
// iterations (at least 1000) or argon2's passes (at least 4), as
// cryptsetup's, and the help of every command with the flag says so.
func TestForceIterationsPerKDF(t *testing.T) {
	for _, c := range []string{"encrypt", "create", "clone", "reencrypt", "add-key", "change-key"} {
		h := strings.Join(strings.Fields(mustRun(t, c, "--help").stdout), " ")
		if !strings.Contains(h, "for pbkdf2 (LUKS1, or --pbkdf pbkdf2) the iterations, at least 1000; for argon2 (LUKS2's default) the passes over --pbkdf-memory, at least 4") {
			t.Errorf("%s --help does not give the per-KDF minimum", c)
		}
	}
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	enc := filepath.Join(dir, "enc.luks")
	argon := []string{"--type", "luks2", "--pbkdf-memory", "32", "--pbkdf-parallel", "1"}
	mustRun(t, append(append([]string{"encrypt", "-d", key, "--pbkdf-force-iterations", "4"}, argon...), plain, enc)...)
	mustRun(t, "add-key", "-d", key, "--new-key-file", key, "--pbkdf-force-iterations", "4", "--pbkdf-memory", "32", "--pbkdf-parallel", "1", enc)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{append([]string{"--pbkdf-force-iterations", "3"}, argon...), "at least 4 for argon2"},
		{[]string{"--pbkdf-force-iterations", "999"}, "at least 1000 for pbkdf2"},
		{[]string{"--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "999"}, "at least 1000 for pbkdf2"},
	} {
		r := cryptimg(t, "", append(append([]string{"encrypt", "-f", "-d", key}, c.args...), plain, enc)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%q: exit %d %q, want %q", c.args, r.code, r.stderr, c.msg)
		}
	}
}

// TestSummaryTimes: encrypt's and decrypt's summaries both give the data's
// time and, apart, the key derivation's (which encrypt used to count in
// and decrypt to leave out).
func TestSummaryTimes(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	// 300000 PBKDF2-SHA256 iterations take tens of milliseconds or more,
	// far more than the run spends outside the two timed parts.
	const iters = "300000"
	for _, c := range []struct {
		op   string
		args func(enc string) []string
	}{
		{"encrypt", func(enc string) []string {
			return []string{"encrypt", "-f", "-d", key, "--pbkdf-force-iterations", iters, plain, enc}
		}},
		{"decrypt", func(enc string) []string {
			return []string{"decrypt", "-f", "-d", key, enc, filepath.Join(dir, "out.raw")}
		}},
	} {
		enc := filepath.Join(dir, "enc.luks")
		if c.op != "encrypt" {
			mustRun(t, "encrypt", "-f", "-d", key, "--pbkdf-force-iterations", iters, plain, enc)
		}
		args := c.args(enc)
		start := time.Now()
		r := mustRun(t, append(args, "--json")...)
		wall := time.Since(start).Seconds()
		var s struct {
			Seconds    float64 `json:"seconds"`
			KDFSeconds float64 `json:"kdf_seconds"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
			t.Fatalf("%s: %q: %v", c.op, r.stdout, err)
		}
		// Counted once each: the two add up to less than the whole run.
		if s.KDFSeconds <= 0 || s.Seconds < 0 || s.KDFSeconds+s.Seconds > wall {
			t.Errorf("%s: seconds %v, kdf_seconds %v, run %v: want the key derivation apart from the data", c.op, s.Seconds, s.KDFSeconds, wall)
		}
		if line := mustRun(t, args...).stderr; !strings.Contains(line, "s of key derivation") {
			t.Errorf("%s: %q does not give the key derivation's time", c.op, line)
		}
	}
}

// TestReadmeFirstScreen: the README's first 25 lines say what cryptimg is
// for, then give the command for the common job, then the two set-up
// commands (the demo before the long test suite); and it does not call
// essiv cryptsetup's LUKS1 default.
func TestReadmeFirstScreen(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	first := strings.Join(lines[:min(25, len(lines))], "\n")
	what := strings.Index(first, "cryptimg encrypts and decrypts")
	job := strings.Index(first, "\ncryptimg encrypt --key-file")
	demo := strings.Index(first, "\nscripts/demo.sh")
	test := strings.Index(first, "\nscripts/test.sh")
	if what < 0 || job < 0 || demo < 0 || test < 0 || !(what < job && job < demo && demo < test) {
		t.Errorf("the first screen wants what cryptimg is for, the common job, scripts/demo.sh, scripts/test.sh, in that order:\n%s", first)
	}
	if strings.Contains(string(b), "(the LUKS1 default)") {
		t.Error("README calls aes-cbc-essiv:sha256 the LUKS1 default; cryptsetup's is aes-xts-plain64")
	}
}
