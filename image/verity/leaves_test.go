package verity

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestBuilderModel feeds every case's data blocks to a Builder in uneven
// pieces, from several goroutines in reverse order, and compares the hash
// file and root hash with the model's (as Format's are).
func TestBuilderModel(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range treeCases() {
		if tc.p.NoSuperblock || tc.p.HashOffset != 0 {
			continue // the model's layouts with an offset are Format's test
		}
		data := make([]byte, tc.size)
		fill(data, uint64(tc.size))
		p := tc.p
		p.Salt = append([]byte{}, p.Salt...)
		if err := p.SetDataSize(int64(len(data))); err != nil {
			t.Fatal(err)
		}
		wantRoot, want := model(data, p, nil)
		hf, err := os.Create(filepath.Join(dir, "hash"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBuilder(hf, p)
		if err != nil {
			t.Fatal(err)
		}
		dbs := uint64(p.DataBlockSize)
		var wg sync.WaitGroup
		errs := make(chan error, p.DataBlocks)
		// Pieces of 1, 2, 3, … blocks, not aligned to hash blocks.
		for first, n := uint64(0), uint64(1); first < p.DataBlocks; first, n = first+n, n+1 {
			n = min(n, p.DataBlocks-first)
			wg.Add(1)
			go func(first, n uint64) {
				defer wg.Done()
				errs <- b.Blocks(first, data[first*dbs:(first+n)*dbs])
			}(first, n)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		root, err := b.Finish(context.Background(), Options{Jobs: 2})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, _ := os.ReadFile(hf.Name())
		hf.Close()
		if !bytes.Equal(root, wantRoot) {
			t.Errorf("%s: root %x, want %x", tc.name, root, wantRoot)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: hash file differs from the model (%d and %d bytes)", tc.name, len(got), len(want))
		}
	}
	// Blocks past the tree's end are refused.
	p := treeCases()[1].p
	p.DataBlocks = 2
	hf, _ := os.Create(filepath.Join(dir, "hash2"))
	defer hf.Close()
	b, err := NewBuilder(hf, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Blocks(1, make([]byte, 8192)); err == nil {
		t.Error("Blocks past the last data block: no error")
	}
}
