package header

import (
	"runtime"
	"syscall"
	"time"
)

// rusageThread is Linux's RUSAGE_THREAD, which the syscall package does not
// name.
const rusageThread = 1

// benchClock returns a clock for the PBKDF2 benchmark and a function to call
// when done. Like cryptsetup (crypto_backend/pbkdf_check.c, getrusage), it
// counts CPU time, here of the calling thread, so a busy machine does not
// make the benchmark pick fewer iterations. It falls back to wall time if
// the thread's CPU time is not available.
func benchClock() (now func() time.Duration, done func()) {
	runtime.LockOSThread()
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		runtime.UnlockOSThread()
		return wallClock()
	}
	return func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			return 0
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}, runtime.UnlockOSThread
}
