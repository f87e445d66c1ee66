package sectors

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// numbered XORs every 512-byte unit with its IV sector number, so output
// that went through the wrong sector number or order differs.
func numbered(dst, src []byte, first uint64) error {
	for off := 0; off < len(src); off += UnitSize {
		n := first + uint64(off/UnitSize)
		for i := 0; i < UnitSize; i += 8 {
			v := binary.LittleEndian.Uint64(src[off+i:]) ^ (n*0x9e3779b97f4a7c15 + uint64(i))
			binary.LittleEndian.PutUint64(dst[off+i:], v)
		}
	}
	return nil
}

// TestStreamMatchesRun: a stream of any length and read pattern comes out
// as Run makes it from the same bytes, for several jobs, chunk and sector
// sizes.
func TestStreamMatchesRun(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ size, chunk, sector, jobs int }{
		{0, 0, 0, 0}, {512, 4096, 512, 1}, {3 << 20, 0, 0, 0}, {5<<20 + 512*3, 64 << 10, 512, 3}, {8 << 20, 1 << 20, 4096, 2},
	} {
		in := make([]byte, c.size)
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		want := make([]byte, len(in))
		o := Options{Jobs: c.jobs, ChunkSize: c.chunk, SectorSize: c.sector}
		if err := Run(context.Background(), bytesWriterAt{want}, bytes.NewReader(in), []Extent{{Length: int64(len(in)), Sector: 77}}, numbered, o); err != nil {
			t.Fatal(err)
		}
		for _, src := range []io.Reader{bytes.NewReader(in), iotest.OneByteReader(bytes.NewReader(in)), iotest.HalfReader(bytes.NewReader(in))} {
			var out bytes.Buffer
			var last int64
			o.Progress = func(d int64) { last = d }
			n, err := Stream(context.Background(), &out, src, 77, numbered, o)
			if err != nil || n != int64(len(in)) || !bytes.Equal(out.Bytes(), want) || (len(in) > 0 && last != n) {
				t.Fatalf("size %d: Stream wrote %d bytes (%v), equal %v, progress %d", c.size, n, err, bytes.Equal(out.Bytes(), want), last)
			}
		}
	}
}

type bytesWriterAt struct{ b []byte }

func (w bytesWriterAt) WriteAt(p []byte, off int64) (int, error) { return copy(w.b[off:], p), nil }

// TestStreamErrors: a stream ending inside a sector, a failing reader and
// a failing writer stop with errors that say so; a cancelled context
// stops it.
func TestStreamErrors(t *testing.T) {
	in := make([]byte, 3<<20+100)
	var out bytes.Buffer
	n, err := Stream(context.Background(), &out, bytes.NewReader(in), 0, numbered, Options{})
	if !errors.Is(err, ErrPartialSector) || n != 3<<20 || out.Len() != 3<<20 {
		t.Fatalf("partial sector: %d bytes, %v", n, err)
	}
	boom := errors.New("boom")
	_, err = Stream(context.Background(), io.Discard, iotest.ErrReader(boom), 0, numbered, Options{})
	var ioe *IOError
	if !errors.As(err, &ioe) || ioe.Op != "read input" || !errors.Is(err, boom) {
		t.Fatalf("failing reader: %v", err)
	}
	_, err = Stream(context.Background(), streamFail{boom}, bytes.NewReader(make([]byte, 4<<20)), 0, numbered, Options{})
	if !errors.As(err, &ioe) || ioe.Op != "write output" || !errors.Is(err, boom) {
		t.Fatalf("failing writer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Stream(ctx, io.Discard, bytes.NewReader(in), 0, numbered, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	_, err = Stream(context.Background(), io.Discard, bytes.NewReader(make([]byte, 1<<20)), 0,
		func(_, _ []byte, _ uint64) error { return boom }, Options{})
	if !errors.Is(err, boom) {
		t.Fatalf("failing transform: %v", err)
	}
}

type streamFail struct{ err error }

func (f streamFail) Write([]byte) (int, error) { return 0, f.err }
