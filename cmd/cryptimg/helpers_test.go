package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// result is what one in-process cryptimg run produced.
type result struct {
	code           int
	stdout, stderr string
}

// cryptimg runs the CLI in-process with the given stdin.
func cryptimg(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	g := &globalOptions{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb}
	code := execute(context.Background(), g, args)
	return result{code, out.String(), errb.String()}
}

// mustRun runs cryptimg and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := cryptimg(t, "", args...)
	if r.code != 0 {
		t.Fatalf("cryptimg %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r
}

// requireTool returns the path of an interop peer (package peer's rule:
// skipped outside CI when missing, a failure in CI).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	return peer.Path(t, name)
}

// sh runs a command and fails the test on a non-zero exit.
func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// retry runs a qemu-img command up to 10 times: Debian's qemu-img 7.2 fails
// its PBKDF benchmark at random ("Unable to get accurate CPU usage").
func retry(t *testing.T, name string, args ...string) {
	t.Helper()
	var out []byte
	var err error
	for i := 0; i < 10; i++ {
		out, err = exec.Command(name, args...).CombinedOutput()
		if err == nil {
			return
		}
		// The failures come in bursts on a busy machine: back off.
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
	}
	t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
}

// randomFile writes n random bytes to dir/name.
func randomFile(t *testing.T, dir, name string, n int) string {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileSHA(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func sameContent(t *testing.T, a, b string) {
	t.Helper()
	if fileSHA(t, a) != fileSHA(t, b) {
		t.Fatalf("%s and %s differ", filepath.Base(a), filepath.Base(b))
	}
}

func noFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		t.Fatalf("%s exists, want no output", path)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".cryptimg-") && strings.HasSuffix(e.Name(), ".tmp") {
			t.Fatalf("temporary file %s left behind", e.Name())
		}
	}
}
