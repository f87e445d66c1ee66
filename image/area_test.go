package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// recordWrites is a WriterAt into a buffer that records each write.
type recordWrites struct {
	buf    []byte
	writes [][2]int
}

func (r *recordWrites) WriteAt(p []byte, off int64) (int, error) {
	copy(r.buf[off:], p)
	r.writes = append(r.writes, [2]int{int(off), int(off) + len(p)})
	return len(p), nil
}

// TestWriteArea: a new header area is written as the runs of blocks that
// hold something, so the file reads back as the area with holes between;
// clearArea leaves it all zeros.
func TestWriteArea(t *testing.T) {
	const b = areaBlock
	area := make([]byte, 16*b+100)
	area[0] = 1       // block 0
	area[b+b-1] = 2   // block 1: a run of blocks 0–1
	area[5*b+7] = 3   // block 5 alone
	area[16*b+99] = 4 // the short last block
	area[9*b] = 5     // blocks 9 and 10: one run
	area[10*b+b/2] = 6
	w := &recordWrites{buf: make([]byte, len(area))}
	if err := writeArea(w, area); err != nil {
		t.Fatal(err)
	}
	want := [][2]int{{0, 2 * b}, {5 * b, 6 * b}, {9 * b, 11 * b}, {16 * b, 16*b + 100}}
	if len(w.writes) != len(want) {
		t.Fatalf("writes %v, want %v", w.writes, want)
	}
	for i := range want {
		if w.writes[i] != want[i] {
			t.Errorf("write %d: %v, want %v", i, w.writes[i], want[i])
		}
	}
	if !bytes.Equal(w.buf, area) {
		t.Error("the written area differs")
	}

	// On a file, sized afterwards as the callers do, it reads back whole.
	p := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := writeArea(f, area); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(len(area)) + 1<<20); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if !bytes.Equal(got[:len(area)], area) || !bytes.Equal(got[len(area):], make([]byte, 1<<20)) {
		t.Error("the file does not read back as the area and zeros")
	}

	// An all-zero area writes nothing.
	w = &recordWrites{buf: make([]byte, 4*b)}
	if err := writeArea(w, make([]byte, 4*b)); err != nil || len(w.writes) != 0 {
		t.Errorf("all-zero area: writes %v, %v", w.writes, err)
	}

	clearArea(area)
	if !bytes.Equal(area, make([]byte, len(area))) {
		t.Error("clearArea left non-zero bytes")
	}
}
