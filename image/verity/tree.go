package verity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/cryptimg/cryptimg/sectors"
)

// Options tunes Format and Verify. The zero value is usable.
type Options struct {
	// Jobs is the number of hashing workers; 0 means runtime.GOMAXPROCS(0).
	Jobs int
	// Progress, if not nil, is called with the data bytes hashed so far
	// as chunks finish, one call at a time (a tree of one data block has
	// no chunks).
	Progress func(done int64)
}

// HashFile is where the tree is written: an *os.File, usually.
type HashFile interface {
	io.ReaderAt
	io.WriterAt
}

// SetDataSize sets p.DataBlocks, when it is 0, to the whole blocks of data
// of size bytes (a partial last block is left out, as veritysetup does),
// and checks that data of size bytes holds p.DataBlocks blocks.
func (p *Params) SetDataSize(size int64) error {
	if p.DataBlockSize <= 0 {
		return fmt.Errorf("%w: data block size %d", ErrInvalid, p.DataBlockSize)
	}
	if p.DataBlocks == 0 {
		if size < int64(p.DataBlockSize) {
			return fmt.Errorf("%w: the data (%d bytes) is smaller than one data block (%d bytes)", ErrInvalid, size, p.DataBlockSize)
		}
		p.DataBlocks = uint64(size) / uint64(p.DataBlockSize)
		return nil
	}
	if p.DataBlocks > uint64(size)/uint64(p.DataBlockSize) {
		return fmt.Errorf("%w: %d data blocks of %d bytes do not fit in the data (%d bytes)", ErrInvalid, p.DataBlocks, p.DataBlockSize, size)
	}
	return nil
}

// CorruptError names the first block that fails verification: the one
// nearest the root, then the lowest-numbered. It matches ErrCorrupt.
type CorruptError struct {
	// Level is the tree level of a hash block (0: the level that holds
	// the data blocks' digests), or -1 for a data block.
	Level int
	// Block is the block's number in the data or in its level.
	Block uint64
	// Offset is the block's byte offset in the data or the hash file.
	Offset int64
	// Root: the block does not match the root hash (the top block, or the
	// only data block of a tree without levels).
	Root bool
	// Spare: a hash block has non-zero bytes outside its digests.
	Spare bool
}

func (e *CorruptError) Error() string {
	what := fmt.Sprintf("data block %d (byte %d of the data)", e.Block, e.Offset)
	if e.Level >= 0 {
		what = fmt.Sprintf("hash block %d of level %d (byte %d of the hash device)", e.Block, e.Level, e.Offset)
	}
	switch {
	case e.Spare:
		return what + " has non-zero bytes outside its digests"
	case e.Root:
		return what + " does not match the root hash"
	}
	return what + " does not match its hash"
}

func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Format computes the hash tree of p.DataBlocks blocks of data, writes it
// into hash with the superblock (unless p.NoSuperblock), and returns the
// root hash. Bytes of hash outside the superblock and the tree are left as
// they are; an *os.File shorter than the tree is extended to its end. hash
// may be data itself, when the data ends before p.HashOffset.
func Format(ctx context.Context, data io.ReaderAt, hash HashFile, p Params, o Options) ([]byte, error) {
	g, err := p.Geometry()
	if err != nil {
		return nil, err
	}
	if err := checkOverlap(data, hash, &p); err != nil {
		return nil, err
	}
	var sb []byte
	if !p.NoSuperblock {
		if sb, err = p.MarshalSuperblock(); err != nil {
			return nil, err
		}
	}
	hbs := int64(p.HashBlockSize)
	var root []byte
	if len(g.Levels) == 0 {
		root, err = hashOne(data, 0, p.DataBlockSize, &p)
		if err != nil {
			return nil, err
		}
	} else {
		// Level 0 from the data, then each level from the one below it,
		// read back from hash.
		if err := hashLevel(ctx, data, 0, p.DataBlockSize, p.DataBlocks, hash, int64(g.Levels[0].Start)*hbs, &p, &g, o); err != nil {
			return nil, err
		}
	}
	return finish(ctx, hash, &p, &g, root, sb, o)
}

// finish builds levels 1 and up of the tree whose level 0 is in hash
// (root: the hash of the only data block of a tree without levels), then
// writes the superblock sb (nil: none), extends an *os.File to the tree's
// end and returns the root hash.
func finish(ctx context.Context, hash HashFile, p *Params, g *Geometry, root, sb []byte, o Options) ([]byte, error) {
	hbs := int64(p.HashBlockSize)
	if len(g.Levels) > 0 {
		for i := 1; i < len(g.Levels); i++ {
			below := g.Levels[i-1]
			if err := hashLevel(ctx, hash, int64(below.Start)*hbs, p.HashBlockSize, below.Count, hash, int64(g.Levels[i].Start)*hbs, p, g, Options{Jobs: o.Jobs}); err != nil {
				return nil, err
			}
		}
		top := g.Levels[len(g.Levels)-1]
		var err error
		root, err = hashOne(hash, int64(top.Start)*hbs, p.HashBlockSize, p)
		if err != nil {
			return nil, err
		}
	}
	if sb != nil {
		if _, err := hash.WriteAt(sb, p.HashOffset); err != nil {
			return nil, fmt.Errorf("failed to write the superblock: %w", err)
		}
	}
	if err := extend(hash, g.End(p.HashBlockSize)); err != nil {
		return nil, err
	}
	return root, nil
}

// extend makes hash, where it is a regular *os.File shorter than end,
// end bytes long.
func extend(hash HashFile, end int64) error {
	if f, ok := hash.(*os.File); ok {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if st.Mode().IsRegular() && st.Size() < end {
			return f.Truncate(end)
		}
	}
	return nil
}

// checkOverlap refuses a tree that would overwrite its own data when both
// are in one file (lib/setup.c, "Data area overlaps with hash area").
func checkOverlap(data io.ReaderAt, hash HashFile, p *Params) error {
	if any(data) != any(hash) {
		return nil
	}
	if end := int64(p.DataBlocks) * int64(p.DataBlockSize); end > p.HashOffset {
		return fmt.Errorf("%w: the data (%d bytes) overlaps the hash area at byte %d of the same file", ErrInvalid, end, p.HashOffset)
	}
	return nil
}

// hashOne returns H of the block of size bytes at off.
func hashOne(r io.ReaderAt, off int64, size int, p *Params) ([]byte, error) {
	b := make([]byte, size)
	if _, err := r.ReadAt(b, off); err != nil {
		return nil, readErr(err, off)
	}
	hf, _ := newHashFunc(p.Hash)
	sum := make([]byte, hf.size)
	newHasher(p).digests(sum, hf.size, b, size)
	return sum, nil
}

func readErr(err error, off int64) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return &sectors.IOError{Op: "read input", Offset: off, Err: err}
}

// worker is one goroutine's hasher and hash blocks, from a pool: a
// sectors.Transform has no worker of its own.
type worker struct {
	hs        *hasher
	out, want []byte
}

func newPool(p *Params) *sync.Pool {
	return &sync.Pool{New: func() any { return &worker{hs: newHasher(p)} }}
}

func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// chunkSize is about 1 MiB of whole runs of g.PerBlock blocks of bs bytes,
// the input of whole hash blocks, so that no two chunks share one.
func chunkSize(g *Geometry, bs int) int {
	run := g.PerBlock * bs
	return max(1, (1<<20)/run) * run
}

// hashLevel hashes count blocks of bs bytes at srcOff of src into the hash
// blocks at dstOff of dst, in parallel (runChunks over the input, each
// chunk whole hash blocks, written by the worker that made them).
func hashLevel(ctx context.Context, src io.ReaderAt, srcOff int64, bs int, count uint64, dst io.WriterAt, dstOff int64, p *Params, g *Geometry, o Options) error {
	pool := newPool(p)
	hbs := p.HashBlockSize
	per := uint64(g.PerBlock)
	t := func(_, in []byte, first uint64) error {
		w := pool.Get().(*worker)
		defer pool.Put(w)
		idx := first * sectors.UnitSize / uint64(bs)
		n := uint64(len(in) / bs)
		w.out = grow(w.out, int((n+per-1)/per)*hbs)
		clear(w.out)
		digestBlocks(w.hs, w.out, in, bs, hbs, g)
		off := dstOff + int64(idx/per)*int64(hbs)
		if _, err := dst.WriteAt(w.out, off); err != nil {
			return &sectors.IOError{Op: "write output", Offset: off, Err: err}
		}
		return nil
	}
	return runChunks(ctx, src, srcOff, bs, count, g, o, t)
}

// runChunks runs t over count blocks of bs bytes at srcOff of src, in
// chunks of whole hash blocks' worth: over a mapping of the data file
// where there is one (runMapped; only the data starts at offset 0, the
// levels of the tree come after their superblock or the level above),
// else through sectors.Run.
func runChunks(ctx context.Context, src io.ReaderAt, srcOff int64, bs int, count uint64, g *Geometry, o Options, t sectors.Transform) error {
	size := int64(count) * int64(bs)
	if srcOff == 0 {
		if m, unmap, ok := mapData(src, size); ok {
			defer unmap()
			return runMapped(ctx, m, chunkSize(g, bs), o.Jobs, t, o.Progress)
		}
	}
	ext := []sectors.Extent{{SrcOffset: srcOff, Length: size}}
	so := sectors.Options{Jobs: o.Jobs, ChunkSize: chunkSize(g, bs), SectorSize: bs, Unordered: true, Progress: o.Progress}
	return sectors.Run(ctx, discard{}, src, ext, t, so)
}

// digestBlocks fills hash blocks of hbs bytes at out with the digests of
// the blocks of bs bytes in in, g.PerBlock to a hash block (with hash type
// 0 they do not fill it).
func digestBlocks(hs *hasher, out, in []byte, bs, hbs int, g *Geometry) {
	run := g.PerBlock * bs
	for h := 0; h*run < len(in); h++ {
		hs.digests(out[h*hbs:], g.Slot, in[h*run:min((h+1)*run, len(in))], bs)
	}
}

// discard is a WriterAt that drops everything: the chunks themselves are
// not written anywhere, only their hashes.
type discard struct{}

func (discard) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// Verify recomputes the tree of data described by p and compares it with
// hash and root, from the root down: the top hash block against root,
// each level's blocks against their digests in the level above, then
// every data block against level 0, in parallel. The first bad block
// (nearest the root, then lowest) is returned as a *CorruptError. Hash
// blocks must hold zeros outside their digests, as veritysetup verify
// requires.
func Verify(ctx context.Context, data, hash io.ReaderAt, p Params, root []byte, o Options) error {
	g, err := p.Geometry()
	if err != nil {
		return err
	}
	if len(root) != g.DigestSize {
		return fmt.Errorf("%w: a %s root hash has %d bytes, not %d", ErrInvalid, p.Hash, g.DigestSize, len(root))
	}
	hbs := int64(p.HashBlockSize)
	dbs := int64(p.DataBlockSize)
	if err := checkSize(data, true, int64(p.DataBlocks)*dbs); err != nil {
		return err
	}
	if err := checkSize(hash, false, g.End(p.HashBlockSize)); err != nil {
		return err
	}
	L := len(g.Levels)
	if L == 0 {
		sum, err := hashOne(data, 0, p.DataBlockSize, &p)
		if err != nil {
			return err
		}
		if !bytes.Equal(sum, root) {
			return &CorruptError{Level: -1, Block: 0, Offset: 0, Root: true}
		}
		return nil
	}
	top := g.Levels[L-1]
	sum, err := hashOne(hash, int64(top.Start)*hbs, p.HashBlockSize, &p)
	if err != nil {
		return err
	}
	if !bytes.Equal(sum, root) {
		return &CorruptError{Level: L - 1, Block: 0, Offset: int64(top.Start) * hbs, Root: true}
	}
	hs := newHasher(&p)
	per := uint64(g.PerBlock)
	parent := make([]byte, hbs)
	children := make([]byte, per*uint64(hbs))
	got := make([]byte, hbs)
	for i := L - 1; i >= 1; i-- {
		lv, below := g.Levels[i], g.Levels[i-1]
		for k := range lv.Count {
			off := int64(lv.Start+k) * hbs
			if _, err := hash.ReadAt(parent, off); err != nil {
				return readErr(err, off)
			}
			c0 := k * per
			nc := min(per, below.Count-c0)
			if !spareZero(parent, &g, int(nc)) {
				return &CorruptError{Level: i, Block: k, Offset: off, Spare: true}
			}
			coff := int64(below.Start+c0) * hbs
			cb := children[:int64(nc)*hbs]
			if _, err := hash.ReadAt(cb, coff); err != nil {
				return readErr(err, coff)
			}
			hs.digests(got, g.Slot, cb, p.HashBlockSize)
			if j := firstMismatch(got, parent, &g, int(nc)); j >= 0 {
				b := c0 + uint64(j)
				return &CorruptError{Level: i - 1, Block: b, Offset: int64(below.Start+b) * hbs}
			}
		}
	}
	// Level 0's spare bytes and the data blocks, in parallel.
	pool := newPool(&p)
	leaf := g.Levels[0]
	t := func(_, in []byte, first uint64) error {
		w := pool.Get().(*worker)
		defer pool.Put(w)
		idx := first * sectors.UnitSize / uint64(dbs)
		n := uint64(len(in)) / uint64(dbs)
		nh := (n + per - 1) / per
		w.want = grow(w.want, int(nh)*int(hbs))
		off := int64(leaf.Start+idx/per) * hbs
		if _, err := hash.ReadAt(w.want, off); err != nil {
			return readErr(err, off)
		}
		w.out = grow(w.out, int(nh)*int(hbs))
		digestBlocks(w.hs, w.out, in, int(dbs), int(hbs), &g)
		for h := range nh {
			blk := w.want[h*uint64(hbs) : (h+1)*uint64(hbs)]
			nc := int(min(per, n-h*per))
			if !spareZero(blk, &g, nc) {
				b := idx/per + h
				return &CorruptError{Level: 0, Block: b, Offset: int64(leaf.Start+b) * hbs, Spare: true}
			}
			if j := firstMismatch(w.out[h*uint64(hbs):], blk, &g, nc); j >= 0 {
				b := idx + h*per + uint64(j)
				return &CorruptError{Level: -1, Block: b, Offset: int64(b) * dbs}
			}
		}
		return nil
	}
	if err := runChunks(ctx, data, 0, int(dbs), p.DataBlocks, &g, o, t); err != nil {
		// The block names itself; the chunk's IV sector would only confuse.
		var ce *CorruptError
		if errors.As(err, &ce) {
			return ce
		}
		return err
	}
	return nil
}

// SizeError is a data or hash device shorter than the tree needs. It
// matches ErrTruncated.
type SizeError struct {
	Data       bool // the data; else the hash device
	Size, Need int64
}

func (e *SizeError) Error() string {
	what := "hash device"
	if e.Data {
		what = "data"
	}
	return fmt.Sprintf("%v: the %s has %d bytes, the tree needs %d", ErrTruncated, what, e.Size, e.Need)
}

func (e *SizeError) Unwrap() error { return ErrTruncated }

// checkSize returns a *SizeError if r, when it can tell its size (an
// *os.File, a *bytes.Reader), is shorter than need bytes.
func checkSize(r io.ReaderAt, data bool, need int64) error {
	var size int64
	switch r := r.(type) {
	case interface{ Stat() (os.FileInfo, error) }:
		st, err := r.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return err
		}
		size = st.Size()
	case interface{ Size() int64 }:
		size = r.Size()
	default:
		return nil
	}
	if size < need {
		return &SizeError{Data: data, Size: size, Need: need}
	}
	return nil
}

// firstMismatch returns the first of the n digests in got that differs
// from want's, or -1.
func firstMismatch(got, want []byte, g *Geometry, n int) int {
	for j := range n {
		o := j * g.Slot
		if !bytes.Equal(got[o:o+g.DigestSize], want[o:o+g.DigestSize]) {
			return j
		}
	}
	return -1
}

// spareZero reports whether a hash block holding n digests is zero
// everywhere else: each digest's padding to its slot, and the tail.
func spareZero(b []byte, g *Geometry, n int) bool {
	for j := range n {
		for _, c := range b[j*g.Slot+g.DigestSize : (j+1)*g.Slot] {
			if c != 0 {
				return false
			}
		}
	}
	for _, c := range b[n*g.Slot:] {
		if c != 0 {
			return false
		}
	}
	return true
}
