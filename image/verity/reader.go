package verity

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Reader reads the data a tree covers and checks every block it returns
// against the tree, as dm-verity does on each read (drivers/md/
// dm-verity-target.c, verity_verify_io): a data block against its digest
// in level 0, and each hash block on the way up against its digest in the
// level above, the top one against the root hash. Hash blocks that
// passed are kept (up to maxCached bytes of them), so a later read checks
// only its data blocks and the hash blocks not yet seen. Unlike
// veritysetup verify, and like the kernel, the spare bytes of a hash block
// are not checked apart: its digest covers them.
//
// The data ends after the tree's data blocks: ReadAt past them returns
// io.EOF, as the size of a dm-verity device is that of its data blocks.
// A block that does not match fails the read with a *CorruptError (which
// matches ErrCorrupt), after the bytes before that block. ReadAt is safe
// for concurrent use.
type Reader struct {
	data, hash io.ReaderAt
	p          Params
	g          Geometry
	root       []byte
	size       int64

	hashers sync.Pool

	mu     sync.RWMutex
	cache  map[uint64][]byte // hash file block -> its verified content
	cached int
}

// maxCached bounds the verified hash blocks a Reader keeps: the tree of
// 4 GiB of data in 4096-byte blocks, sha256. Past it the cache starts
// over.
const maxCached = 32 << 20

// NewReader returns a Reader of the data described by p, checked against
// the tree in hash and the root hash root. data and hash may be one
// source (a tree at p.HashOffset after the data). It checks that both are
// large enough, where they tell their size, and nothing else: each block
// is checked when read.
func NewReader(data, hash io.ReaderAt, p Params, root []byte) (*Reader, error) {
	g, err := p.Geometry()
	if err != nil {
		return nil, err
	}
	if len(root) != g.DigestSize {
		return nil, fmt.Errorf("%w: a %s root hash has %d bytes, not %d", ErrInvalid, p.Hash, g.DigestSize, len(root))
	}
	size := int64(p.DataBlocks) * int64(p.DataBlockSize)
	if err := checkSize(data, true, size); err != nil {
		return nil, err
	}
	if len(g.Levels) > 0 {
		if err := checkSize(hash, false, g.End(p.HashBlockSize)); err != nil {
			return nil, err
		}
	}
	r := &Reader{data: data, hash: hash, p: p, g: g, root: bytes.Clone(root), size: size, cache: map[uint64][]byte{}}
	r.hashers.New = func() any { return newHasher(&r.p) }
	return r, nil
}

// Size is the size of the data the tree covers: its data blocks.
func (r *Reader) Size() int64 { return r.size }

// ReadAt reads len(b) bytes at off, checking every data block it touches.
func (r *Reader) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("verity: negative offset %d", off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	end := min(off+int64(len(b)), r.size)
	dbs := int64(r.p.DataBlockSize)
	first, last := off/dbs, (end-1)/dbs
	buf := make([]byte, (last-first+1)*dbs)
	if err := readFull(r.data, buf, first*dbs); err != nil {
		return 0, err
	}
	sums := make([]byte, int(last-first+1)*r.g.DigestSize)
	hs := r.hashers.Get().(*hasher)
	hs.digests(sums, r.g.DigestSize, buf, int(dbs))
	r.hashers.Put(hs)
	n := 0
	for k := first; k <= last; k++ {
		i := k - first
		if err := r.checkData(uint64(k), sums[int(i)*r.g.DigestSize:int(i+1)*r.g.DigestSize]); err != nil {
			return n, err
		}
		// The part of block k inside [off, end).
		lo, hi := max(off, k*dbs), min(end, (k+1)*dbs)
		n += copy(b[lo-off:hi-off], buf[lo-first*dbs:hi-first*dbs])
	}
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// checkData compares the digest sum of data block k with the tree's.
func (r *Reader) checkData(k uint64, sum []byte) error {
	want := r.root
	if len(r.g.Levels) > 0 {
		per := uint64(r.g.PerBlock)
		leaf, err := r.hashBlock(0, k/per)
		if err != nil {
			return err
		}
		j := int(k % per)
		want = leaf[j*r.g.Slot : j*r.g.Slot+r.g.DigestSize]
	}
	if !bytes.Equal(sum, want) {
		return &CorruptError{Level: -1, Block: k, Offset: int64(k) * int64(r.p.DataBlockSize), Root: len(r.g.Levels) == 0}
	}
	return nil
}

// hashBlock returns hash block idx of level lv, checked up to the root.
func (r *Reader) hashBlock(lv int, idx uint64) ([]byte, error) {
	pos := r.g.Levels[lv].Start + idx
	r.mu.RLock()
	blk, ok := r.cache[pos]
	r.mu.RUnlock()
	if ok {
		return blk, nil
	}
	hbs := r.p.HashBlockSize
	blk = make([]byte, hbs)
	if err := readFull(r.hash, blk, int64(pos)*int64(hbs)); err != nil {
		return nil, err
	}
	want := r.root
	top := lv == len(r.g.Levels)-1
	if !top {
		per := uint64(r.g.PerBlock)
		parent, err := r.hashBlock(lv+1, idx/per)
		if err != nil {
			return nil, err
		}
		j := int(idx % per)
		want = parent[j*r.g.Slot : j*r.g.Slot+r.g.DigestSize]
	}
	sum := make([]byte, r.g.DigestSize)
	hs := r.hashers.Get().(*hasher)
	hs.digests(sum, r.g.DigestSize, blk, hbs)
	r.hashers.Put(hs)
	if !bytes.Equal(sum, want) {
		return nil, &CorruptError{Level: lv, Block: idx, Offset: int64(pos) * int64(hbs), Root: top}
	}
	r.mu.Lock()
	if r.cached+hbs > maxCached {
		r.cache, r.cached = map[uint64][]byte{}, 0
	}
	if _, ok := r.cache[pos]; !ok {
		r.cache[pos] = blk
		r.cached += hbs
	}
	r.mu.Unlock()
	return blk, nil
}

// readFull reads all of b at off of src: a short read is an error, the
// device being smaller than the tree says.
func readFull(src io.ReaderAt, b []byte, off int64) error {
	n, err := src.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return readErr(err, off)
}
