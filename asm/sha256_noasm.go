//go:build !amd64 || purego

package asm

// Without assembly the generic implementation is the only one.

func sha256ArchImpls() []SHA256Impl { return nil }

func sha256ArchCompress(kern sha256Kernel, h *[sha256Lanes]SHA256State, p *[sha256Lanes][]byte, lanes, nblocks int) {
	panic("asm: internal error: no SHA-256 kernels on this platform")
}
