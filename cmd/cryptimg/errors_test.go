package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/image"
)

// cancelOnProgress is a stderr that cancels the run at the first
// --progress json status line, which an in-place operation writes once its
// journal exists, before the first window.
type cancelOnProgress struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel func()
}

func (w *cancelOnProgress) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m progressJSONMessage
	if json.Unmarshal(bytes.TrimSpace(p), &m) == nil && m.MessageType == "status" {
		w.cancel()
	}
	return w.buf.Write(p)
}

// TestInterruptedSaysResume: Ctrl-C in an in-place operation says that the
// same command continues it, and it does.
func TestInterruptedSaysResume(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := randomFile(t, dir, "disk.raw", 8<<20)
	args := []string{"encrypt", "--in-place", "-d", key, "--pbkdf-force-iterations", "1000", "--hotzone-size", "1048576", "--jobs", "1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnProgress{cancel: cancel}
	var out bytes.Buffer
	g := &globalOptions{stdin: strings.NewReader(""), stdout: &out, stderr: w}
	code := execute(ctx, g, append(append([]string{}, args...), "--progress", "json", "--json", img))
	if code != exitInterrupted {
		t.Fatalf("exit %d, want 130 (did it finish before the cancel?)\n%s", code, w.buf.String())
	}
	if _, err := os.Stat(img + image.JournalSuffix); err != nil {
		t.Fatalf("no journal after the interrupt: %v", err)
	}
	stderr := w.buf.String()
	want := "cryptimg: interrupted; run the same command again to continue, or: cryptimg encrypt --in-place --resume " + img + "\n"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want the line %q", stderr, want)
	}
	var e errorJSON
	if err := json.Unmarshal(out.Bytes(), &e); err != nil || e.MessageType != "error" || e.Error != "interrupted" ||
		e.ExitCode != exitInterrupted || !strings.Contains(e.Hint, "run the same command again") {
		t.Errorf("--json: %q (%v)", out.String(), err)
	}
	mustRun(t, append(args, img)...)
	if _, err := os.Stat(img + image.JournalSuffix); err == nil {
		t.Fatal("the journal is left after the rerun")
	}
	mustRun(t, "test-key", "-d", key, img)
}

// TestNewlineKeyHint: a passphrase piped with echo (a trailing newline)
// that matches no slot gets a hint naming the newline; the key is used as
// given, and a key without a newline gets no such hint.
func TestNewlineKeyHint(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	enc := filepath.Join(dir, "enc.luks")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, enc)
	const hintLine = "cryptimg: hint: the key read from stdin ends in a newline, which is part of the key"
	r := cryptimg(t, testPassphrase+"\n", "test-key", "-d", "-", enc)
	if r.code != exitNoKey || !strings.Contains(r.stderr, "\n"+hintLine) || !strings.Contains(r.stderr, "printf '%s'") {
		t.Errorf("echo pass | test-key -d -: exit %d, stderr %q, want exit 2 and the hint", r.code, r.stderr)
	}
	nl := writeFile(t, filepath.Join(dir, "nl.key"), testPassphrase+"\n")
	r = cryptimg(t, "", "decrypt", "-d", nl, enc, filepath.Join(dir, "out.raw"))
	if r.code != exitNoKey || !strings.Contains(r.stderr, "cryptimg: hint: the key file "+nl+" ends in a newline") {
		t.Errorf("decrypt with a newline key file: exit %d, stderr %q", r.code, r.stderr)
	}
	// --keyfile-size cuts the newline off, as the hint says.
	mustRun(t, "test-key", "-d", nl, "--keyfile-size", strconv.Itoa(len(testPassphrase)), enc)
	wrong := writeFile(t, filepath.Join(dir, "wrong.key"), "wrong")
	if r := cryptimg(t, "", "test-key", "-d", wrong, enc); r.code != exitNoKey || strings.Contains(r.stderr, "hint") {
		t.Errorf("a wrong key without a newline: exit %d, stderr %q, want no hint", r.code, r.stderr)
	}
}

// TestJSONErrors: under --json a failure prints one JSON object on stdout
// with the error, the hint and the exit code; the line on stderr stays.
func TestJSONErrors(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<10)
	enc := filepath.Join(dir, "enc.luks")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, enc)
	wrong := writeFile(t, filepath.Join(dir, "wrong"), "wrong")
	for _, c := range []struct {
		args []string
		code int
		err  string // in the error
		hint string // in the hint
	}{
		{[]string{"decrypt", "--json", "-d", wrong, enc, filepath.Join(dir, "out.raw")}, exitNoKey, "no key available", ""},
		{[]string{"encrypt", "--json", "-d", key, plain, enc}, exitFailure, "exists", "--force"},
		{[]string{"dump", "--json", plain}, exitBadImage, "", ""},
		{[]string{"resize", "--json", "--size", "junk", enc}, exitFailure, "--size", ""},
		// A bad flag before --json stops the parsing: --json still counts.
		{[]string{"decrypt", "--bogus", "--json", "-d", key, enc, filepath.Join(dir, "out.raw")}, exitFailure, "bogus", ""},
	} {
		r := cryptimg(t, "", c.args...)
		var e errorJSON
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		if err := dec.Decode(&e); err != nil || dec.More() {
			t.Errorf("%v: stdout %q, want one JSON object (%v)", c.args, r.stdout, err)
			continue
		}
		if r.code != c.code || e.ExitCode != c.code || e.MessageType != "error" || e.Error == "" ||
			!strings.Contains(e.Error, c.err) || !strings.Contains(e.Hint, c.hint) {
			t.Errorf("%v: exit %d, %+v; want exit %d, error with %q, hint with %q", c.args, r.code, e, c.code, c.err, c.hint)
		}
		if !strings.HasPrefix(r.stderr, "cryptimg: error: "+e.Error) {
			t.Errorf("%v: stderr %q, want the error line", c.args, r.stderr)
		}
	}
	// Without --json stdout stays empty.
	if r := cryptimg(t, "", "dump", plain); r.code != exitBadImage || r.stdout != "" {
		t.Errorf("dump without --json: exit %d, stdout %q", r.code, r.stdout)
	}
}
