// Package sectors runs a sector transform over byte ranges of an image in
// parallel. It knows nothing about cryptography: the caller supplies a
// [Transform], a function of a buffer of whole sectors and the IV sector
// number of its first 512-byte unit (cryptimg passes a sector cipher's
// EncryptSectors or DecryptSectors, or a closure that also reads or writes
// integrity tags), and the [Extent]s to process.
//
// There is no serial stage in [Run]: each of Jobs workers takes the next
// chunk, reads it with a positional read, transforms it, and with
// [Options.Unordered] writes it with a positional write. Without it the
// goroutine that called Run writes the chunks in order, which an output
// stream or a format that allocates as it is written (qcow2) needs. Reads
// run concurrently where src is safe for it (an *os.File, a *bytes.Reader,
// an *io.SectionReader of either, or [Options.ConcurrentReads]); other
// ReaderAts are read one chunk at a time, in order. [Stream] does the same
// for a stream of unknown length: one goroutine reads, the workers
// transform, and the caller's goroutine writes in order.
//
// Memory is bounded by the number of chunk buffers, at most 2*Jobs+2,
// whatever the size of the image; buffers are reused, so the steady state
// allocates nothing per chunk. Holes in an input *os.File are found with
// SEEK_DATA and SEEK_HOLE and zero-filled instead of read, and with
// [Options.Sparse] zero output blocks are not written, so sparse images stay
// sparse.
//
// This package is a building block of cryptimg, not a stable API.
package sectors

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
)

// UnitSize is the size of the unit that sector numbers count: the IV sector
// number advances by one per 512 bytes, as in dm-crypt, whatever the sector
// size of the transform.
const UnitSize = 512

// Defaults used for zero fields of [Options].
const (
	DefaultChunkSize   = 1 << 20
	DefaultSectorSize  = UnitSize
	DefaultSparseBlock = 4096
)

// Transform processes len(src) bytes, a whole number of sectors, whose first
// 512-byte unit has IV sector number firstSector; the sector number advances
// by one per 512 bytes. dst and src have the same length, and Run always
// passes the same buffer as both (in place). A Transform must be safe to call
// from several goroutines at once.
type Transform func(dst, src []byte, firstSector uint64) error

// Extent is a byte range to read from src, transform and write to dst.
type Extent struct {
	SrcOffset int64  // byte offset in src
	DstOffset int64  // byte offset in dst
	Length    int64  // bytes, a multiple of Options.SectorSize
	Sector    uint64 // IV sector number of the first 512 bytes of this extent
}

// Options tunes [Run]. The zero value is usable.
type Options struct {
	// Jobs is the number of transform workers; 0 means runtime.GOMAXPROCS(0).
	Jobs int
	// ChunkSize is the number of bytes read, transformed and written at a
	// time; 0 means DefaultChunkSize (1 MiB). It must be a multiple of
	// SectorSize, so a chunk never splits a sector. The last chunk of an
	// extent may be shorter.
	ChunkSize int
	// SectorSize is the crypto unit in bytes: 512 for LUKS1, 4096 allowed;
	// 0 means 512. It must be a positive multiple of 512. The Transform is
	// always called on whole sectors.
	SectorSize int
	// Sparse skips writing output blocks that are all zero. The caller must
	// have sized dst so that unwritten ranges read as zeros (a new or
	// truncated file, or a qcow2 image with unallocated clusters).
	Sparse bool
	// SparseBlock is the granularity of Sparse in bytes, counted on absolute
	// dst offsets: an aligned block of this size is skipped when all of its
	// output is zero. 0 means DefaultSparseBlock (4096, the usual file
	// system block); ChunkSize skips only all-zero chunks.
	SparseBlock int
	// Progress, if not nil, is called after each chunk is written (or
	// skipped as zeros) with the cumulative number of bytes done so far. It
	// is called from the goroutine that called Run, at most once per chunk
	// (in chunk order, or as chunks finish with Unordered), so it may update
	// a progress bar directly.
	Progress func(done int64)
	// Buffers, if not nil, lends Run the chunk buffers of an earlier run and
	// keeps this run's when it returns, so a caller that runs window after
	// window does not allocate (and zero) its buffers every time.
	Buffers *Buffers
	// ConcurrentReads says that src.ReadAt is safe for concurrent use, so
	// that the workers read their chunks in parallel. It is implied for an
	// *os.File, a *bytes.Reader and an *io.SectionReader of either.
	ConcurrentReads bool
	// Unordered lets each worker write its own chunks as soon as they are
	// transformed, in any order (one WriteAt at a time), instead of passing
	// them to one writer that writes them in order. dst.WriteAt is then
	// called from the workers, and no dst range may overlap a src range of
	// another chunk. For a new output file, where the order of writes does
	// not matter; not for an output whose format allocates as it is
	// written (qcow2), nor in place with a shift.
	Unordered bool
	// Collect allocates every chunk buffer up front and then runs a
	// garbage collection (runtime.GC) before the workers start. A
	// collection that falls inside a run is dear: the workers spend their
	// time in assembly, which the collector cannot preempt, so it keeps
	// signalling them while it waits (encrypting 1 GiB with integrity took
	// 17% less CPU without one). Collected first, with the run's buffers
	// live, the heap has room for what the run allocates and no
	// collection comes due. Meant for a run over a whole image or a whole
	// stream (Stream honours it too), not for one window of many.
	Collect bool
}

// IOError reports a failed read of src or write of dst, with the absolute
// byte offset at which it failed. A short read (src ends inside an extent)
// is an IOError wrapping io.ErrUnexpectedEOF.
type IOError struct {
	Op     string // "read input" or "write output"
	Offset int64  // absolute byte offset in src or dst
	Err    error
}

func (e *IOError) Error() string {
	return e.Op + " at offset " + strconv.FormatInt(e.Offset, 10) + ": " + e.Err.Error()
}

func (e *IOError) Unwrap() error { return e.Err }

// chunk is one unit of work. It travels by value through the channels, so
// passing it along allocates nothing.
type chunk struct {
	seq    int64  // position in the output order
	buf    []byte // pool buffer, len = chunk length
	src    int64  // absolute offset in src
	dst    int64  // absolute offset in dst
	sector uint64 // IV sector number of buf[0:512]
	ready  bool   // set in the writer's reorder ring
	err    error  // the chunk's read, transform or write failed
}

// stats lets tests observe a run.
type stats struct {
	buffers int // number of chunk buffers allocated (the peak, as they are never freed)
}

// Run reads every extent from src, transforms it chunk by chunk in parallel
// workers and writes it to dst at the same relative position.
//
// I/O is positional (ReadAt, WriteAt). Each worker reads its own chunks:
// concurrently if src is an *os.File, a *bytes.Reader or an
// *io.SectionReader of one (or Options.ConcurrentReads says src is safe),
// else one at a time in extent order. dst.WriteAt is called only from the
// goroutine that called Run, in extent order, unless Options.Unordered lets
// the workers write. In order, a chunk is written only after every chunk
// before it was read, so dst ranges must not overlap src ranges of later
// chunks, except that an extent may be transformed in place (same file,
// same offsets). Memory is bounded to about 2*Jobs*ChunkSize whatever the
// total size. If src is an *os.File (or an *io.SectionReader of one), its
// holes are zero-filled without reading; the Transform still runs on them.
// This moves the file offset of src, which Run otherwise does not use.
//
// After the last write, if dst has a Sync() error method it is called once.
// The first error in chunk order is returned (an *IOError for I/O): once a
// chunk fails no later chunk starts, the chunks before it finish, and the
// error of the earliest failed chunk wins, as in a run in order. Cancelling
// ctx stops all goroutines within about one chunk's work and returns
// ctx.Err(). Run returns only after all of its goroutines have exited.
func Run(ctx context.Context, dst io.WriterAt, src io.ReaderAt, extents []Extent, t Transform, o Options) error {
	return run(ctx, dst, src, extents, t, o, nil)
}

// plan is the validated shape of a run.
type plan struct {
	jobs, chunk, sector int
	sparseBlock         int   // 0: write everything
	chunks              int64 // number of chunks
	bufLen              int   // length of a chunk buffer
}

func newPlan(extents []Extent, o Options) (plan, error) {
	p := plan{jobs: o.Jobs, chunk: o.ChunkSize, sector: o.SectorSize, sparseBlock: o.SparseBlock}
	if p.jobs == 0 {
		p.jobs = runtime.GOMAXPROCS(0)
	}
	if p.chunk == 0 {
		p.chunk = DefaultChunkSize
	}
	if p.sector == 0 {
		p.sector = DefaultSectorSize
	}
	if p.sparseBlock == 0 {
		p.sparseBlock = DefaultSparseBlock
	}
	switch {
	case p.jobs < 0:
		return p, fmt.Errorf("sectors: invalid number of jobs %d", p.jobs)
	case p.sector < 0 || p.sector%UnitSize != 0:
		return p, fmt.Errorf("sectors: sector size %d is not a positive multiple of %d", p.sector, UnitSize)
	case p.chunk < 0 || p.chunk%p.sector != 0:
		return p, fmt.Errorf("sectors: chunk size %d is not a positive multiple of the sector size %d", p.chunk, p.sector)
	case p.sparseBlock < 0:
		return p, fmt.Errorf("sectors: invalid sparse block size %d", p.sparseBlock)
	}
	for i, e := range extents {
		switch {
		case e.Length < 0 || e.Length%int64(p.sector) != 0:
			return p, fmt.Errorf("sectors: extent %d: length %d is not a multiple of the sector size %d", i, e.Length, p.sector)
		case e.SrcOffset < 0 || e.DstOffset < 0:
			return p, fmt.Errorf("sectors: extent %d: negative offset", i)
		}
		p.chunks += (e.Length + int64(p.chunk) - 1) / int64(p.chunk)
		p.bufLen = max(p.bufLen, int(min(e.Length, int64(p.chunk))))
	}
	if !o.Sparse {
		p.sparseBlock = 0
	}
	return p, nil
}

func run(ctx context.Context, dst io.WriterAt, src io.ReaderAt, extents []Extent, t Transform, o Options, st *stats) error {
	if t == nil {
		panic("sectors: nil Transform")
	}
	p, err := newPlan(extents, o)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	// At most nbuf chunks are in flight: enough for every worker to hold
	// one while the writer holds one and others wait for it. A worker
	// takes a buffer before it takes a chunk number, and numbers are
	// taken in output order, so the oldest unwritten chunk always has a
	// buffer and the pipeline cannot stall.
	nbuf := int(min(int64(2*p.jobs+2), p.chunks))
	pl := newPool(nbuf, p.bufLen)
	if o.Buffers != nil {
		o.Buffers.lend(pl)
		defer o.Buffers.keep(pl)
	}
	if st != nil {
		defer func() { st.buffers = int(pl.allocated.Load()) }()
	}
	if o.Collect {
		pl.collect()
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg  sync.WaitGroup
		out = make(chan chunk, nbuf) // ordered: chunks to write; unordered: chunks written
		rd  = newChunkReader(src, extents, p, o)
	)
	for range min(int64(p.jobs), p.chunks) {
		wg.Go(func() { rd.work(runCtx, t, dst, pl, out) })
	}

	if o.Unordered {
		go func() { wg.Wait(); close(out) }()
		countAll(out, o.Progress)
		err = rd.err
	} else {
		// The writer meets the errors in chunk order: the first it meets
		// is the run's.
		err = writeAll(runCtx, dst, p, pl, out, o.Progress)
	}
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Cancelled from outside before the last chunk was written.
		return err
	}
	if s, ok := dst.(interface{ Sync() error }); ok {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("sync output: %w", err)
		}
	}
	return nil
}

// chunkReader hands out the chunks of a run's extents, in order, to the
// workers, which read them themselves: in parallel where src is safe for
// concurrent use (see concurrentReader), else one at a time and in order
// under mu, as a single reader would.
type chunkReader struct {
	src       io.ReaderAt
	extents   []Extent
	first     []int64 // number of the first chunk of each extent
	p         plan
	next      atomic.Int64 // number of the next chunk to hand out
	parallel  bool         // src.ReadAt may run concurrently
	unordered bool         // workers write their own chunks

	mu    sync.Mutex  // serial reads only
	wmu   sync.Mutex  // unordered writes, one at a time (see work)
	holes *holeFinder // shared by the workers

	// The first error in chunk order: once a chunk fails, no later chunk
	// is started, and the chunks before it still finish, so that the error
	// reported is the one a run in order would meet first (the lowest
	// offset), whichever worker hit its error first.
	stop   atomic.Int64 // number of the failed chunk, or math.MaxInt64
	errMu  sync.Mutex
	errSeq int64
	err    error
}

func newChunkReader(src io.ReaderAt, extents []Extent, p plan, o Options) *chunkReader {
	r := &chunkReader{src: src, extents: extents, p: p, parallel: o.ConcurrentReads || concurrentReader(src), unordered: o.Unordered, errSeq: math.MaxInt64}
	r.stop.Store(math.MaxInt64)
	var n int64
	for _, e := range extents {
		r.first = append(r.first, n)
		n += (e.Length + int64(p.chunk) - 1) / int64(p.chunk)
	}
	r.holes = newHoleFinder(src)
	return r
}

// concurrentReader reports whether src is known to be safe for concurrent
// ReadAt calls that do not share a file offset: an *os.File (pread), a
// *bytes.Reader, or an *io.SectionReader of one of these. Other ReaderAts
// (qcow2 guests, test doubles) are read from one goroutine at a time.
func concurrentReader(src io.ReaderAt) bool {
	if sr, ok := src.(*io.SectionReader); ok {
		src, _, _ = sr.Outer()
	}
	switch src.(type) {
	case *os.File, *bytes.Reader:
		return true
	}
	return false
}

// chunk returns chunk number seq, its buffer the first bytes of buf.
func (r *chunkReader) chunk(seq int64, buf []byte) chunk {
	i := sort.Search(len(r.first), func(i int) bool { return r.first[i] > seq }) - 1
	// An empty extent shares its first number with the next, so the
	// last extent starting at or before seq is never empty.
	e := r.extents[i]
	off := (seq - r.first[i]) * int64(r.p.chunk)
	n := int(min(int64(r.p.chunk), e.Length-off))
	return chunk{
		seq:    seq,
		buf:    buf[:n],
		src:    e.SrcOffset + off,
		dst:    e.DstOffset + off,
		sector: e.Sector + uint64(off/UnitSize),
	}
}

// take numbers and reads the next chunk into buf. ok is false when there
// are no chunks left.
func (r *chunkReader) take(buf []byte) (c chunk, ok bool, err error) {
	if !r.parallel {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	seq := r.next.Add(1) - 1
	if seq >= r.p.chunks || seq >= r.stop.Load() {
		return chunk{}, false, nil
	}
	c = r.chunk(seq, buf)
	return c, true, readFull(r.src, r.holes, c.buf, c.src)
}

// fail records err as the error of chunk seq, keeping the first in
// chunk order, and stops the chunks after it from starting.
func (r *chunkReader) fail(seq int64, err error) {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if seq < r.errSeq {
		r.errSeq, r.err = seq, err
		r.stop.Store(seq)
	}
}

// work is one worker: it takes a buffer, then the next chunk, reads it,
// transforms it in place, and either writes it itself and reports it done
// on out (unordered) or passes it on out to the ordered writer. A chunk
// that fails goes on out with its error. It returns when the chunks run
// out, after a failure, or when ctx is done.
func (r *chunkReader) work(ctx context.Context, t Transform, dst io.WriterAt, pl *bufPool, out chan<- chunk) {
	for {
		buf := pl.get(ctx)
		if buf == nil {
			return // cancelled
		}
		if ctx.Err() != nil {
			pl.put(buf)
			return
		}
		c, ok, err := r.take(buf)
		if !ok {
			pl.put(buf)
			return
		}
		if err == nil {
			if err = t(c.buf, c.buf, c.sector); err != nil {
				err = fmt.Errorf("sectors from IV sector %d: %w", c.sector, err)
			}
		}
		if err == nil && r.unordered {
			// One write at a time: the kernel serialises writes to one
			// file anyway (the inode lock), and waiting here parks the
			// goroutine, where waiting on that lock spins in the kernel
			// (decrypting 1 GiB to tmpfs took 20% more system time).
			r.wmu.Lock()
			err = writeChunk(dst, c, r.p.sparseBlock)
			r.wmu.Unlock()
		}
		if err != nil {
			r.fail(c.seq, err)
			c.err = err
		}
		if r.unordered {
			pl.put(c.buf) // only the length travels on
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// writeChunk writes c to dst at its offset, leaving out zero blocks when
// sparseBlock is set.
func writeChunk(dst io.WriterAt, c chunk, sparseBlock int) error {
	if sparseBlock > 0 {
		return writeSparse(dst, c.buf, c.dst, sparseBlock)
	}
	return writeFull(dst, c.buf, c.dst)
}

// countAll reports the progress of an unordered run's workers until
// they have all returned and closed done.
func countAll(done <-chan chunk, progress func(int64)) {
	var bytes int64
	for c := range done {
		if c.err == nil {
			bytes += int64(len(c.buf))
			if progress != nil {
				progress(bytes)
			}
		}
	}
}

// readFull fills buf from src at off, zero-filling holes without reading.
func readFull(src io.ReaderAt, holes *holeFinder, buf []byte, off int64) error {
	for len(buf) > 0 {
		n := len(buf)
		if holes != nil {
			hole, end := holes.segment(off)
			if end-off < int64(n) {
				n = int(end - off)
			}
			if hole {
				clear(buf[:n])
				buf, off = buf[n:], off+int64(n)
				continue
			}
		}
		m, err := src.ReadAt(buf[:n], off)
		if m == n {
			err = nil // io.ReaderAt may return io.EOF with a full read
		} else if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return &IOError{Op: "read input", Offset: off + int64(m), Err: unwrapPath(err)}
		}
		buf, off = buf[n:], off+int64(n)
	}
	return nil
}

// work transforms chunks in place until jobs is closed or ctx is done.
func work(ctx context.Context, t Transform, jobs <-chan chunk, results chan<- chunk, fail func(error)) {
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-jobs:
			if !ok {
				return
			}
		case <-ctx.Done():
			return
		}
		// Check again: select picks at random when both are ready, and
		// a cancelled run should not start another transform.
		if ctx.Err() != nil {
			return
		}
		if err := t(c.buf, c.buf, c.sector); err != nil {
			fail(fmt.Errorf("sectors from IV sector %d: %w", c.sector, err))
			return
		}
		select {
		case results <- c:
		case <-ctx.Done():
			return
		}
	}
}

// writeAll writes the transformed chunks in order, reordering those that
// finish early in a ring indexed by sequence number: at most len(ring)
// chunks are in flight, so their numbers are distinct modulo len(ring).
func writeAll(ctx context.Context, dst io.WriterAt, p plan, pl *bufPool, results <-chan chunk, progress func(int64)) error {
	ring := make([]chunk, max(pl.cap(), 1))
	var done int64
	for next := int64(0); next < p.chunks; {
		slot := &ring[next%int64(len(ring))]
		if !slot.ready {
			select {
			case c := <-results:
				c.ready = true
				ring[c.seq%int64(len(ring))] = c
			case <-ctx.Done():
				return nil
			}
			continue
		}
		c := *slot
		*slot = chunk{}
		if c.err != nil {
			return c.err
		}
		if err := writeChunk(dst, c, p.sparseBlock); err != nil {
			return err
		}
		done += int64(len(c.buf))
		pl.put(c.buf)
		next++
		if progress != nil {
			progress(done)
		}
	}
	return nil
}

// writeFull writes all of buf to dst at off.
func writeFull(dst io.WriterAt, buf []byte, off int64) error {
	n, err := dst.WriteAt(buf, off)
	if err == nil && n < len(buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &IOError{Op: "write output", Offset: off + int64(n), Err: unwrapPath(err)}
	}
	return nil
}

// unwrapPath drops the *fs.PathError an *os.File adds ("write /path: ..."):
// IOError already says what failed where, and the caller knows the path.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

// failure keeps the first error of a run's goroutines and cancels the
// run's context when it comes. err is read after they have all returned.
type failure struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func newFailure(ctx context.Context) (context.Context, *failure) {
	runCtx, cancel := context.WithCancel(ctx)
	return runCtx, &failure{cancel: cancel}
}

func (f *failure) fail(err error) {
	f.once.Do(func() {
		f.err = err
		f.cancel()
	})
}
