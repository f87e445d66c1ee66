//go:build linux

package sectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// sparseFile creates a file of size bytes with data (genByte content) only in
// the given [start, end) ranges; the rest is left as holes.
func sparseFile(t *testing.T, size int64, data ...[2]int64) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "src"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, r := range data {
		b := make([]byte, r[1]-r[0])
		for i := range b {
			b[i] = genByte(r[0] + int64(i))
		}
		if _, err := f.WriteAt(b, r[0]); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// requireHoles skips the test if the file system of f does not report holes.
func requireHoles(t *testing.T, f *os.File) {
	t.Helper()
	fi, _ := f.Stat()
	if fi.Sys().(*syscall.Stat_t).Blocks*512 >= fi.Size() {
		t.Skipf("file system of %s does not keep holes", f.Name())
	}
}

func TestHoleFinder(t *testing.T) {
	const M = 1 << 20
	f := sparseFile(t, 8*M, [2]int64{0, 64 << 10}, [2]int64{2 * M, 2*M + 4096}, [2]int64{5 * M, 6 * M})
	requireHoles(t, f)

	h := newHoleFinder(f)
	if h == nil {
		t.Fatal("newHoleFinder(*os.File) = nil")
	}
	cases := []struct {
		off  int64
		hole bool
		end  int64
	}{
		{0, false, 64 << 10},
		{4096, false, 64 << 10},
		{64 << 10, true, 2 * M},
		{M, true, 2 * M},
		{2 * M, false, 2*M + 4096},
		{2*M + 4096, true, 5 * M},
		{5*M + 512, false, 6 * M},
		{6 * M, true, 8 * M},
		{8*M - 512, true, 8 * M},
	}
	for _, c := range cases {
		hole, end := h.segment(c.off)
		if hole != c.hole || end != c.end {
			t.Errorf("segment(%d) = %v, %d; want %v, %d", c.off, hole, end, c.hole, c.end)
		}
	}
	// Past the end of the file: data, so that the read reports EOF.
	if hole, _ := h.segment(8 * M); hole {
		t.Errorf("segment(size) reports a hole")
	}

	// Through an io.SectionReader the offsets are relative to the section.
	hs := newHoleFinder(io.NewSectionReader(f, 2*M, 6*M))
	if hs == nil {
		t.Fatal("newHoleFinder(*io.SectionReader) = nil")
	}
	if hole, end := hs.segment(4096); !hole || end != 3*M {
		t.Errorf("section segment(4096) = %v, %d; want true, %d", hole, end, 3*M)
	}
	if hole, end := hs.segment(0); hole || end != 4096 {
		t.Errorf("section segment(0) = %v, %d; want false, 4096", hole, end)
	}

	// Anything else gets no hole finder.
	if newHoleFinder(bytes.NewReader(nil)) != nil {
		t.Error("newHoleFinder(*bytes.Reader) != nil")
	}
}

// readChars returns the process's rchar from /proc/self/io: bytes read by
// read-like system calls, including pread.
func readChars(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// TestHolesNotRead runs over a 32 MiB file with 1.5 MiB of data and checks
// with the kernel's read counter that only the data was read, while the
// output still has the transform of zeros in the holes.
func TestHolesNotRead(t *testing.T) {
	const M = 1 << 20
	size := int64(32 * M)
	f := sparseFile(t, size, [2]int64{0, M}, [2]int64{20 * M, 20*M + 512<<10})
	requireHoles(t, f)
	extents := []Extent{{SrcOffset: 0, DstOffset: 0, Length: size, Sector: 3}}

	dst := &memWriter{buf: make([]byte, size)}
	before := readChars(t)
	if err := Run(context.Background(), dst, f, extents, stampSectors, Options{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	read := readChars(t) - before
	if read > 3*M/2+64<<10 {
		t.Errorf("read %d bytes from a file with %d bytes of data", read, 3*M/2)
	}
	// Content: data ranges transformed, holes transformed zeros.
	want := make([]byte, size)
	for _, r := range [][2]int64{{0, M}, {20 * M, 20*M + 512<<10}} {
		for i := r[0]; i < r[1]; i++ {
			want[i] = genByte(i)
		}
	}
	stampSectors(want, want, 3)
	if !bytes.Equal(dst.buf, want) {
		t.Fatal("output differs from the transform of the input")
	}

	// Control: the same file hidden behind another ReaderAt is read in full,
	// which shows that the counter sees these reads.
	before = readChars(t)
	hidden := struct{ io.ReaderAt }{f}
	if err := Run(context.Background(), discardWriter{}, hidden, extents, stampSectors, Options{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	if read := readChars(t) - before; read < size {
		t.Errorf("control run read %d bytes, want >= %d", read, size)
	}
}

// TestHoleAtEOFShortRead checks that a file ending inside an extent gives a
// short-read error at its size, also when its tail is a hole.
func TestHoleAtEOFShortRead(t *testing.T) {
	f := sparseFile(t, 3<<20, [2]int64{0, 4096})
	err := Run(context.Background(), discardWriter{}, f, []Extent{{Length: 4 << 20}}, xorSectors, Options{})
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.Is(err, io.ErrUnexpectedEOF) || ioe.Offset != 3<<20 {
		t.Fatalf("err = %v, want short read at %d", err, 3<<20)
	}
}

// dataRanges lists the data segments of f with SEEK_DATA/SEEK_HOLE.
func dataRanges(t *testing.T, f *os.File) [][2]int64 {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	var r [][2]int64
	fd := int(f.Fd())
	for off := int64(0); off < fi.Size(); {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatal(err)
		}
		r = append(r, [2]int64{d, h})
		off = h
	}
	return r
}

// TestSparseOutput copies a file with data, written zeros, a hole and a
// mostly zero chunk with the identity transform, and checks that with Sparse
// only the non-zero blocks are written, and that without it everything is.
func TestSparseOutput(t *testing.T) {
	const (
		chunk = 256 << 10
		size  = 8 * chunk
	)
	src := sparseFile(t, size, [2]int64{0, chunk}, [2]int64{5*chunk + 8192, 5*chunk + 8192 + 4096})
	// Chunk 1 is written zeros, not a hole.
	if _, err := src.WriteAt(make([]byte, chunk), chunk); err != nil {
		t.Fatal(err)
	}
	requireHoles(t, src)
	identity := func(d, s []byte, first uint64) error { return nil }

	for _, sparse := range []bool{true, false} {
		t.Run("sparse="+strconv.FormatBool(sparse), func(t *testing.T) {
			// Output at a 1 MiB offset, as behind a LUKS header.
			const base = 1 << 20
			dst, err := os.Create(filepath.Join(t.TempDir(), "dst"))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if err := dst.Truncate(base + size); err != nil {
				t.Fatal(err)
			}
			var last int64
			o := Options{Jobs: 2, ChunkSize: chunk, Sparse: sparse, Progress: func(n int64) { last = n }}
			if err := Run(context.Background(), dst, src, []Extent{{DstOffset: base, Length: size}}, identity, o); err != nil {
				t.Fatal(err)
			}
			if last != size {
				t.Errorf("final progress %d, want %d (skipped chunks count as done)", last, size)
			}
			got := make([]byte, size)
			want := make([]byte, size)
			if _, err := dst.ReadAt(got, base); err != nil {
				t.Fatal(err)
			}
			if _, err := src.ReadAt(want, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("output differs from input")
			}
			ranges := dataRanges(t, dst)
			wantRanges := [][2]int64{{base, base + chunk}, {base + 5*chunk + 8192, base + 5*chunk + 8192 + 4096}}
			if !sparse {
				wantRanges = [][2]int64{{base, base + size}}
			}
			if !equalRanges(ranges, wantRanges) {
				t.Errorf("output data ranges %v, want %v", ranges, wantRanges)
			}
			fi, _ := dst.Stat()
			blocks := fi.Sys().(*syscall.Stat_t).Blocks * 512
			if sparse && blocks > chunk+4096+16<<10 {
				t.Errorf("sparse output uses %d bytes of blocks, want about %d", blocks, chunk+4096)
			}
		})
	}
}

func equalRanges(a, b [][2]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRealENOSPC writes to a file on a 2 MiB tmpfs, which needs root.
func TestRealENOSPC(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mount tmpfs: %v (CI requires this test)", err)
		}
		t.Skipf("cannot mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	dst, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	extents := []Extent{{SrcOffset: 0, DstOffset: 0, Length: 4 << 20}}
	err = Run(context.Background(), dst, &genReader{size: 4 << 20}, extents, xorSectors, Options{Jobs: 2, ChunkSize: 256 << 10})
	var ioe *IOError
	if !errors.As(err, &ioe) || !errors.Is(err, syscall.ENOSPC) || ioe.Op != "write output" {
		t.Fatalf("err = %v, want write output IOError wrapping ENOSPC", err)
	}
	if ioe.Offset <= 0 || ioe.Offset > 2<<20 {
		t.Errorf("ENOSPC at offset %d, want within the 2 MiB file system", ioe.Offset)
	}
	if want := fmt.Sprintf("write output at offset %d: no space left on device", ioe.Offset); err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// TestNoAllocsPerChunkFile is TestNoAllocsPerChunk with an *os.File source
// that has holes, so that the hole finder and pread run on every chunk.
func TestNoAllocsPerChunkFile(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters distort allocation counts")
	}
	const chunk = 4096
	f := sparseFile(t, 1024*chunk, [2]int64{0, 8 * chunk}, [2]int64{100 * chunk, 300 * chunk}, [2]int64{600*chunk + 512, 601 * chunk})
	allocs := func(chunks int) float64 {
		extents := []Extent{{Length: int64(chunks) * chunk}}
		return testing.AllocsPerRun(10, func() {
			if err := Run(context.Background(), discardWriter{}, f, extents, stampSectors, Options{Jobs: 2, ChunkSize: chunk}); err != nil {
				t.Fatal(err)
			}
		})
	}
	small, large := allocs(16), allocs(1024)
	t.Logf("allocations per run: %v for 16 chunks, %v for 1024 chunks", small, large)
	if perChunk := (large - small) / (1024 - 16); perChunk > 0.01 {
		t.Errorf("%.3f allocations per chunk, want 0", perChunk)
	}
}

func TestDataSpans(t *testing.T) {
	const M = 1 << 20
	f := sparseFile(t, 8*M, [2]int64{0, 64 << 10}, [2]int64{2 * M, 2*M + 4096}, [2]int64{5 * M, 6 * M})
	requireHoles(t, f)
	got := DataSpans(f, 8*M)
	want := []Span{{0, 64 << 10}, {2 * M, 4096}, {5 * M, M}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("DataSpans = %v, want %v", got, want)
	}
	// A limit inside the last data segment cuts it.
	if got := DataSpans(f, 5*M+512); fmt.Sprint(got) != fmt.Sprint([]Span{{0, 64 << 10}, {2 * M, 4096}, {5 * M, 512}}) {
		t.Fatalf("DataSpans to 5M+512 = %v", got)
	}
}
