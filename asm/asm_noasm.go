//go:build (!amd64 && !arm64) || purego

package asm

func archImpls() []Impl { return nil }

// expandKey has nothing to do without assembly: the generic code uses the
// crypto/aes block held in the Schedule.
func expandKey(s *Schedule, key []byte) {}

func xtsArchImpls() []XTSImpl { return nil }
