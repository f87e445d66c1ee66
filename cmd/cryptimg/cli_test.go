package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fastEncrypt encrypts with the minimum PBKDF2 cost.
func fastEncrypt(t *testing.T, key, in, out string, extra ...string) result {
	t.Helper()
	args := append([]string{"encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000"}, extra...)
	return mustRun(t, append(args, in, out)...)
}

func TestRoundTripKeySizesAndHashes(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "secret")
	plain := randomFile(t, dir, "plain.raw", 3<<20+512)
	for _, bits := range []string{"128", "192", "256"} {
		for _, hash := range []string{"sha1", "sha256", "sha512"} {
			enc := filepath.Join(dir, "enc-"+bits+hash)
			out := filepath.Join(dir, "out-"+bits+hash)
			fastEncrypt(t, key, plain, enc, "--key-size", bits, "--hash", hash)
			r := mustRun(t, "dump", "--json", enc)
			var d dumpJSON
			if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
				t.Fatal(err)
			}
			if d.Hash != hash || strings.TrimSpace(bits) != itoa(d.KeyBits) || d.PayloadSize != 3<<20+512 {
				t.Errorf("dump of %s/%s: %+v", bits, hash, d)
			}
			mustRun(t, "decrypt", "--key-file", key, enc, out)
			sameContent(t, plain, out)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestLayoutMatchesCryptsetup(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "secret")
	plain := randomFile(t, dir, "plain.raw", 4096)
	for bits, payload := range map[string]int64{"128": 2048, "256": 4096} {
		enc := filepath.Join(dir, "enc"+bits)
		fastEncrypt(t, key, plain, enc, "--key-size", bits)
		var d dumpJSON
		json.Unmarshal([]byte(mustRun(t, "dump", "--json", enc).stdout), &d)
		if d.PayloadOffset != payload {
			t.Errorf("%s-bit key: payload offset %d, want %d", bits, d.PayloadOffset, payload)
		}
		want := map[string][]uint32{"128": {8, 136, 264, 392, 520, 648, 776, 904}, "256": {8, 264, 520, 776, 1032, 1288, 1544, 1800}}[bits]
		for i, s := range d.KeySlots {
			if s.KeyMaterialOffset != want[i] || s.Stripes != 4000 || s.Active != (i == 0) {
				t.Errorf("%s-bit key: slot %d = %+v", bits, i, s)
			}
		}
		if d.MKDigestIterations != 1000 || d.KeySlots[0].Iterations != 1000 {
			t.Errorf("forced iterations: digest %d, slot %d; want 1000", d.MKDigestIterations, d.KeySlots[0].Iterations)
		}
		st, _ := os.Stat(enc)
		if st.Mode().Perm() != 0o600 {
			t.Errorf("output mode %v, want 0600", st.Mode().Perm())
		}
		if st.Size() != payload*512+4096 {
			t.Errorf("output size %d", st.Size())
		}
	}
}

func TestWrongKeyExits2WithoutOutput(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "secret")
	bad := writeFile(t, filepath.Join(dir, "bad"), "Secret")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	enc := filepath.Join(dir, "enc")
	fastEncrypt(t, key, plain, enc)
	out := filepath.Join(dir, "out.raw")
	r := cryptimg(t, "", "decrypt", "--key-file", bad, enc, out)
	if r.code != exitNoKey {
		t.Fatalf("exit %d, want 2; stderr %s", r.code, r.stderr)
	}
	if strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.HasPrefix(r.stderr, "cryptimg: error: ") {
		t.Errorf("want one error line, got %q", r.stderr)
	}
	noFile(t, out)
	// A slot that is not active fails too, and so does the right key in
	// the wrong slot.
	if r := cryptimg(t, "", "decrypt", "--key-file", key, "--key-slot", "3", enc, out); r.code == 0 {
		t.Fatalf("decrypt with an inactive slot succeeded")
	}
	noFile(t, out)
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "secret")
	empty := writeFile(t, filepath.Join(dir, "empty"), "")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	odd := randomFile(t, dir, "odd.raw", 1000)
	enc := filepath.Join(dir, "enc")
	fastEncrypt(t, key, plain, enc)
	// Truncated: the payload is cut in the middle of a sector, and a file
	// that ends inside the key material.
	trunc := filepath.Join(dir, "trunc")
	b, _ := os.ReadFile(enc)
	os.WriteFile(trunc, b[:len(b)-100], 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, b[:200000], 0o600)
	existing := writeFile(t, filepath.Join(dir, "existing"), "keep me")

	cases := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"not luks", []string{"decrypt", "-d", key, plain, filepath.Join(dir, "o1")}, exitBadImage, "not a LUKS"},
		{"dump not luks", []string{"dump", plain}, exitBadImage, ""},
		{"truncated payload", []string{"decrypt", "-d", key, trunc, filepath.Join(dir, "o2")}, exitBadImage, "truncated"},
		{"truncated header area", []string{"decrypt", "-d", key, short, filepath.Join(dir, "o3")}, exitBadImage, ""},
		{"missing input", []string{"decrypt", "-d", key, filepath.Join(dir, "nope"), filepath.Join(dir, "o4")}, exitFailure, "no such file"},
		{"existing output", []string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, existing}, exitFailure, "--force"},
		{"same file", []string{"encrypt", "-d", key, "--force", plain, plain}, exitFailure, "same file"},
		{"odd size", []string{"encrypt", "-d", key, odd, filepath.Join(dir, "o5")}, exitFailure, "multiple of 512"},
		{"cipher", []string{"encrypt", "-d", key, "--cipher", "serpent-xts-plain64", plain, filepath.Join(dir, "o6")}, exitFailure, "aes-cbc-essiv:sha256"},
		{"key size", []string{"encrypt", "-d", key, "--key-size", "512", plain, filepath.Join(dir, "o7")}, exitFailure, "128, 192 or 256"},
		{"hash", []string{"encrypt", "-d", key, "--hash", "md5", plain, filepath.Join(dir, "o8")}, exitFailure, "sha1, sha256 or sha512"},
		{"iterations", []string{"encrypt", "-d", key, "--pbkdf-force-iterations", "999", plain, filepath.Join(dir, "o9")}, exitFailure, "1000"},
		{"uuid", []string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--uuid", "not-a-uuid", plain, filepath.Join(dir, "o10")}, exitFailure, "UUID"},
		{"empty key", []string{"encrypt", "-d", empty, plain, filepath.Join(dir, "o11")}, exitFailure, "empty"},
		{"no key", []string{"encrypt", plain, filepath.Join(dir, "o12")}, exitFailure, "--key-file"},
		{"args", []string{"encrypt", plain}, exitFailure, "output"},
		{"progress mode", []string{"encrypt", "-d", key, "--progress", "loud", plain, filepath.Join(dir, "o13")}, exitFailure, "invalid progress mode"},
		{"jobs", []string{"decrypt", "-d", key, "--jobs", "-2", enc, filepath.Join(dir, "o14")}, exitFailure, "--jobs"},
		{"chunk size", []string{"encrypt", "-d", key, "--chunk-size", "1000", plain, filepath.Join(dir, "o15")}, exitFailure, "--chunk-size"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := cryptimg(t, "", c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, c.code, r.stderr)
			}
			line := strings.TrimSuffix(r.stderr, "\n")
			if strings.Contains(line, "\n") || !strings.HasPrefix(line, "cryptimg: error: ") {
				t.Errorf("want one error line, got %q", r.stderr)
			}
			if !strings.Contains(strings.ToLower(line), strings.ToLower(c.msg)) {
				t.Errorf("error %q does not mention %q", line, c.msg)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty: %q", r.stdout)
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Error("existing output was modified")
	}
	for i := 1; i <= 12; i++ {
		noFile(t, filepath.Join(dir, "o"+itoa(i)))
	}
}

func TestKeyFileOptions(t *testing.T) {
	dir := t.TempDir()
	keyfile := writeFile(t, filepath.Join(dir, "key"), "xxxxSECRETyyyy")
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	enc := filepath.Join(dir, "enc")
	// The key comes from stdin here...
	r := cryptimg(t, "SECRET", "encrypt", "--key-file", "-", "--pbkdf-force-iterations", "1000", plain, enc)
	if r.code != 0 {
		t.Fatal(r.stderr)
	}
	// ...and from the middle of a file there.
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", keyfile, "--keyfile-offset", "4", "--keyfile-size", "6", enc, out)
	sameContent(t, plain, out)
	// A newline is part of a key file's key, as with cryptsetup.
	nl := writeFile(t, filepath.Join(dir, "nl"), "SECRET\n")
	if r := cryptimg(t, "", "decrypt", "-d", nl, enc, filepath.Join(dir, "out2")); r.code != exitNoKey {
		t.Fatalf("key with trailing newline: exit %d, want 2", r.code)
	}
}

func TestForceOverwrites(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	plain := randomFile(t, dir, "plain.raw", 8192)
	enc := writeFile(t, filepath.Join(dir, "enc"), "old")
	fastEncrypt(t, key, plain, enc, "--force")
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, enc, out)
	sameContent(t, plain, out)
}

// TestOutputNotRegular: an output path that is a FIFO, a directory, a
// link to one or (as root) a device is refused, --force or not, before any
// work, and stays what it was. Without this, --force renamed a new regular
// file over a device node, so "decrypt --force img /dev/sdb" wrote the
// plaintext into /dev rather than onto the disk.
func TestOutputNotRegular(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	plain := randomFile(t, dir, "plain.raw", 8192)
	enc := filepath.Join(dir, "enc")
	fastEncrypt(t, key, plain, enc)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	link := filepath.Join(dir, "link")
	os.Symlink(fifo, link)
	targets := map[string]string{fifo: "a FIFO", sub: "a directory", link: "a FIFO"}
	if os.Geteuid() == 0 {
		// A character device with /dev/null's numbers, in the test's
		// own directory.
		dev := filepath.Join(dir, "dev")
		if err := syscall.Mknod(dev, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		targets[dev] = "a character device"
	} else {
		t.Log("not root: the device case is not run")
	}
	for out, kind := range targets {
		for _, args := range [][]string{
			{"decrypt", "-d", key, "--force", enc, out},
			{"decrypt", "-d", key, enc, out},
			{"encrypt", "-d", key, "--force", "--pbkdf-force-iterations", "1000", plain, out},
		} {
			before, err := os.Lstat(out)
			if err != nil {
				t.Fatal(err)
			}
			r := cryptimg(t, "", args...)
			if r.code != exitFailure || !strings.Contains(r.stderr, "not a regular file: it is "+kind) ||
				!strings.Contains(r.stderr, "copy it to the device") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q; want exit 1 and one line naming %s", args, r.code, r.stderr, kind)
			}
			after, err := os.Lstat(out)
			if err != nil || after.Mode() != before.Mode() || !os.SameFile(before, after) {
				t.Errorf("%v: the output path changed: %v, %v", args, after, err)
			}
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(targets)+3 {
		t.Errorf("files left behind: %v", entries)
	}
}

// TestInputFIFO: a FIFO given as the input of encrypt, decrypt, dump, ls
// or as --header is refused at once in one line (exit 1); open(2) of a
// FIFO with no writer used to block for ever.
func TestInputFIFO(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	enc := filepath.Join(dir, "enc")
	fastEncrypt(t, key, randomFile(t, dir, "plain.raw", 8192), enc)
	for _, args := range [][]string{
		{"encrypt", "-d", key, fastIter, fifo, filepath.Join(dir, "out")},
		{"decrypt", "-d", key, fifo, filepath.Join(dir, "out")},
		{"dump", fifo},
		{"ls", "-d", key, fifo},
		{"decrypt", "-d", key, "--header", fifo, enc, filepath.Join(dir, "out")},
	} {
		done := make(chan result, 1)
		go func() { done <- cryptimg(t, "", args...) }()
		select {
		case r := <-done:
			if r.code != exitFailure || !strings.Contains(r.stderr, fifo+": not a regular file") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("%v: exit %d, stderr %q", args, r.code, r.stderr)
			}
		case <-time.After(10 * time.Second):
			// Unblock the open with a writer, then fail.
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Close()
			}
			<-done
			t.Fatalf("%v: still in open(2) of the FIFO after 10 s", args)
		}
	}
}

func TestDumpText(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	plain := randomFile(t, dir, "plain.raw", 8192)
	enc := filepath.Join(dir, "enc")
	fastEncrypt(t, key, plain, enc, "--uuid", "01234567-89ab-cdef-0123-456789abcdef")
	r := mustRun(t, "dump", enc)
	for _, want := range []string{"UUID:          \t01234567-89ab-cdef-0123-456789abcdef", "Cipher mode:   \tcbc-essiv:sha256", "Key Slot 0: ENABLED", "Key Slot 7: DISABLED", "AF stripes:         \t4000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	if strings.Contains(r.stdout, "secret") {
		t.Error("dump shows a secret")
	}
}

func TestJSONSummaryAndProgress(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	plain := randomFile(t, dir, "plain.raw", 4<<20)
	enc := filepath.Join(dir, "enc")
	r := mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--json", "--progress", "json", plain, enc)
	var s summary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("stdout is not one JSON object: %v: %q", err, r.stdout)
	}
	if s.MessageType != "summary" || s.Op != "encrypt" || s.Bytes != 4<<20 || s.Cipher != "aes-cbc-essiv:sha256" || s.KeyBits != 256 {
		t.Errorf("summary %+v", s)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("progress line is not JSON: %q", lines[len(lines)-1])
	}
	if last["bytes_done"] != float64(4<<20) || last["bytes_total"] != float64(4<<20) {
		t.Errorf("last progress line %v", last)
	}
	// Without a terminal and without --progress, stderr stays quiet.
	r = mustRun(t, "decrypt", "-d", key, "--quiet", enc, filepath.Join(dir, "out"))
	if r.stderr != "" || r.stdout != "" {
		t.Errorf("quiet decrypt printed %q %q", r.stdout, r.stderr)
	}
}

// TestChunkSizeRoundTrip encrypts and decrypts with a non-default chunk size
// and number of workers, and with a chunk larger than the image.
func TestChunkSizeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "secret")
	plain := randomFile(t, dir, "plain.raw", 9<<20+512)
	for _, c := range []struct{ chunk, jobs string }{{"65536", "3"}, {"4194304", "1"}, {"67108864", "2"}} {
		enc := filepath.Join(dir, "enc-"+c.chunk)
		out := filepath.Join(dir, "out-"+c.chunk)
		mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--chunk-size", c.chunk, "-j", c.jobs, plain, enc)
		mustRun(t, "decrypt", "-d", key, "--chunk-size", c.chunk, "-j", c.jobs, enc, out)
		sameContent(t, plain, out)
	}
}
