package verity

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/cryptimg/cryptimg/sectors"
)

// runMapped calls t on each chunk of m (chunk bytes, the last one
// shorter), as sectors.Run would on the same bytes read from the file:
// with the 512-byte unit number of its first byte, from jobs goroutines.
// The error of the lowest chunk wins, as in sectors.Run; chunks after a
// failed one are skipped. A page of m that can no longer be read (the file
// was truncated meanwhile: SIGBUS) is an *sectors.IOError, not a crash.
// progress, if not nil, gets the bytes done after each chunk, one call at
// a time.
func runMapped(ctx context.Context, m []byte, chunk, jobs int, t sectors.Transform, progress func(done int64)) error {
	if jobs <= 0 {
		jobs = runtime.GOMAXPROCS(0)
	}
	n := (len(m) + chunk - 1) / chunk
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstBad = n
		firstErr error
		done     int64
		wg       sync.WaitGroup
	)
	fail := func(c int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if c < firstBad {
			firstBad, firstErr = c, err
		}
	}
	failed := func(c int) bool {
		mu.Lock()
		defer mu.Unlock()
		return c > firstBad
	}
	work := func() {
		defer wg.Done()
		debug.SetPanicOnFault(true)
		c := -1
		defer func() {
			if r := recover(); r != nil {
				// Only a memory fault (it has an address) is the file's;
				// any other panic is a bug and stays one.
				var fault interface{ Addr() uintptr }
				if err, ok := r.(error); !ok || !errors.As(err, &fault) || c < 0 {
					panic(r)
				}
				fail(c, &sectors.IOError{Op: "read input", Offset: int64(c) * int64(chunk),
					Err: fmt.Errorf("the file changed size while it was read: %v", r)})
			}
		}()
		for {
			c = int(next.Add(1) - 1)
			if c >= n || failed(c) {
				return
			}
			if err := ctx.Err(); err != nil {
				fail(c, err)
				return
			}
			b := m[c*chunk : min((c+1)*chunk, len(m))]
			if err := t(nil, b, uint64(c)*uint64(chunk)/sectors.UnitSize); err != nil {
				fail(c, err)
				continue
			}
			if progress != nil {
				mu.Lock()
				done += int64(len(b))
				progress(done)
				mu.Unlock()
			}
		}
	}
	for range min(jobs, n) {
		wg.Add(1)
		go work()
	}
	wg.Wait()
	return firstErr
}
