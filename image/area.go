package image

import (
	"fmt"
	"io"
)

// areaBlock is the unit in which a new header area is written and
// cleared: a page, so that the zeros between the binary headers and key
// slots of a 16 MiB LUKS2 area stay holes in the output and untouched
// pages in memory.
const areaBlock = 4096

// writeArea writes the header area of a freshly formatted header at
// offset 0 of dst, a new empty file that the caller sizes past the area
// afterwards: only the blocks that hold something are written, the rest
// read back as zeros from the holes.
func writeArea(dst io.WriterAt, area []byte) error {
	for off := 0; off < len(area); {
		start := nextNonZero(area, off)
		if start == len(area) {
			break
		}
		end := start
		for end < len(area) && !zeroBlock(area, end) {
			end = min(end+areaBlock, len(area))
		}
		if _, err := dst.WriteAt(area[start:end], int64(start)); err != nil {
			return fmt.Errorf("failed to write header: %w", err)
		}
		off = end
	}
	return nil
}

// writeWholeArea writes f's whole header area at offset 0 of w, zeros
// included (w may be a file that held something before, such as a
// detached header file).
func writeWholeArea(w io.WriterAt, f *Formatted) error {
	if err := streamArea(io.NewOffsetWriter(w, 0), f); err != nil {
		return fmt.Errorf("failed to write header: %w", err)
	}
	return nil
}

// streamArea writes f's whole header area to w, zeros included.
func streamArea(w io.Writer, f *Formatted) error {
	if _, err := w.Write(f.Area); err != nil {
		return err
	}
	zeros := make([]byte, min(1<<20, max(0, f.AreaSize-int64(len(f.Area)))))
	for left := f.AreaSize - int64(len(f.Area)); left > 0; left -= int64(len(zeros)) {
		if _, err := w.Write(zeros[:min(int64(len(zeros)), left)]); err != nil {
			return err
		}
	}
	return nil
}

// wholeArea is f's header area with its zeros, AreaSize bytes: f.Area
// itself when it is whole, else a copy (copied), which the caller clears.
func (f *Formatted) wholeArea() (area []byte, copied bool) {
	if int64(len(f.Area)) >= f.AreaSize {
		return f.Area, false
	}
	a := make([]byte, f.AreaSize)
	copy(a, f.Area)
	return a, true
}

// clearArea zeroes the blocks of area that hold something (key material
// among them), leaving the zero blocks unwritten.
func clearArea(area []byte) {
	for off := nextNonZero(area, 0); off < len(area); off = nextNonZero(area, off+areaBlock) {
		clear(area[off:min(off+areaBlock, len(area))])
	}
}

// nextNonZero is the offset of the first block at or after off (a
// multiple of areaBlock) with a non-zero byte, or len(area).
func nextNonZero(area []byte, off int) int {
	for ; off < len(area); off += areaBlock {
		if !zeroBlock(area, off) {
			return off
		}
	}
	return len(area)
}

func zeroBlock(area []byte, off int) bool {
	for _, b := range area[off:min(off+areaBlock, len(area))] {
		if b != 0 {
			return false
		}
	}
	return true
}
