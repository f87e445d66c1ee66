//go:build !linux

package secmem

func alloc(n int) []byte { return make([]byte, max(n, 0)) }

func free(b []byte) { clear(b) }

func locked([]byte) bool { return false }

func harden() error { return nil }

func owns([]byte) bool { return false }
