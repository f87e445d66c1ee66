//go:build !unix && !windows

package filelock

import "os"

// Systems without file locks (js, wasip1, plan9) lock nothing.
func lock(f *os.File, m Mode) error { return nil }

func isWouldBlock(error) bool { return false }
