package sectors

import (
	"bytes"
	"io"
)

// zeros is compared against to find all-zero blocks; bytes.Equal is
// vectorised, so this runs at memory speed.
var zeros [4096]byte

// IsZero reports whether b is all zero.
func IsZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// writeSparse writes buf to dst at off except for the blocks that are all
// zero. Blocks are block bytes long and aligned on absolute dst offsets, so
// that skipped blocks line up with file system blocks (or qcow2 clusters)
// and become holes. Runs of non-zero blocks are written with one call.
func writeSparse(dst io.WriterAt, buf []byte, off int64, block int) error {
	// blockEnd returns the end, relative to buf, of the block holding buf[i].
	blockEnd := func(i int) int {
		abs := off + int64(i)
		return min(len(buf), i+int(int64(block)-abs%int64(block)))
	}
	for i := 0; i < len(buf); {
		// Skip zero blocks.
		for i < len(buf) {
			e := blockEnd(i)
			if !IsZero(buf[i:e]) {
				break
			}
			i = e
		}
		// Collect non-zero blocks.
		j := i
		for j < len(buf) {
			e := blockEnd(j)
			if IsZero(buf[j:e]) {
				break
			}
			j = e
		}
		if j > i {
			if err := writeFull(dst, buf[i:j], off+int64(i)); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}
