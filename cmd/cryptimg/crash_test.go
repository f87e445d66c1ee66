package main

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// crashRuns is how many runs of each command the crash test kills.
const crashRuns = 60

// keyState is what an image's header says after a run: whether it parses
// and which of the two keys open which slot (-1: none).
type keyState struct {
	err           error
	oldSlot       int // slot the old key opens
	newSlot       int // slot the new key opens
	oldSlotActive bool
}

func inspectKeys(t *testing.T, path string, oldKey, newKey []byte) keyState {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := keyState{oldSlot: -1, newSlot: -1}
	e, err := image.Open(f)
	if err != nil {
		s.err = err
		return s
	}
	try := func(key []byte) int {
		slot, err := e.TestKey(key, -1)
		if err != nil && !errors.Is(err, header.ErrNoMatchingKeyslot) && !errors.Is(err, header.ErrNoActiveKeyslot) {
			s.err = err
		}
		return slot
	}
	s.oldSlot, s.newSlot = try(oldKey), try(newKey)
	s.oldSlotActive = e.Header.(*header.LUKS1).Slots[0].Active()
	return s
}

// runKilled starts cryptimg with args, sends SIGKILL after delay (unless it
// has exited), and reports whether it exited 0 on its own.
func runKilled(t *testing.T, delay time.Duration, args ...string) (succeeded bool) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("cryptimg %v failed without being killed: %v", args, err)
		}
		return true
	case <-time.After(delay):
	}
	cmd.Process.Signal(syscall.SIGKILL)
	err := <-done
	var ee *exec.ExitError
	if err == nil {
		return true // exited 0 just before the signal
	}
	if errors.As(err, &ee) && ee.ExitCode() == -1 {
		return false // killed
	}
	t.Fatalf("cryptimg %v: %v", args, err)
	return false
}

// TestCrashSafety kills add-key and change-key with SIGKILL at random
// moments and checks that no kill ever loses the old key. Kill times are
// uniform over the measured duration of an undisturbed run (half of them
// over its second half), so they spread over process start, PBKDF2, the
// material write, the header write, the verification and the wipe.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs it 120 times")
	}
	bin := binary(t)
	dir := t.TempDir()
	oldKey, newKey := []byte("old passphrase"), []byte("new passphrase")
	oldFile := writeFile(t, filepath.Join(dir, "old"), string(oldKey))
	newFile := writeFile(t, filepath.Join(dir, "new"), string(newKey))
	base := filepath.Join(dir, "base.luks")
	fastEncrypt(t, oldFile, randomFile(t, dir, "plain.raw", 64<<10), base)
	baseBytes, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "img.luks")
	fresh := func() {
		if err := os.WriteFile(img, baseBytes, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))

	for _, op := range []string{"add-key", "change-key"} {
		var before, between, after, completed int
		// 1000 iterations keep runs fast; 20000 stretch the PBKDF2 of
		// the new slot, before its material is written and while it is
		// verified after the header write, so more kills land there.
		for _, iter := range []string{"1000", "20000"} {
			args := []string{op, "-q", "-d", oldFile, "--new-key-file", newFile, "--pbkdf-force-iterations", iter, img}
			d := fastestRun(t, bin, fresh, args)
			runs := crashRuns
			if raceEnabled {
				// The killed processes are not race-instrumented; the
				// normal run does all sixty.
				runs = 10
			}
			for i := 0; i < runs/2; i++ {
				fresh()
				// Half the kills uniform over the whole run, half over
				// its second half, where the writes are.
				lo := int64(0)
				if i%2 == 1 {
					lo = int64(d) / 2
				}
				delay := time.Duration(lo + rnd.Int64N(int64(d)-lo+1))
				ok := runKilled(t, delay, args...)
				s := inspectKeys(t, img, oldKey, newKey)
				if s.err != nil {
					t.Fatalf("%s killed after %v: image broken: %v", op, delay, s.err)
				}
				if s.oldSlot < 0 && s.newSlot < 0 {
					t.Fatalf("%s killed after %v: neither key unlocks", op, delay)
				}
				if ok && s.newSlot < 0 {
					t.Fatalf("%s reported success but the new key does not unlock", op)
				}
				switch op {
				case "add-key":
					if s.oldSlot != 0 {
						t.Fatalf("add-key killed after %v: old key lost (slot %d)", delay, s.oldSlot)
					}
					switch {
					case ok:
						completed++
					case s.newSlot < 0:
						before++
					default:
						after++
					}
				case "change-key":
					// The commit point is the header write that disables
					// slot 0; until then the old key must open slot 0.
					committed := !s.oldSlotActive
					if committed && (s.newSlot < 0 || s.oldSlot >= 0) {
						t.Fatalf("change-key killed after %v: old slot disabled but new key slot %d, old key slot %d", delay, s.newSlot, s.oldSlot)
					}
					if !committed && s.oldSlot != 0 {
						t.Fatalf("change-key killed after %v: old key lost before the commit point", delay)
					}
					if ok && !committed {
						t.Fatalf("change-key reported success with the old slot still active")
					}
					switch {
					case ok:
						completed++
					case !committed && s.newSlot < 0:
						before++
					case !committed:
						between++ // both keys work
					default:
						after++
					}
				}
			}
		}
		t.Logf("%s: %d kills before the commit point, %d with both keys working, %d after the commit point, %d runs completed first",
			op, before, between, after, completed)
	}
}

// fastestRun returns the fastest of three undisturbed runs on a fresh
// image, so that most kills land before the process is done.
func fastestRun(t *testing.T, bin string, fresh func(), args []string) time.Duration {
	t.Helper()
	var best time.Duration
	for i := 0; i < 3; i++ {
		fresh()
		start := time.Now()
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		if d := time.Since(start); i == 0 || d < best {
			best = d
		}
	}
	t.Logf("%v: fastest undisturbed run %v", args[:1], best)
	return best
}
