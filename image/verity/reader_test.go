package verity

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
)

// memHash is a HashFile in memory.
type memHash struct{ b []byte }

func (m *memHash) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memHash) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

// readerFixture is data of n blocks of bs bytes and its tree (3 levels for
// bs 512 and n 300: 16 digests to a hash block).
func readerFixture(t *testing.T, bs int, n uint64) (data []byte, hash *memHash, p Params, root []byte) {
	t.Helper()
	data = make([]byte, int(n)*bs+100) // a partial tail block, not covered
	fill(data, n)
	p = Params{HashType: 1, Hash: "sha256", DataBlockSize: bs, HashBlockSize: bs, DataBlocks: n, Salt: []byte("salt")}
	hash = &memHash{}
	root, err := Format(context.Background(), bytes.NewReader(data), hash, p, Options{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return data, hash, p, root
}

func mustReader(t *testing.T, data []byte, hash *memHash, p Params, root []byte) *Reader {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data), bytes.NewReader(hash.b), p, root)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReaderUnaligned reads the covered data at offsets and lengths that
// cut blocks anywhere, and past its end, from trees of 0, 1 and 3 levels.
func TestReaderUnaligned(t *testing.T) {
	for _, c := range []struct {
		bs int
		n  uint64
	}{{512, 300}, {4096, 1}, {4096, 5}} {
		data, hash, p, root := readerFixture(t, c.bs, c.n)
		r := mustReader(t, data, hash, p, root)
		size := int64(c.n) * int64(c.bs)
		if r.Size() != size {
			t.Fatalf("Size %d, want %d", r.Size(), size)
		}
		rng := rand.New(rand.NewPCG(c.n, 7))
		for range 200 {
			off := rng.Int64N(size)
			b := make([]byte, 1+rng.IntN(3*c.bs))
			n, err := r.ReadAt(b, off)
			want := min(int64(len(b)), size-off)
			if int64(n) != want || !bytes.Equal(b[:n], data[off:off+int64(n)]) {
				t.Fatalf("bs %d n %d: ReadAt(%d, %d) = %d bytes (want %d) or wrong bytes, %v", c.bs, c.n, len(b), off, n, want, err)
			}
			if (int64(n) < int64(len(b))) != (err == io.EOF) || err != nil && err != io.EOF {
				t.Fatalf("ReadAt(%d, %d): %v after %d bytes", len(b), off, err, n)
			}
		}
		if n, err := r.ReadAt(make([]byte, 10), size); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at the end: %d, %v", n, err)
		}
	}
}

// TestReaderConcurrent reads from many goroutines at once (the race
// detector watches the cache) and every read matches.
func TestReaderConcurrent(t *testing.T) {
	data, hash, p, root := readerFixture(t, 512, 300)
	r := mustReader(t, data, hash, p, root)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			b := make([]byte, 2000)
			for range 100 {
				off := rng.Int64N(r.Size() - int64(len(b)))
				if _, err := r.ReadAt(b, off); err != nil || !bytes.Equal(b, data[off:off+int64(len(b))]) {
					errs <- errors.New("a concurrent read failed or returned wrong bytes")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, level int, block uint64, root bool) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Level != level || ce.Block != block || ce.Root != root {
		t.Fatalf("got %v, want a corrupt block %d of level %d (root %v)", err, block, level, root)
	}
}

// TestReaderBadDataBlock: a flipped byte of data block 37 fails the reads
// that touch it, naming it, after the good bytes before it; other blocks
// still read.
func TestReaderBadDataBlock(t *testing.T) {
	data, hash, p, root := readerFixture(t, 512, 300)
	data[37*512+100] ^= 1
	r := mustReader(t, data, hash, p, root)
	b := make([]byte, 1024)
	n, err := r.ReadAt(b, 36*512+10)
	wantCorrupt(t, err, -1, 37, false)
	if n != 502 || !bytes.Equal(b[:n], data[36*512+10:37*512]) {
		t.Fatalf("read %d bytes before the bad block, want 502", n)
	}
	if _, err := r.ReadAt(b[:1], 37*512+511); err == nil {
		t.Fatal("a one-byte read of the bad block passed")
	}
	for _, off := range []int64{0, 38 * 512, 299 * 512} {
		if _, err := r.ReadAt(b[:512], off); err != nil {
			t.Fatalf("block at %d: %v", off, err)
		}
	}
}

// TestReaderBadHashBlock: a flipped byte in a level-0 hash block fails
// the reads of the 16 data blocks it covers, naming the hash block, and
// no others; in the top block, every read fails against the root hash.
func TestReaderBadHashBlock(t *testing.T) {
	data, hash, p, root := readerFixture(t, 512, 300)
	g, _ := p.Geometry()
	if len(g.Levels) != 3 {
		t.Fatalf("%d levels, want 3", len(g.Levels))
	}
	leaf2 := int64(g.Levels[0].Start+2) * 512
	hash.b[leaf2+33] ^= 0x80
	r := mustReader(t, data, hash, p, root)
	b := make([]byte, 512)
	for k := int64(32); k < 48; k++ {
		_, err := r.ReadAt(b, k*512)
		wantCorrupt(t, err, 0, 2, false)
	}
	for _, k := range []int64{0, 31, 48, 299} {
		if _, err := r.ReadAt(b, k*512); err != nil {
			t.Fatalf("block %d: %v", k, err)
		}
	}
	hash.b[leaf2+33] ^= 0x80
	hash.b[int64(g.Levels[2].Start)*512+5] ^= 1
	r = mustReader(t, data, hash, p, root)
	_, err := r.ReadAt(b, 0)
	wantCorrupt(t, err, 2, 0, true)
}

// TestReaderWrongRoot: with another root hash no block reads, with or
// without levels; a root of the wrong size is refused up front.
func TestReaderWrongRoot(t *testing.T) {
	for _, n := range []uint64{300, 1} {
		data, hash, p, root := readerFixture(t, 512, n)
		root[0] ^= 1
		r := mustReader(t, data, hash, p, root)
		_, err := r.ReadAt(make([]byte, 10), 0)
		level := 2
		if n == 1 {
			level = -1
		}
		wantCorrupt(t, err, level, 0, true)
		if _, err := NewReader(bytes.NewReader(data), bytes.NewReader(hash.b), p, root[:20]); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a 20-byte root: %v", err)
		}
	}
	// A hash device shorter than the tree is refused.
	data, hash, p, root := readerFixture(t, 512, 300)
	if _, err := NewReader(bytes.NewReader(data), bytes.NewReader(hash.b[:len(hash.b)-512]), p, root); !errors.Is(err, ErrTruncated) {
		t.Fatalf("a short hash device: %v", err)
	}
}
