package verity

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cryptimg/cryptimg/sectors"
)

// TestMappedShrunkFile: a data file truncated while it is mapped makes the
// pass fail with a read error at the chunk that lost its pages, where a
// plain access would kill the process with SIGBUS.
func TestMappedShrunkFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, make([]byte, 4<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, unmap, ok := mapData(f, 4<<20)
	if !ok {
		t.Fatal("no mapping of a regular file")
	}
	defer unmap()
	if err := os.Truncate(path, 1<<20+12345); err != nil {
		t.Fatal(err)
	}
	var sum atomic.Uint32 // keeps the reads
	err = runMapped(context.Background(), m, 1<<20, 2, func(_, b []byte, _ uint64) error {
		var s uint32
		for _, c := range b {
			s += uint32(c)
		}
		sum.Add(s)
		return nil
	}, nil)
	var ioe *sectors.IOError
	if !errors.As(err, &ioe) || ioe.Offset != 1<<20 {
		t.Fatalf("got %v, want a read error at the second chunk", err)
	}
}

// TestMappedSection: a section of a file at an offset that is not a page
// multiple (a partition at a 512-byte sector) is mapped, and Format over it
// gives the tree of the same bytes read from memory.
func TestMappedSection(t *testing.T) {
	data := make([]byte, 300*4096)
	fill(data, 7)
	path := filepath.Join(t.TempDir(), "disk")
	const off = 3 * 512
	if err := os.WriteFile(path, append(append(make([]byte, off), data...), 1, 2, 3), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := io.NewSectionReader(f, off, int64(len(data)))
	m, unmap, ok := mapData(sec, int64(len(data)))
	if !ok {
		t.Fatal("no mapping of a file section")
	}
	if !bytes.Equal(m, data) {
		t.Error("the mapping is not the section's bytes")
	}
	unmap()
	p, _ := NewParams(int64(len(data)))
	h1, h2 := &memFile{}, &memFile{}
	r1, err := Format(context.Background(), sec, h1, p, Options{Jobs: 2})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Format(context.Background(), bytes.NewReader(data), h2, p, Options{Jobs: 2})
	if err != nil || !bytes.Equal(r1, r2) || !bytes.Equal(h1.b, h2.b) {
		t.Errorf("section %x, memory %x (%v)", r1, r2, err)
	}
}

// memFile is a hash file in memory.
// memFile is an in-memory file; the tree's workers write it at once, as
// they write a real one.
type memFile struct {
	mu sync.Mutex
	b  []byte
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}
