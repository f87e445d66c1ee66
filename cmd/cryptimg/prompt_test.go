package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// onTerminal runs the real binary under script(1), which gives it a
// pseudo-terminal, and types the given lines at its prompts.
func onTerminal(t *testing.T, lines []string, args ...string) (string, int) {
	t.Helper()
	scr := requireTool(t, "script")
	cmdline := binary(t)
	for _, a := range args {
		cmdline += " '" + a + "'"
	}
	cmd := exec.Command(scr, "-qec", cmdline, "/dev/null")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = pr
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	go func() {
		for _, l := range lines {
			time.Sleep(700 * time.Millisecond) // let the prompt turn echo off first
			fmt.Fprintln(pw, l)
		}
		time.Sleep(500 * time.Millisecond)
		pw.Close()
	}()
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), code
}

// Without --key-file, a terminal is prompted: twice for a new passphrase,
// once to unlock; the typed newline is not part of the key, and nothing
// typed is echoed.
func TestPromptOnTerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	enc := filepath.Join(dir, "enc.luks")
	out, code := onTerminal(t, []string{"typed secret", "typed secret"}, "encrypt", "--pbkdf-force-iterations", "1000", plain, enc)
	if code != 0 || strings.Count(out, "passphrase") != 2 {
		t.Fatalf("encrypt on a terminal: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "typed secret") {
		t.Errorf("the passphrase was echoed:\n%s", out)
	}
	key := writeFile(t, filepath.Join(dir, "key"), "typed secret")
	mustRun(t, "test-key", "-d", key, enc)
	back := filepath.Join(dir, "back.raw")
	if out, code := onTerminal(t, []string{"typed secret"}, "decrypt", enc, back); code != 0 {
		t.Fatalf("decrypt on a terminal: exit %d\n%s", code, out)
	}
	sameContent(t, plain, back)
	// Two different passphrases: refused, nothing written.
	enc2 := filepath.Join(dir, "enc2.luks")
	if out, code := onTerminal(t, []string{"one", "two"}, "encrypt", "--pbkdf-force-iterations", "1000", plain, enc2); code != exitFailure || !strings.Contains(out, "do not match") {
		t.Fatalf("mismatched passphrases: exit %d\n%s", code, out)
	}
	noFile(t, enc2)
}
