package secmem

import (
	"bytes"
	"testing"
)

// TestClone: Clone copies into new memory, on every system.
func TestClone(t *testing.T) {
	src := []byte("passphrase")
	c := Clone(src)
	if !bytes.Equal(c, src) || &c[0] == &src[0] {
		t.Fatalf("Clone = %q", c)
	}
	Free(c)
	if len(Alloc(0)) != 0 {
		t.Error("Alloc(0) is not empty")
	}
}
