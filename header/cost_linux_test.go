package header

import (
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestUnlockCostUnderLoad: the estimate's benchmarks give about the same
// figures with every CPU busy in other processes as on an idle machine,
// so that the same header gets the same decision from one command to the
// next. They used to time one wall-clock run: a 4 GiB argon2 keyslot was
// estimated anywhere from 1m8s to 12m under load.
func TestUnlockCostUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads every CPU for a moment")
	}
	estimate := func() (argon, pbkdf2 time.Duration) {
		argonPer.once = sync.Once{}
		rateOnce.Delete("sha256")
		return argon2Time(1, 1<<20, 1), pbkdf2Time("sha256", 1_000_000, 32)
	}
	a0, p0 := estimate()
	n := 2 * runtime.NumCPU()
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Skipf("no sh to load the machine: %v", err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	time.Sleep(50 * time.Millisecond)
	a1, p1 := estimate()
	t.Logf("argon2 1 GiB: %v idle, %v with %d busy processes; PBKDF2 10^6: %v, %v", a0, a1, n, p0, p1)
	for _, c := range []struct {
		what       string
		idle, load time.Duration
	}{{"argon2", a0, a1}, {"pbkdf2", p0, p1}} {
		if c.load > 2*c.idle || c.idle > 2*c.load {
			t.Errorf("%s: estimated %v idle and %v under load", c.what, c.idle, c.load)
		}
	}
}
