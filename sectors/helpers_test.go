package sectors

import (
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// genByte is the content of genReader at off: a mix of the offset, so that a
// byte put at the wrong place or sector is detected.
func genByte(off int64) byte {
	x := uint64(off) * 0x9E3779B97F4A7C15
	return byte(x>>56) ^ byte(x>>24)
}

// genReader is a ReaderAt of size bytes with content genByte. It records
// concurrent calls and read offsets.
type genReader struct {
	size     int64
	delay    time.Duration // sleep per call
	inFlight atomic.Int32
	overlap  atomic.Bool // set if two ReadAt calls ever ran at once
	bytes    atomic.Int64
}

func (g *genReader) ReadAt(p []byte, off int64) (int, error) {
	if g.inFlight.Add(1) > 1 {
		g.overlap.Store(true)
	}
	defer g.inFlight.Add(-1)
	if g.delay > 0 {
		time.Sleep(g.delay)
	}
	if off >= g.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), g.size-off))
	for i := range n {
		p[i] = genByte(off + int64(i))
	}
	g.bytes.Add(int64(n))
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// zeroReader is an endless ReaderAt of zeros.
type zeroReader struct{}

func (zeroReader) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	return len(p), nil
}

// memWriter is a WriterAt over a byte slice that records the offsets of its
// calls and whether two calls ever overlapped in time.
type memWriter struct {
	buf      []byte
	delay    time.Duration
	inFlight atomic.Int32
	overlap  atomic.Bool
	mu       sync.Mutex
	offsets  []int64
	synced   int
}

func (w *memWriter) WriteAt(p []byte, off int64) (int, error) {
	if w.inFlight.Add(1) > 1 {
		w.overlap.Store(true)
	}
	defer w.inFlight.Add(-1)
	if w.delay > 0 {
		time.Sleep(w.delay)
	}
	if off+int64(len(p)) > int64(len(w.buf)) {
		return 0, fmt.Errorf("memWriter: write [%d, %d) beyond %d", off, off+int64(len(p)), len(w.buf))
	}
	copy(w.buf[off:], p)
	w.mu.Lock()
	w.offsets = append(w.offsets, off)
	w.mu.Unlock()
	return len(p), nil
}

func (w *memWriter) Sync() error {
	w.synced++
	return nil
}

// discardWriter accepts and drops everything.
type discardWriter struct{}

func (discardWriter) WriteAt(p []byte, off int64) (int, error) { return len(p), nil }

// xorKey is the byte the test transform XORs into byte j of the 512-byte
// unit with sector number s.
func xorKey(s uint64, j int) byte {
	return byte(s) ^ byte(s>>8)*3 ^ byte(s>>40)*5 ^ byte(j*7+1)
}

// xorSectors applies xorKey to src into dst; it is its own inverse.
func xorSectors(dst, src []byte, firstSector uint64) error {
	for i := range src {
		dst[i] = src[i] ^ xorKey(firstSector+uint64(i/UnitSize), i%UnitSize)
	}
	return nil
}

// stampSectors XORs the little-endian sector number of each 512-byte unit
// into its first 8 bytes: a cheap sector-dependent transform for large runs.
func stampSectors(dst, src []byte, firstSector uint64) error {
	var key [8]byte
	for i := 0; i < len(src); i += UnitSize {
		binary.LittleEndian.PutUint64(key[:], firstSector+uint64(i/UnitSize))
		copy(dst[i:i+UnitSize], src[i:i+UnitSize])
		subtle.XORBytes(dst[i:i+8], src[i:i+8], key[:])
	}
	return nil
}

// waitGoroutines fails t unless the goroutine count drops back to at most
// want within a second.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines still running, want <= %d:\n%s", n, want, buf)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
