package sectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

type call struct {
	sector uint64
	length int
}

// expectedCalls lists the Transform calls a run should make, in order.
func expectedCalls(extents []Extent, chunk int) []call {
	var calls []call
	for _, e := range extents {
		for off := int64(0); off < e.Length; off += int64(chunk) {
			calls = append(calls, call{e.Sector + uint64(off/UnitSize), int(min(int64(chunk), e.Length-off))})
		}
	}
	return calls
}

// checkOutput verifies that out holds the XOR transform of genReader data in
// every extent and fill everywhere else.
func checkOutput(t *testing.T, out []byte, extents []Extent, fill byte) {
	t.Helper()
	covered := make([]bool, len(out))
	for k, e := range extents {
		for r := int64(0); r < e.Length; r++ {
			d := e.DstOffset + r
			want := genByte(e.SrcOffset+r) ^ xorKey(e.Sector+uint64(r/UnitSize), int(r%UnitSize))
			if out[d] != want {
				t.Fatalf("extent %d: dst[%d] (relative %d) = %#x, want %#x", k, d, r, out[d], want)
			}
			covered[d] = true
		}
	}
	for i, c := range covered {
		if !c && out[i] != fill {
			t.Fatalf("dst[%d] = %#x outside every extent, want untouched %#x", i, out[i], fill)
		}
	}
}

// TestOrderingRandomDelays runs the XOR transform with random sleeps, so that
// workers finish out of order, and checks every output byte, every Transform
// call, the write order and the progress sequence.
func TestOrderingRandomDelays(t *testing.T) {
	cases := []struct {
		jobs, chunk, sector int
		length              int64
	}{
		{1, 4096, 512, 64<<10 + 1536},
		{2, 4096, 512, 64<<10 + 1536},
		{4, 512, 512, 32 << 10},
		{8, 8192, 4096, 200<<10 + 4096},
		{3, 1 << 20, 512, 3<<20 + 512},
	}
	for _, tc := range cases {
		name := fmt.Sprintf("jobs=%d/chunk=%d/sector=%d", tc.jobs, tc.chunk, tc.sector)
		t.Run(name, func(t *testing.T) {
			src := &genReader{size: tc.length + 4096}
			extents := []Extent{{SrcOffset: 4096, DstOffset: 0, Length: tc.length, Sector: 1000}}
			dst := &memWriter{buf: make([]byte, tc.length)}

			var mu sync.Mutex
			var calls []call
			tr := func(d, s []byte, first uint64) error {
				if &d[0] != &s[0] {
					t.Errorf("transform not in place")
				}
				if len(s)%tc.sector != 0 {
					t.Errorf("transform got %d bytes, not whole %d-byte sectors", len(s), tc.sector)
				}
				time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
				xorSectors(d, s, first)
				mu.Lock()
				calls = append(calls, call{first, len(s)})
				mu.Unlock()
				return nil
			}
			var progress []int64
			o := Options{Jobs: tc.jobs, ChunkSize: tc.chunk, SectorSize: tc.sector, Progress: func(n int64) { progress = append(progress, n) }}
			if err := Run(context.Background(), dst, src, extents, tr, o); err != nil {
				t.Fatal(err)
			}
			checkOutput(t, dst.buf, extents, 0)

			want := expectedCalls(extents, tc.chunk)
			got := slices.Clone(calls)
			slices.SortFunc(got, func(a, b call) int { return int(a.sector) - int(b.sector) })
			if !slices.Equal(got, want) {
				t.Errorf("transform calls (sorted) = %v, want %v", got, want)
			}
			// Writes and progress follow the chunk order exactly.
			var wantOffsets, wantProgress []int64
			var done int64
			for i, c := range want {
				wantOffsets = append(wantOffsets, int64(i)*int64(tc.chunk))
				done += int64(c.length)
				wantProgress = append(wantProgress, done)
			}
			if !slices.Equal(dst.offsets, wantOffsets) {
				t.Errorf("write offsets = %v, want %v", dst.offsets, wantOffsets)
			}
			if !slices.Equal(progress, wantProgress) {
				t.Errorf("progress = %v, want %v", progress, wantProgress)
			}
			if dst.overlap.Load() || src.overlap.Load() {
				t.Errorf("concurrent calls: WriteAt %v, ReadAt %v; want none", dst.overlap.Load(), src.overlap.Load())
			}
			if dst.synced != 1 {
				t.Errorf("Sync called %d times, want 1", dst.synced)
			}
		})
	}
}

// TestMultipleExtents checks extents with gaps in dst, overlapping and
// unordered source ranges and unrelated sector bases.
func TestMultipleExtents(t *testing.T) {
	const chunk = 4096
	extents := []Extent{
		{SrcOffset: 0, DstOffset: 4096, Length: 3*chunk + 1024, Sector: 0},
		{SrcOffset: 5*chunk + 512, DstOffset: 8 * chunk, Length: chunk - 512, Sector: 1 << 40},
		{SrcOffset: 100 * 512, DstOffset: 20*chunk + 512, Length: 2048, Sector: 7},
		{SrcOffset: 9 * chunk, DstOffset: 30 * chunk, Length: 0, Sector: 99}, // empty
		{SrcOffset: 2 * chunk, DstOffset: 12 * chunk, Length: 5 * chunk, Sector: 1<<64 - 20},
	}
	for _, jobs := range []int{1, 2, 5} {
		t.Run(fmt.Sprint("jobs=", jobs), func(t *testing.T) {
			dst := &memWriter{buf: bytes.Repeat([]byte{0xEE}, 32*chunk)}
			var total int64
			for _, e := range extents {
				total += e.Length
			}
			var last int64
			o := Options{Jobs: jobs, ChunkSize: chunk, Progress: func(n int64) {
				if n <= last {
					t.Errorf("progress %d after %d", n, last)
				}
				last = n
			}}
			err := Run(context.Background(), dst, &genReader{size: 16 * chunk}, extents, xorSectors, o)
			if err != nil {
				t.Fatal(err)
			}
			checkOutput(t, dst.buf, extents, 0xEE)
			if last != total {
				t.Errorf("final progress %d, want %d", last, total)
			}
		})
	}
}

func TestInvalidOptions(t *testing.T) {
	ok := []Extent{{Length: 4096}}
	cases := []struct {
		name    string
		extents []Extent
		o       Options
		want    string
	}{
		{"jobs", ok, Options{Jobs: -1}, "invalid number of jobs -1"},
		{"sector", ok, Options{SectorSize: 1000}, "sector size 1000 is not a positive multiple of 512"},
		{"chunk", ok, Options{ChunkSize: 4096 + 512, SectorSize: 4096}, "chunk size 4608 is not a positive multiple of the sector size 4096"},
		{"extent length", []Extent{{Length: 4096}, {Length: 100}}, Options{}, "extent 1: length 100 is not a multiple of the sector size 512"},
		{"extent length 4k", []Extent{{Length: 512}}, Options{SectorSize: 4096}, "extent 0: length 512 is not a multiple of the sector size 4096"},
		{"offset", []Extent{{SrcOffset: -512, Length: 512}}, Options{}, "extent 0: negative offset"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), discardWriter{}, zeroReader{}, tc.extents, xorSectors, tc.o)
			if err == nil || err.Error() != "sectors: "+tc.want {
				t.Errorf("err = %v, want %q", err, "sectors: "+tc.want)
			}
		})
	}
}

func TestNoExtents(t *testing.T) {
	called := false
	err := Run(context.Background(), discardWriter{}, zeroReader{}, nil, func(d, s []byte, _ uint64) error { called = true; return nil }, Options{})
	if err != nil || called {
		t.Errorf("Run with no extents: err %v, transform called %v; want nil, false", err, called)
	}
}

// failWriter writes up to limit and then fails with ENOSPC, like a full disk.
type failWriter struct {
	limit int64
	calls int
}

func (w *failWriter) WriteAt(p []byte, off int64) (int, error) {
	w.calls++
	if off+int64(len(p)) <= w.limit {
		return len(p), nil
	}
	n := max(0, int(w.limit-off))
	return n, syscall.ENOSPC
}

func TestWriteError(t *testing.T) {
	base := runtime.NumGoroutine()
	for _, limit := range []int64{0, 1 << 20, 3<<20 + 4096} {
		w := &failWriter{limit: 100<<20 + limit}
		extents := []Extent{{SrcOffset: 0, DstOffset: 100 << 20, Length: 16 << 20}}
		err := Run(context.Background(), w, zeroReader{}, extents, stampSectors, Options{Jobs: 2})
		var ioe *IOError
		if !errors.As(err, &ioe) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("limit %d: err = %v, want *IOError wrapping ENOSPC", limit, err)
		}
		if ioe.Op != "write output" || ioe.Offset != w.limit {
			t.Errorf("limit %d: IOError{Op: %q, Offset: %d}, want write output at %d", limit, ioe.Op, ioe.Offset, w.limit)
		}
		want := fmt.Sprintf("write output at offset %d: no space left on device", w.limit)
		if err.Error() != want {
			t.Errorf("message %q, want %q", err.Error(), want)
		}
		if w.calls != int(limit>>20)+1 {
			t.Errorf("limit %d: %d WriteAt calls, want %d: writing must stop at the first error", limit, w.calls, limit>>20+1)
		}
	}
	waitGoroutines(t, base)
}

// failReader fails with EIO at one offset.
type failReader struct {
	bad int64
}

func (r failReader) ReadAt(p []byte, off int64) (int, error) {
	if off <= r.bad && r.bad < off+int64(len(p)) {
		n := int(r.bad - off)
		clear(p[:n])
		return n, syscall.EIO
	}
	clear(p)
	return len(p), nil
}

func TestReadError(t *testing.T) {
	base := runtime.NumGoroutine()
	extents := []Extent{{SrcOffset: 512, DstOffset: 0, Length: 32 << 20}}
	err := Run(context.Background(), discardWriter{}, failReader{bad: 5<<20 + 12345}, extents, stampSectors, Options{Jobs: 2})
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.Is(err, syscall.EIO) || ioe.Op != "read input" || ioe.Offset != 5<<20+12345 {
		t.Fatalf("err = %#v, want read input IOError at %d wrapping EIO", err, 5<<20+12345)
	}
	waitGoroutines(t, base)
}

func TestShortRead(t *testing.T) {
	src := bytes.NewReader(make([]byte, 3<<20+700))
	extents := []Extent{{SrcOffset: 1 << 20, Length: 4 << 20}}
	var progress int64
	err := Run(context.Background(), discardWriter{}, src, extents, xorSectors, Options{Progress: func(n int64) { progress = n }})
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.Is(err, io.ErrUnexpectedEOF) || ioe.Op != "read input" || ioe.Offset != 3<<20+700 {
		t.Fatalf("err = %v, want read input IOError at %d wrapping io.ErrUnexpectedEOF", err, 3<<20+700)
	}
	if progress > 2<<20 {
		t.Errorf("progress %d past the short read", progress)
	}
}

// syncErrWriter fails Sync.
type syncErrWriter struct{ discardWriter }

func (syncErrWriter) Sync() error { return syscall.EIO }

func TestSyncError(t *testing.T) {
	err := Run(context.Background(), syncErrWriter{}, zeroReader{}, []Extent{{Length: 4096}}, xorSectors, Options{})
	if !errors.Is(err, syscall.EIO) || err.Error() != "sync output: input/output error" {
		t.Errorf("err = %v, want sync output error wrapping EIO", err)
	}
}

// TestCancel cancels runs blocked in each stage and checks that Run returns
// promptly with context.Canceled and leaves no goroutine behind.
func TestCancel(t *testing.T) {
	huge := []Extent{{Length: 1 << 40}}
	slow := func(d, s []byte, first uint64) error { time.Sleep(2 * time.Millisecond); return nil }
	cases := []struct {
		name string
		dst  io.WriterAt
		src  io.ReaderAt
		t    Transform
	}{
		{"transform", discardWriter{}, zeroReader{}, slow},
		{"slow writer", &slowWriter{delay: 3 * time.Millisecond}, zeroReader{}, xorSectors},
		{"slow reader", discardWriter{}, &genReader{size: 1 << 41, delay: 3 * time.Millisecond}, xorSectors},
		{"fast", discardWriter{}, zeroReader{}, func(d, s []byte, first uint64) error { return nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- Run(ctx, tc.dst, tc.src, huge, tc.t, Options{Jobs: 4, ChunkSize: 64 << 10}) }()
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			cancel()
			select {
			case err := <-errc:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v, want context.Canceled", err)
				}
				t.Logf("returned %v after cancel", time.Since(start))
			case <-time.After(time.Second):
				t.Fatal("Run did not return within 1s of cancel")
			}
			waitGoroutines(t, base)
		})
	}
}

type slowWriter struct{ delay time.Duration }

func (w *slowWriter) WriteAt(p []byte, off int64) (int, error) {
	time.Sleep(w.delay)
	return len(p), nil
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := Run(ctx, discardWriter{}, zeroReader{}, []Extent{{Length: 4096}}, func(d, s []byte, _ uint64) error { called = true; return nil }, Options{})
	if !errors.Is(err, context.Canceled) || called {
		t.Errorf("err %v, transform called %v; want context.Canceled, false", err, called)
	}
}

func TestDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := Run(ctx, &slowWriter{delay: time.Millisecond}, zeroReader{}, []Extent{{Length: 1 << 40}}, xorSectors, Options{ChunkSize: 4096})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded", err)
	}
}

// TestParallelTransforms checks that Jobs transforms run at once, and never
// more, with a transform that sleeps, so that the count does not depend on
// the machine's speed. (Wall-clock speedup is left to the benchmarks: on a
// loaded CI machine it is too noisy to assert.)
func TestParallelTransforms(t *testing.T) {
	const chunks = 24
	for _, jobs := range []int{1, 4} {
		var mu sync.Mutex
		var running, peak int
		tr := func(d, s []byte, _ uint64) error {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}
		err := Run(context.Background(), discardWriter{}, zeroReader{}, []Extent{{Length: chunks * 4096}}, tr, Options{Jobs: jobs, ChunkSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if peak != jobs {
			t.Errorf("jobs=%d: %d transforms ran at once, want %d", jobs, peak, jobs)
		}
	}
}

// TestTransformError: a transform that fails (an authenticated mode
// finding a bad tag, say) stops the run, and Run returns its error with the
// IV sector of the chunk.
func TestTransformError(t *testing.T) {
	bad := errors.New("authentication tag mismatch")
	const chunk = 64 << 10
	var calls atomic.Int64
	tr := func(d, s []byte, first uint64) error {
		calls.Add(1)
		if first == 5*chunk/UnitSize {
			return bad
		}
		return nil
	}
	err := Run(context.Background(), discardWriter{}, zeroReader{}, []Extent{{Length: 64 * chunk}}, tr, Options{ChunkSize: chunk, Jobs: 2})
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "IV sector 640") {
		t.Fatalf("Run = %v, want the transform's error at IV sector 640", err)
	}
	if n := calls.Load(); n >= 64 {
		t.Errorf("%d transforms ran after the failure; the run should stop", n)
	}
}
