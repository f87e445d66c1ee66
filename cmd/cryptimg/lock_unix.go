//go:build unix

package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// tryLock takes an exclusive advisory lock on f without waiting.
func tryLock(f *os.File) error { return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) }

// ignoreSIGPIPE makes a write to a closed pipe an EPIPE error the command
// reports, instead of a silent death by signal (cryptimg decrypt img - |
// head).
func ignoreSIGPIPE() { signal.Ignore(unix.SIGPIPE) }
