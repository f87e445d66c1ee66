//go:build purego

package asm

import "testing"

// The purego build has no SHA-256 kernels, whatever the CPU.
func TestSHA256PureGo(t *testing.T) {
	impls := SHA256Implementations()
	if len(impls) != 1 || impls[0].Name != GenericSHA256.Name || BestSHA256().Name != GenericSHA256.Name {
		t.Fatalf("purego build lists %d SHA-256 implementations, the first %q; want only generic", len(impls), impls[0].Name)
	}
}
