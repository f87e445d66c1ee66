package sectors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrPartialSector reports a stream that ended inside a sector.
var ErrPartialSector = errors.New("the input ends inside a sector")

// Stream is Run for a stream of unknown length: it reads src to its end
// in chunks, transforms them in parallel (the first 512-byte unit is IV
// sector first, the rest follow on) and writes them to dst in order. The
// stream must end on a sector boundary (else ErrPartialSector, after the
// whole sectors before it were written). It returns the bytes written.
// Options.Sparse is not used: a stream has no holes to leave.
func Stream(ctx context.Context, dst io.Writer, src io.Reader, first uint64, t Transform, o Options) (int64, error) {
	if t == nil {
		panic("sectors: nil Transform")
	}
	o.Sparse = false
	p, err := newPlan(nil, o)
	if err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	nbuf := 2*p.jobs + 2
	pl := newPool(nbuf, p.chunk)
	if o.Collect {
		pl.collect()
	}
	runCtx, f := newFailure(ctx)
	defer f.cancel()
	fail := f.fail
	var (
		wg      sync.WaitGroup
		jobs    = make(chan chunk, nbuf)
		results = make(chan chunk, nbuf)
		total   = make(chan int64, 1) // chunks the reader made, once it stops
	)
	var partial error // the input's end inside a sector: reported once the rest is written
	wg.Go(func() {
		defer close(jobs)
		n, err := readStream(runCtx, src, first, p, pl, jobs)
		total <- n
		if errors.Is(err, ErrPartialSector) {
			partial = err
		} else if err != nil {
			fail(err)
		}
	})
	for range max(p.jobs, 1) {
		wg.Go(func() { work(runCtx, t, jobs, results, fail) })
	}
	written, werr := writeStream(runCtx, dst, pl, results, total, o.Progress)
	if werr != nil {
		fail(werr)
	}
	f.cancel()
	wg.Wait()
	if f.err != nil {
		return written, f.err
	}
	if err := ctx.Err(); err != nil {
		return written, err
	}
	return written, partial
}

// readStream fills chunks from src until its end and returns how many it
// sent.
func readStream(ctx context.Context, src io.Reader, first uint64, p plan, pl *bufPool, jobs chan<- chunk) (int64, error) {
	var seq, off int64
	for {
		buf := pl.get(ctx)
		if buf == nil {
			return seq, nil // cancelled
		}
		n, err := io.ReadFull(src, buf)
		end := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err != nil && !end {
			return seq, &IOError{Op: "read input", Offset: off + int64(n), Err: unwrapPath(err)}
		}
		whole := n - n%p.sector
		if whole > 0 {
			c := chunk{seq: seq, buf: buf[:whole], dst: off, sector: first + uint64(off/UnitSize)}
			select {
			case jobs <- c:
			case <-ctx.Done():
				return seq, nil
			}
			seq++
			off += int64(whole)
		} else {
			pl.put(buf)
		}
		if end {
			if whole != n {
				return seq, fmt.Errorf("%w: %d bytes after the last whole %d-byte sector at offset %d", ErrPartialSector, n-whole, p.sector, off)
			}
			return seq, nil
		}
	}
}

// writeStream writes transformed chunks in order until the reader's count
// of chunks is reached.
func writeStream(ctx context.Context, dst io.Writer, pl *bufPool, results <-chan chunk, total <-chan int64, progress func(int64)) (int64, error) {
	ring := make([]chunk, pl.cap())
	var done int64
	want := int64(-1)
	for next := int64(0); want < 0 || next < want; {
		slot := &ring[next%int64(len(ring))]
		if !slot.ready {
			select {
			case c := <-results:
				c.ready = true
				ring[c.seq%int64(len(ring))] = c
			case n := <-total:
				want = n
			case <-ctx.Done():
				return done, nil
			}
			continue
		}
		c := *slot
		*slot = chunk{}
		n, err := dst.Write(c.buf)
		done += int64(n)
		if err == nil && n < len(c.buf) {
			err = io.ErrShortWrite
		}
		if err != nil {
			return done, &IOError{Op: "write output", Offset: c.dst + int64(n), Err: unwrapPath(err)}
		}
		pl.put(c.buf)
		next++
		if progress != nil {
			progress(done)
		}
	}
	return done, nil
}
