package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreams: "-" is stdin or stdout for encrypt and decrypt of raw
// images: what goes through a pipe is what the file commands make and
// read, LUKS1 and LUKS2, and nothing named "-" is ever created.
func TestStreams(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "stream passphrase")
	plain := randomFile(t, dir, "plain.raw", 3<<20+512)
	pb, _ := os.ReadFile(plain)
	for _, typ := range [][]string{{"--type", "luks1"}, {"--type", "luks2", "--pbkdf", "pbkdf2"}} {
		t.Run(typ[1], func(t *testing.T) {
			enc := filepath.Join(dir, typ[1]+".luks")
			args := append([]string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000"}, typ...)
			r := cryptimg(t, string(pb), append(args, "-", enc)...)
			if r.code != 0 {
				t.Fatalf("encrypt - FILE: exit %d\n%s", r.code, r.stderr)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, enc)
			out := filepath.Join(dir, typ[1]+".out")
			mustRun(t, "decrypt", "-d", key, enc, out)
			sameContent(t, plain, out)
			// File to stdout, stdin to file, stdin to stdout.
			if r := mustRun(t, "decrypt", "-d", key, enc, "-"); r.stdout != string(pb) {
				t.Fatal("decrypt FILE - differs")
			}
			eb, _ := os.ReadFile(enc)
			out2 := filepath.Join(dir, typ[1]+".out2")
			if r := cryptimg(t, string(eb), "decrypt", "-d", key, "-", out2); r.code != 0 {
				t.Fatalf("decrypt - FILE: exit %d\n%s", r.code, r.stderr)
			}
			sameContent(t, plain, out2)
			r = cryptimg(t, string(pb), append(args, "-", "-")...)
			if r.code != 0 || len(r.stdout) != len(eb) {
				t.Fatalf("encrypt - -: exit %d, %d bytes (a file is %d)\n%s", r.code, len(r.stdout), len(eb), r.stderr)
			}
			if r2 := cryptimg(t, r.stdout, "decrypt", "-d", key, "-", "-"); r2.code != 0 || r2.stdout != string(pb) {
				t.Fatalf("decrypt - - of encrypt - -: exit %d\n%s", r2.code, r2.stderr)
			}
		})
	}
	// LUKS2 from a stream of unknown size uses 512-byte sectors.
	if d := sh(t, cs, "luksDump", filepath.Join(dir, "luks2.luks")); !strings.Contains(d, "sector: 512 [bytes]") {
		t.Fatalf("streamed LUKS2 sector size:\n%s", d)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Fatal(`a file named "-" was created`)
	}
}

// TestStreamRefusals: what a stream cannot carry is refused with one line
// and no output file; a stream ending inside a sector fails and leaves no
// output.
func TestStreamRefusals(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "stream passphrase")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	pb, _ := os.ReadFile(plain)
	qcow := filepath.Join(dir, "plain.qcow2")
	mustRun(t, "decrypt", "-d", key, func() string {
		enc := filepath.Join(dir, "q.qcow2")
		fastEncrypt(t, key, plain, enc, "-O", "qcow2")
		return enc
	}(), qcow)
	qb, _ := os.ReadFile(qcow)
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name, stdin string
		args        []string
		msg         string
	}{
		{"qcow2-stdin", string(qb), []string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "-", out}, "qcow2"},
		{"qcow2-output", string(pb), []string{"encrypt", "-d", key, "-O", "qcow2", "-", out}, "qcow2"},
		{"integrity", string(pb), []string{"encrypt", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", "-", out}, "seekable"},
		{"json-stdout", string(pb), []string{"encrypt", "-d", key, "--json", "-", "-"}, "--json"},
		{"key-on-stdin", string(pb), []string{"encrypt", "-d", "-", "-", out}, "stdin carries the image"},
		{"partial-sector", string(pb) + "x", []string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "-", out}, "stdin to " + out + ": image size is not a multiple of the sector size"},
		{"not-luks", string(pb), []string{"decrypt", "-d", key, "-", out}, "LUKS"},
		{"truncated-header", string(pb[:100]), []string{"decrypt", "-d", key, "-", out}, "LUKS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := cryptimg(t, c.stdin, c.args...)
			if r.code == 0 || !strings.Contains(r.stderr, c.msg) || strings.Count(r.stderr, "\n") > 2 {
				t.Fatalf("exit %d, want a failure naming %q:\n%s", r.code, c.msg, r.stderr)
			}
			noFile(t, out)
		})
	}
}

// TestDecryptToStdoutViews: decrypt writes to stdout the plaintext of a
// qcow2 image (the guest's disk, unallocated clusters as zeros) and of
// data with a detached header, plain or with integrity protection; an
// OUTPUT that is /dev/null discards it, while another character device is
// still refused. All four were refused before.
func TestDecryptToStdoutViews(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "stream passphrase")
	plain := randomFile(t, dir, "plain.raw", 3<<20)
	os.Truncate(plain, 4<<20) // a zero tail: unallocated in the qcow2
	pb := mustRead(t, plain)
	q, det, hdr := filepath.Join(dir, "vm.qcow2"), filepath.Join(dir, "det.img"), filepath.Join(dir, "det.hdr")
	fastEncrypt(t, key, plain, q, "-O", "qcow2")
	fastEncrypt(t, key, plain, det, "--header", hdr)
	adet, ahdr := filepath.Join(dir, "adet.img"), filepath.Join(dir, "adet.hdr")
	fastEncrypt(t, key, plain, adet, "--header", ahdr, "--type", "luks2", "--pbkdf", "pbkdf2", "--integrity", "hmac-sha256")
	for _, args := range [][]string{
		{"decrypt", "-d", key, q, "-"},
		{"decrypt", "-d", key, "--header", hdr, det, "-"},
		{"decrypt", "-d", key, "--header", ahdr, adet, "-"},
	} {
		r := cryptimg(t, "", args...)
		if r.code != 0 || r.stdout != string(pb) {
			t.Errorf("%v: exit %d, %d bytes on stdout, want %d\n%s", args, r.code, len(r.stdout), len(pb), r.stderr)
		}
	}
	raw := filepath.Join(dir, "raw.luks")
	fastEncrypt(t, key, plain, raw)
	for _, args := range [][]string{
		{"decrypt", "-d", key, raw, os.DevNull},
		{"decrypt", "-d", key, q, os.DevNull},
		{"decrypt", "-d", key, "--header", hdr, det, os.DevNull},
	} {
		r := cryptimg(t, "", args...)
		if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "to "+os.DevNull+" (4.0 MiB") {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	if r := cryptimg(t, "", "decrypt", "-d", key, raw, "/dev/zero"); r.code != 1 || !strings.Contains(r.stderr, "not a regular file: it is a character device") {
		t.Errorf("decrypt to /dev/zero: exit %d\n%s", r.code, r.stderr)
	}
}

// TestStreamBrokenPipe: the reader of stdout going away ends decrypt with
// a non-zero exit and a message saying so, not a silent signal death.
func TestStreamBrokenPipe(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "stream passphrase")
	plain := randomFile(t, dir, "plain.raw", 16<<20)
	enc := filepath.Join(dir, "img.luks")
	fastEncrypt(t, key, plain, enc)
	cmd := exec.Command(bin, "decrypt", "-d", key, enc, "-")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := stdout.Read(buf); err != nil {
		t.Fatal(err)
	}
	stdout.Close()
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || !ee.Exited() || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "writing to stdout: the reading end of the pipe was closed") {
		t.Fatalf("decrypt into a closed pipe: %v (exited normally: %v)\n%s", err, ok && ee.Exited(), stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "-")); err == nil {
		t.Fatal(`a file named "-" was created`)
	}
}

// TestStreamProgressTotal: a file read as a stream (encrypt FILE -,
// decrypt FILE -) has a known size, and its JSON progress gives it as
// bytes_total; from stdin the total stays unknown (-1).
func TestStreamProgressTotal(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "stream passphrase")
	plain := randomFile(t, dir, "plain.raw", 3<<20)
	pb, _ := os.ReadFile(plain)
	enc := filepath.Join(dir, "enc.luks")
	fastEncrypt(t, key, plain, enc)
	eb, _ := os.ReadFile(enc)
	for _, c := range []struct {
		name, stdin string
		args        []string
		total       int64
	}{
		{"encrypt FILE -", "", []string{"encrypt", "-d", key, fastIter, plain, "-"}, int64(len(pb))},
		{"decrypt FILE -", "", []string{"decrypt", "-d", key, enc, "-"}, int64(len(pb))},
		{"decrypt - -", string(eb), []string{"decrypt", "-d", key, "-", "-"}, -1},
	} {
		r := cryptimg(t, c.stdin, append([]string{"--progress", "json"}, c.args...)...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\n%s", c.name, r.code, r.stderr)
		}
		var progress strings.Builder
		for l := range strings.Lines(r.stderr) {
			if strings.HasPrefix(l, "{") {
				progress.WriteString(l)
			}
		}
		lines := parseProgressLines(t, progress.String())
		if len(lines) == 0 {
			t.Fatalf("%s: no progress lines\n%s", c.name, r.stderr)
		}
		for _, l := range lines {
			if l.BytesTotal != c.total {
				t.Fatalf("%s: bytes_total %d, want %d", c.name, l.BytesTotal, c.total)
			}
		}
		if last := lines[len(lines)-1]; last.MessageType != "summary" || last.BytesDone != int64(len(pb)) {
			t.Fatalf("%s: last line %+v", c.name, last)
		}
	}
}
