package verity

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
