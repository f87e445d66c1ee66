package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary builds cryptimg once for tests that need a real process.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cryptimg-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "cryptimg")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("building cryptimg: %v", binErr)
	}
	return binPath
}

// interrupt starts cryptimg, sends sig after delay and checks that it
// exits with 130 within a second and leaves no output behind.
func interrupt(t *testing.T, sig syscall.Signal, delay time.Duration, out string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(delay)
	sent := time.Now()
	cmd.Process.Signal(sig)
	err := cmd.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitInterrupted {
		t.Fatalf("exit %v, want 130 (did the job finish before the signal? raise the size)", err)
	}
	if took > time.Second {
		t.Errorf("took %v after the signal, want under 1s", took)
	}
	noFile(t, out)
}

func TestInterruptRemovesOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	// A large sparse input: reading it costs nothing, encrypting it takes
	// seconds, so the signal lands mid-pipeline.
	big := filepath.Join(dir, "big.raw")
	f, _ := os.Create(big)
	f.Truncate(8 << 30)
	f.Close()
	out := filepath.Join(dir, "out.luks")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		interrupt(t, sig, 400*time.Millisecond, out,
			"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--jobs", "1", big, out)
	}
	// During the PBKDF2 benchmark, before the pipeline starts.
	interrupt(t, syscall.SIGINT, 150*time.Millisecond, out, "encrypt", "-d", key, "--iter-time", "5000", big, out)
}
