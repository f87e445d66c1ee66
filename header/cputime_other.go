//go:build !linux

package header

import "time"

// benchClock returns a wall clock; thread CPU time is only read on Linux.
func benchClock() (now func() time.Duration, done func()) { return wallClock() }

// threadClock and procClock return wall clocks too.
func threadClock() (now func() time.Duration, done func()) { return wallClock() }
func procClock() (now func() time.Duration, done func())   { return wallClock() }
