//go:build unix

package main

import (
	"os/signal"

	"golang.org/x/sys/unix"
)

// ignoreSIGPIPE makes a write to a closed pipe an EPIPE error the command
// reports, instead of a silent death by signal (cryptimg decrypt img - |
// head).
func ignoreSIGPIPE() { signal.Ignore(unix.SIGPIPE) }
