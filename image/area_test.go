package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/header"
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

// TestWholeArea: a LUKS2 header from FormatHeader keeps only the area's
// first pages in memory; written whole to a file that held something
// before, or streamed, the area is its bytes and then zeros to AreaSize,
// and the header reads back from it.
func TestWholeArea(t *testing.T) {
	f, err := FormatHeader(testPass, header.Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Clear()
	if f.AreaSize != 16<<20 || len(f.Area) > 1<<20 {
		t.Fatalf("area of %d bytes held, %d in all; want at most 1 MiB of 16 MiB", len(f.Area), f.AreaSize)
	}
	want := make([]byte, f.AreaSize)
	copy(want, f.Area)

	p := filepath.Join(t.TempDir(), "hdr")
	if err := os.WriteFile(p, bytes.Repeat([]byte{0xa5}, 17<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	hf, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	if err := writeWholeArea(hf, f); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if !bytes.Equal(got[:f.AreaSize], want) {
		t.Error("the header file does not hold the area and zeros")
	}
	if _, err := header.Read(bytes.NewReader(got), 0, f.AreaSize); err != nil {
		t.Errorf("the written area does not read back: %v", err)
	}

	var s bytes.Buffer
	if err := streamArea(&s, f); err != nil || !bytes.Equal(s.Bytes(), want) {
		t.Errorf("the streamed area is %d bytes (%v), want the area and zeros, %d", s.Len(), err, f.AreaSize)
	}
	whole, copied := f.wholeArea()
	if !copied || !bytes.Equal(whole, want) {
		t.Error("wholeArea is not the area and zeros")
	}
}
