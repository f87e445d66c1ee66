package verity

import (
	"context"
	"fmt"
	"sync"
)

// Builder makes a tree for a caller that reads the data itself, in
// parallel, such as an encryption pass: each worker hands the data blocks
// it holds to Blocks, which writes their digests into level 0 of the tree,
// and Finish then builds the levels above, as Format does. The hash file
// must read as zeros where the tree goes (a new file): Blocks writes the
// digests, not the spare bytes of their hash blocks.
type Builder struct {
	p    Params
	g    Geometry
	hash HashFile
	pool *sync.Pool
	mu   sync.Mutex
	one  []byte // the digest of the only data block of a tree without levels
}

// NewBuilder checks p (DataBlocks set) and returns a Builder writing into
// hash.
func NewBuilder(hash HashFile, p Params) (*Builder, error) {
	if p.DataBlocks == 0 {
		return nil, fmt.Errorf("%w: no data blocks", ErrInvalid)
	}
	g, err := p.Geometry()
	if err != nil {
		return nil, err
	}
	return &Builder{p: p, g: g, hash: hash, pool: newPool(&p)}, nil
}

// Params are the tree's parameters, hash name lower-cased.
func (b *Builder) Params() Params { return b.p }

// Geometry is where the tree's blocks are.
func (b *Builder) Geometry() Geometry { return b.g }

// Blocks hashes data, whole data blocks from data block first, into level
// 0. It is safe to call from several goroutines at once, for different
// blocks.
func (b *Builder) Blocks(first uint64, data []byte) error {
	dbs := b.p.DataBlockSize
	if len(data)%dbs != 0 {
		return fmt.Errorf("%w: %d bytes are not whole %d-byte data blocks", ErrInvalid, len(data), dbs)
	}
	n := uint64(len(data) / dbs)
	if first+n > b.p.DataBlocks || first+n < first {
		return fmt.Errorf("%w: data blocks %d to %d past the tree's %d", ErrInvalid, first, first+n, b.p.DataBlocks)
	}
	w := b.pool.Get().(*worker)
	defer b.pool.Put(w)
	slot, per, hbs := b.g.Slot, uint64(b.g.PerBlock), int64(b.p.HashBlockSize)
	if len(b.g.Levels) == 0 {
		w.out = grow(w.out, slot)
		clear(w.out)
		w.hs.digests(w.out, slot, data, dbs)
		b.mu.Lock()
		b.one = append([]byte(nil), w.out[:b.g.DigestSize]...)
		b.mu.Unlock()
		return nil
	}
	base := int64(b.g.Levels[0].Start) * hbs
	// One write per hash block the digests fall in: the digests of one
	// hash block are contiguous, those of two may not be (hash type 0).
	for k := uint64(0); k < n; {
		idx := first + k
		m := min(n-k, per-idx%per)
		w.out = grow(w.out, int(m)*slot)
		clear(w.out)
		w.hs.digests(w.out, slot, data[k*uint64(dbs):(k+m)*uint64(dbs)], dbs)
		off := base + int64(idx/per)*hbs + int64(idx%per)*int64(slot)
		if _, err := b.hash.WriteAt(w.out, off); err != nil {
			return fmt.Errorf("failed to write the hash tree: %w", err)
		}
		k += m
	}
	return nil
}

// Finish builds the levels above level 0 once every data block went
// through Blocks, writes the superblock (unless p.NoSuperblock), extends an
// *os.File to the tree's end and returns the root hash.
func (b *Builder) Finish(ctx context.Context, o Options) ([]byte, error) {
	var sb []byte
	if !b.p.NoSuperblock {
		var err error
		if sb, err = b.p.MarshalSuperblock(); err != nil {
			return nil, err
		}
	}
	var root []byte
	if len(b.g.Levels) == 0 {
		b.mu.Lock()
		root = b.one
		b.mu.Unlock()
		if root == nil {
			return nil, fmt.Errorf("%w: the data block was not hashed", ErrInvalid)
		}
	}
	// Level 0's last hash block may hold fewer digests than it has room
	// for: the levels above read it whole.
	if err := extend(b.hash, b.g.End(b.p.HashBlockSize)); err != nil {
		return nil, err
	}
	return finish(ctx, b.hash, &b.p, &b.g, root, sb, o)
}
