package sectors

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryBound runs 256 MiB through the pipeline and checks the number of
// chunk buffers (by instrumenting the pool) and the bytes the heap allocated,
// also when one early chunk is slow or the writer is slow, so that the reader
// and the other workers would run ahead if nothing stopped them.
func TestMemoryBound(t *testing.T) {
	const (
		total = 256 << 20
		chunk = 1 << 20
	)
	slowFirst := func(d, s []byte, first uint64) error {
		if first == 2*chunk/UnitSize {
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}
	cases := []struct {
		name string
		jobs int
		t    Transform
		dst  interface {
			WriteAt([]byte, int64) (int, error)
		}
	}{
		{"jobs=1", 1, func(d, s []byte, _ uint64) error { return nil }, discardWriter{}},
		{"jobs=2", 2, func(d, s []byte, _ uint64) error { return nil }, discardWriter{}},
		{"jobs=4/slow chunk", 4, slowFirst, discardWriter{}},
		{"jobs=3/slow writer", 3, func(d, s []byte, _ uint64) error { return nil }, &slowWriter{delay: 200 * time.Microsecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st stats
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			var last int64
			o := Options{Jobs: tc.jobs, ChunkSize: chunk, Progress: func(n int64) { last = n }}
			if err := run(context.Background(), tc.dst, zeroReader{}, []Extent{{Length: total}}, tc.t, o, &st); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&ms1)
			if last != total {
				t.Errorf("progress ended at %d, want %d", last, total)
			}
			limit := 2*tc.jobs + 2
			if st.buffers > limit {
				t.Errorf("%d chunk buffers, want <= 2*Jobs+2 = %d", st.buffers, limit)
			}
			if st.buffers < min(tc.jobs+1, limit) {
				t.Errorf("only %d chunk buffers: the pipeline cannot keep %d workers busy", st.buffers, tc.jobs)
			}
			alloc := ms1.TotalAlloc - ms0.TotalAlloc
			if alloc > uint64(limit*chunk+256<<10) {
				t.Errorf("allocated %d bytes for a %d-byte run, want <= %d", alloc, total, limit*chunk+256<<10)
			}
			t.Logf("%d buffers, %d bytes allocated", st.buffers, alloc)
		})
	}
}

// TestNoAllocsPerChunk compares the allocations of a run of 16 chunks and of
// 1024 chunks: the difference is what the steady state allocates per chunk.
func TestNoAllocsPerChunk(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	const chunk = 4096
	allocs := func(chunks int) float64 {
		extents := []Extent{{Length: int64(chunks) * chunk}}
		var calls int
		o := Options{Jobs: 2, ChunkSize: chunk, Progress: func(int64) { calls++ }, Sparse: true}
		a := testing.AllocsPerRun(20, func() {
			if err := Run(context.Background(), discardWriter{}, zeroReader{}, extents, xorFast, o); err != nil {
				t.Fatal(err)
			}
		})
		if calls != 21*chunks {
			t.Fatalf("progress called %d times, want %d", calls, 21*chunks)
		}
		return a
	}
	small, large := allocs(16), allocs(1024)
	t.Logf("allocations per run: %v for 16 chunks, %v for 1024 chunks", small, large)
	if perChunk := (large - small) / (1024 - 16); perChunk > 0.01 {
		t.Errorf("%.3f allocations per chunk, want 0", perChunk)
	}
}

// xorFast is a cheap transform that touches every byte, for benchmarks.
func xorFast(dst, src []byte, first uint64) error {
	var key [UnitSize]byte
	key[0] = byte(first)
	for i := 0; i < len(src); i += UnitSize {
		subtle.XORBytes(dst[i:i+UnitSize], src[i:i+UnitSize], key[:])
	}
	return nil
}

// BenchmarkRun measures the pipeline overhead: Run from a zero reader to a
// discarding writer, against the same transform called in a plain loop over
// one buffer (which also skips the read copy).
func BenchmarkRun(b *testing.B) {
	const (
		total = 64 << 20
		chunk = 1 << 20
	)
	transforms := []struct {
		name string
		t    Transform
	}{
		{"identity", func(d, s []byte, _ uint64) error { return nil }},
		{"xor", xorFast},
	}
	for _, tr := range transforms {
		b.Run(tr.name+"/loop", func(b *testing.B) {
			buf := make([]byte, chunk)
			b.SetBytes(total)
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < total; off += chunk {
					clear(buf) // what zeroReader does
					tr.t(buf, buf, uint64(off/UnitSize))
				}
			}
		})
		for _, jobs := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/jobs=%d", tr.name, jobs), func(b *testing.B) {
				o := Options{Jobs: jobs, ChunkSize: chunk}
				b.SetBytes(total)
				b.ReportAllocs()
				for b.Loop() {
					if err := Run(context.Background(), discardWriter{}, zeroReader{}, []Extent{{Length: total}}, tr.t, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestBuffersCarryOver runs window after window with one Buffers: the
// chunk buffers are allocated by the first run only, smaller or larger
// chunks later still work, and every window's output is right.
func TestBuffersCarryOver(t *testing.T) {
	const (
		chunk  = 64 << 10
		window = 4 * chunk
		n      = 16
	)
	src := &genReader{size: n * window}
	dst := &memWriter{buf: make([]byte, n*window)}
	var bufs Buffers
	allocated := 0
	for k := range int64(n) {
		var st stats
		size := chunk
		if k == n-1 {
			size = 2 * chunk // larger than the kept buffers: they are not lent
		}
		o := Options{Jobs: 2, ChunkSize: size, Buffers: &bufs}
		ext := []Extent{{SrcOffset: k * window, DstOffset: k * window, Length: window, Sector: uint64(k * window / UnitSize)}}
		if err := run(context.Background(), dst, src, ext, xorSectors, o, &st); err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			allocated = st.buffers
		}
		if got := len(bufs.free); got < allocated {
			t.Fatalf("window %d: %d buffers kept, want at least %d", k, got, allocated)
		}
	}
	if allocated == 0 {
		t.Fatal("the first run allocated no buffers")
	}
	want := make([]byte, n*window)
	for i := range want {
		want[i] = genByte(int64(i))
	}
	if err := xorSectors(want, want, 0); err != nil {
		t.Fatal(err)
	}
	if subtle.ConstantTimeCompare(dst.buf, want) != 1 {
		t.Fatal("output differs from the transformed input")
	}
	// A second pass over the same windows allocates nothing new: every
	// buffer comes from bufs.
	for k := range int64(n - 1) {
		var st stats
		o := Options{Jobs: 2, ChunkSize: chunk, Buffers: &bufs}
		ext := []Extent{{SrcOffset: k * window, DstOffset: k * window, Length: window, Sector: uint64(k * window / UnitSize)}}
		before := len(bufs.free)
		if err := run(context.Background(), discardWriter{}, src, ext, xorSectors, o, &st); err != nil {
			t.Fatal(err)
		}
		if len(bufs.free) != before {
			t.Fatalf("window %d: kept %d buffers, had %d: buffers were allocated or lost", k, len(bufs.free), before)
		}
	}
}

// TestCollect: with Collect every buffer exists before the first chunk is
// transformed, one collection runs before the workers start, and none
// during a run that allocates nothing.
func TestCollect(t *testing.T) {
	const chunk = 64 << 10
	src := &genReader{size: 256 * chunk}
	dst := &memWriter{buf: make([]byte, 256*chunk)}
	want := &memWriter{buf: make([]byte, 256*chunk)}
	ext := []Extent{{Length: 256 * chunk}}
	if err := Run(context.Background(), want, src, ext, xorSectors, Options{Jobs: 2, ChunkSize: chunk}); err != nil {
		t.Fatal(err)
	}
	var st stats
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	tr, gcAtFirst := gcAtFirstTransform()
	if err := run(context.Background(), dst, src, ext, tr, Options{Jobs: 2, ChunkSize: chunk, Collect: true}, &st); err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if st.buffers != 2*2+2 {
		t.Errorf("%d buffers, want all %d", st.buffers, 2*2+2)
	}
	if g := gcAtFirst(); g < before.NumGC+1 {
		t.Errorf("no collection before the first transform (NumGC %d, then %d)", before.NumGC, g)
	}
	if !raceEnabled && after.NumGC != gcAtFirst() {
		t.Errorf("%d collections during the run", after.NumGC-gcAtFirst())
	}
	if !bytes.Equal(dst.buf, want.buf) {
		t.Error("the output differs from a run without Collect")
	}
}

// Stream honours Collect as Run does: one collection before the first
// transform and none during the stream (decrypt IMAGE - of 1 GiB spent
// 124 ms in a mark phase that kept signalling the workers without it).
func TestCollectStream(t *testing.T) {
	const chunk = 64 << 10
	var want bytes.Buffer
	if _, err := Stream(context.Background(), &want, io.NewSectionReader(&genReader{size: 256 * chunk}, 0, 256*chunk), 0, xorSectors, Options{Jobs: 2, ChunkSize: chunk}); err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	tr, gcAtFirst := gcAtFirstTransform()
	var got bytes.Buffer
	got.Grow(want.Len())
	if _, err := Stream(context.Background(), &got, io.NewSectionReader(&genReader{size: 256 * chunk}, 0, 256*chunk), 0, tr, Options{Jobs: 2, ChunkSize: chunk, Collect: true}); err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if g := gcAtFirst(); g < before.NumGC+1 {
		t.Errorf("no collection before the first transform (NumGC %d, then %d)", before.NumGC, g)
	}
	if !raceEnabled && after.NumGC != gcAtFirst() {
		t.Errorf("%d collections during the stream", after.NumGC-gcAtFirst())
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Error("the output differs from a stream without Collect")
	}
}

// gcAtFirstTransform is xorSectors with the number of collections so far
// noted at its first call, which the returned function reports.
func gcAtFirstTransform() (Transform, func() uint32) {
	var n atomic.Uint32
	var first sync.Once
	return func(d, s []byte, unit uint64) error {
		first.Do(func() {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			n.Store(m.NumGC)
		})
		return xorSectors(d, s, unit)
	}, n.Load
}
