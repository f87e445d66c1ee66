package header

// Estimating what an unlock costs before doing it: a hostile or careless
// header can ask for 2^32 PBKDF2 iterations or 4 GiB of argon2 memory per
// key slot, and every slot is tried with a wrong passphrase.

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"golang.org/x/crypto/argon2"
)

// Cost is the estimated work of an unlock: CPU time, peak memory, and the
// dearest part in words.
type Cost struct {
	Time   time.Duration
	Memory uint64 // bytes
	What   string
}

func (c *Cost) add(t time.Duration, mem uint64, what string) {
	if t > c.Time/2 || c.What == "" {
		c.What = what // roughly the dearest
	}
	c.Time = min(c.Time+t, seconds(1e9))
	c.Memory = max(c.Memory, mem)
}

var (
	rateOnce sync.Map // hash -> *pbkdf2Rate
	argonPer struct {
		once sync.Once
		d    float64 // seconds per KiB and pass, one thread
	}
)

type pbkdf2Rate struct {
	once sync.Once
	perS float64 // iterations per second, one hash block of output
}

// benchRuns is how many times each benchmark of the estimate runs; the
// fastest run counts.
const benchRuns = 5

// The estimate decides whether an unlock runs, so the same header must
// get the same answer from one command to the next (test-key, then
// decrypt) on a busy machine too. Its benchmarks therefore count CPU
// time, not wall time, which a loaded machine stretches by any factor,
// and keep the fastest of benchRuns runs, the one least disturbed (cache
// misses, frequency changes). What is left to chance is small against the
// rest of the estimate: memory against the RAM is exact, and the threads
// it can use are GOMAXPROCS, fixed for the process.

// pbkdf2Time estimates iterations of PBKDF2-hash with an outLen-byte
// output, from 2000-iteration runs timed once per process.
func pbkdf2Time(hash string, iterations uint32, outLen int) time.Duration {
	v, _ := rateOnce.LoadOrStore(hash, &pbkdf2Rate{})
	r := v.(*pbkdf2Rate)
	r.once.Do(func() { r.perS = measurePBKDF2(hash) })
	if r.perS == 0 {
		return 0
	}
	blocks := 1
	if hf, err := hashFunc(hash); err == nil {
		size := hf().Size()
		blocks = (outLen + size - 1) / size
	}
	return seconds(float64(iterations) * float64(blocks) / r.perS)
}

// measurePBKDF2 returns PBKDF2-hash iterations per second of one thread's
// CPU time (threadClock), 0 for a hash it does not know.
func measurePBKDF2(hash string) float64 {
	var err error
	d := benchMin(threadClock, func() {
		var dk []byte
		dk, err = deriveKey(hash, []byte("cost"), make([]byte, 32), 2000, 1)
		clear(dk)
	})
	if err != nil {
		return 0
	}
	return 2000 / d.Seconds()
}

// argon2Time estimates argon2 with time passes over memory KiB on threads
// lanes, from one-pass 4 MiB runs timed once per process.
func argon2Time(passes, memory, threads uint32) time.Duration {
	argonPer.once.Do(func() { argonPer.d = measureArgon2() })
	par := float64(max(1, min(int(threads), runtime.GOMAXPROCS(0))))
	return seconds(float64(passes) * float64(memory) * argonPer.d / par)
}

// measureArgon2 returns the seconds of CPU time argon2id takes per KiB and
// pass on one lane. x/crypto's argon2 fills its lanes in goroutines of
// its own, so the clock is the process's CPU time (procClock), not the
// calling thread's.
func measureArgon2() float64 {
	d := benchMin(procClock, func() {
		clear(argon2.IDKey([]byte("cost"), make([]byte, 32), 1, 4096, 1, 32))
	})
	return d.Seconds() / 4096
}

// benchMin returns the least time of benchRuns runs of f on clock (wall
// time where the clock does not advance).
func benchMin(clock func() (func() time.Duration, func()), f func()) time.Duration {
	now, done := clock()
	defer done()
	best := time.Duration(math.MaxInt64)
	for range benchRuns {
		start, wallStart := now(), time.Now()
		f()
		d := now() - start
		if d <= 0 {
			d = time.Since(wallStart)
		}
		best = min(best, d)
	}
	return max(best, time.Nanosecond)
}

// seconds converts an estimate, capped at 30 years so that sums cannot
// overflow.
func seconds(s float64) time.Duration {
	return time.Duration(min(s, 1e9) * float64(time.Second))
}

// cost estimates one run of the KDF.
func (k KDF) cost(outLen int) (time.Duration, uint64, string) {
	switch k.Type {
	case "argon2i", "argon2id":
		return argon2Time(k.Time, k.Memory, k.CPUs), uint64(k.Memory) << 10,
			fmt.Sprintf("%s with %d passes over %d MiB", k.Type, k.Time, k.Memory>>10)
	default:
		return pbkdf2Time(k.Hash, k.Iterations, outLen), 0, fmt.Sprintf("%d PBKDF2-%s iterations", k.Iterations, k.Hash)
	}
}

// MemoryLimit is half of the RAM in bytes, the most argon2 memory an
// unlock takes without being allowed to (cryptsetup's own cap).
func MemoryLimit() uint64 { return uint64(halfRAM()) << 10 }

// UnlockCost estimates an Unlock of slot (-1: every active slot, the
// worst case of a wrong passphrase): each slot's PBKDF2 and the master key
// digest's.
func (h *LUKS1) UnlockCost(slot int) Cost {
	var c Cost
	for i := range h.Slots {
		if (slot == -1 || slot == i) && h.Slots[i].Active() {
			t, _, what := KDF{Type: "pbkdf2", Hash: h.HashSpec, Iterations: h.Slots[i].Iterations}.cost(int(h.KeyBytes))
			d, _, _ := KDF{Type: "pbkdf2", Hash: h.HashSpec, Iterations: h.MKDigestIter}.cost(DigestSize)
			c.add(t+d, 0, fmt.Sprintf("%s in key slot %d", what, i))
		}
	}
	return c
}

// UnlockCost estimates an Unlock of slot (-1: every keyslot of the data
// segment): each keyslot's KDF and the digest's PBKDF2.
func (h *LUKS2) UnlockCost(slot int) Cost {
	var c Cost
	try := h.dataSlots()
	if slot != -1 {
		try = []int{slot}
	}
	d := h.dataDigest()
	for _, n := range try {
		k := h.Keyslots[n]
		if k == nil || k.Type != "luks2" || h.slotErr(n) != nil {
			continue
		}
		t, mem, what := k.kdf().cost(k.Area.KeySize)
		dt, _, _ := KDF{Type: "pbkdf2", Hash: d.Hash, Iterations: d.Iterations}.cost(len(d.Digest))
		c.add(t+dt, mem, fmt.Sprintf("%s in keyslot %d", what, n))
	}
	return c
}
