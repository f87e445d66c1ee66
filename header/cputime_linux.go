package header

import (
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// cpuClock returns a clock of CPU time from clock_gettime(2): id is
// CLOCK_THREAD_CPUTIME_ID (the calling goroutine, locked to its thread
// until done) or CLOCK_PROCESS_CPUTIME_ID (every thread of the process,
// for work that runs in goroutines of its own). Unlike getrusage's split
// of user and system time, which the kernel adjusts to stay monotonic and
// so can lag by a tick and then jump, these count to the nanosecond. Wall
// time where the clock is not available.
func cpuClock(id int32) (now func() time.Duration, done func()) {
	if id == unix.CLOCK_THREAD_CPUTIME_ID {
		runtime.LockOSThread()
	}
	read := func() time.Duration {
		var ts unix.Timespec
		if unix.ClockGettime(id, &ts) != nil {
			return 0
		}
		return time.Duration(ts.Nano())
	}
	if read() == 0 {
		if id == unix.CLOCK_THREAD_CPUTIME_ID {
			runtime.UnlockOSThread()
		}
		return wallClock()
	}
	if id == unix.CLOCK_THREAD_CPUTIME_ID {
		return read, runtime.UnlockOSThread
	}
	return read, func() {}
}

// threadClock is the calling thread's CPU time.
func threadClock() (now func() time.Duration, done func()) {
	return cpuClock(unix.CLOCK_THREAD_CPUTIME_ID)
}

// procClock is the process's CPU time: other processes on the machine do
// not change it.
func procClock() (now func() time.Duration, done func()) {
	return cpuClock(unix.CLOCK_PROCESS_CPUTIME_ID)
}
