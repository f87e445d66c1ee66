//go:build !purego

package asm

// archImpls lists the arm64 kernels this CPU supports, best first.
// The assembly kernels are added by the accelerated-ESSIV work.
func archImpls() []Impl { return nil }

func expandKey(s *Schedule, key []byte) {}
