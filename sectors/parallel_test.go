package sectors

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestConcurrentReads checks that workers read their own chunks at the
// same time when src allows it, and that the output and the ordered writes
// and progress are those of a serial run.
func TestConcurrentReads(t *testing.T) {
	const chunk, n = 4096, 64
	src := &genReader{size: n * chunk, delay: time.Millisecond}
	dst := &memWriter{buf: make([]byte, n*chunk)}
	extents := []Extent{{Length: n * chunk, Sector: 7}}
	var progress []int64
	o := Options{Jobs: 4, ChunkSize: chunk, ConcurrentReads: true, Progress: func(d int64) { progress = append(progress, d) }}
	if err := Run(context.Background(), dst, src, extents, xorSectors, o); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, dst.buf, extents, 0)
	if !src.overlap.Load() {
		t.Error("no two ReadAt calls ran at once with ConcurrentReads and 4 jobs")
	}
	if dst.overlap.Load() {
		t.Error("ordered writes overlapped")
	}
	for i, off := range dst.offsets {
		if off != int64(i)*chunk {
			t.Fatalf("write %d at %d, want %d: ordered writes out of order", i, off, int64(i)*chunk)
		}
	}
	if len(progress) != n || progress[n-1] != n*chunk || !slices.IsSorted(progress) {
		t.Errorf("progress %v, want %d increasing steps to %d", progress, n, n*chunk)
	}
}

// TestUnordered checks that with Options.Unordered the workers write
// their chunks themselves as they finish, one WriteAt at a time, and that the output, the sparse
// holes, the progress and Sync are as in an ordered run.
func TestUnordered(t *testing.T) {
	const chunk, n = 8192, 48
	src := &genReader{size: n * chunk}
	dst := &memWriter{buf: make([]byte, n*chunk)}
	// Chunks finish out of order; the workers write them as they finish.
	slow := func(d, s []byte, first uint64) error {
		time.Sleep(time.Duration(first*7919%1000) * time.Microsecond)
		return xorSectors(d, s, first)
	}
	extents := []Extent{{Length: n * chunk / 2, Sector: 3}, {SrcOffset: n * chunk / 2, DstOffset: n * chunk / 2, Length: n * chunk / 2, Sector: 3 + n*chunk/2/UnitSize}}
	var progress []int64
	o := Options{Jobs: 4, ChunkSize: chunk, Unordered: true, Progress: func(d int64) { progress = append(progress, d) }}
	if err := Run(context.Background(), dst, src, extents, slow, o); err != nil {
		t.Fatal(err)
	}
	checkOutput(t, dst.buf, extents, 0)
	if slices.IsSorted(dst.offsets) {
		t.Error("writes in chunk order with Unordered: the workers did not write as they finished")
	}
	if dst.overlap.Load() {
		t.Error("two WriteAt calls ran at once; unordered writes go one at a time")
	}
	if dst.synced != 1 {
		t.Errorf("Sync called %d times, want 1", dst.synced)
	}
	if len(progress) != n || progress[n-1] != n*chunk || !slices.IsSorted(progress) {
		t.Errorf("progress %v, want %d increasing steps to %d", progress, n, n*chunk)
	}

	// Sparse: zero chunks are left out by the workers too.
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(n * chunk); err != nil {
		t.Fatal(err)
	}
	o = Options{Jobs: 4, ChunkSize: chunk, Unordered: true, Sparse: true}
	if err := Run(context.Background(), f, zeroReader{}, []Extent{{Length: n * chunk}}, func(d, s []byte, _ uint64) error { return nil }, o); err != nil {
		t.Fatal(err)
	}
	if spans := DataSpans(f, n*chunk); len(spans) != 0 {
		t.Errorf("zero output written as data: %v", spans)
	}
}

// slowFailReader fails every read at or past bad, the later ones at once
// and the first failing chunk's only after a delay.
type slowFailReader struct {
	bad, first int64
}

func (r slowFailReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) <= r.bad {
		clear(p)
		return len(p), nil
	}
	if off <= r.first {
		time.Sleep(20 * time.Millisecond)
	}
	return 0, syscall.EIO
}

// TestFirstErrorInChunkOrder: chunks read in parallel fail in any order
// in time, and the error returned is the earliest chunk's, in either
// write mode.
func TestFirstErrorInChunkOrder(t *testing.T) {
	const chunk = 4096
	for _, unordered := range []bool{false, true} {
		src := slowFailReader{bad: 10 * chunk, first: 10 * chunk}
		o := Options{Jobs: 4, ChunkSize: chunk, ConcurrentReads: true, Unordered: unordered}
		err := Run(context.Background(), discardWriter{}, src, []Extent{{Length: 64 * chunk}}, xorSectors, o)
		var ioe *IOError
		if !errors.As(err, &ioe) || !errors.Is(err, syscall.EIO) || ioe.Offset != 10*chunk {
			t.Errorf("unordered %v: err = %v, want read input IOError at %d", unordered, err, 10*chunk)
		}
	}
}

// TestConcurrentReader lists the ReaderAts read in parallel by default.
func TestConcurrentReader(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bytes.NewReader(nil)
	for _, c := range []struct {
		r    io.ReaderAt
		want bool
	}{
		{f, true}, {br, true}, {io.NewSectionReader(f, 0, 1), true}, {io.NewSectionReader(br, 0, 1), true},
		{&genReader{}, false}, {io.NewSectionReader(&genReader{}, 0, 1), false},
	} {
		if got := concurrentReader(c.r); got != c.want {
			t.Errorf("concurrentReader(%T) = %v, want %v", c.r, got, c.want)
		}
	}
}
