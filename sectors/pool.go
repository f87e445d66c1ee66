package sectors

import (
	"context"
	"runtime"
	"sync/atomic"
)

// bufPool hands out at most cap chunk buffers of one size. Buffers are
// allocated on first use and then recycled, so a run allocates at most cap
// buffers whatever its length. get and put may be called concurrently.
type bufPool struct {
	free      chan []byte
	size      int
	allocated atomic.Int64 // buffers made so far
}

func newPool(n, size int) *bufPool {
	return &bufPool{free: make(chan []byte, n), size: size}
}

func (p *bufPool) cap() int { return cap(p.free) }

// get returns a buffer of len size, waiting for one to be put back when all
// are in use. It returns nil if ctx is done first.
func (p *bufPool) get(ctx context.Context) []byte {
	select {
	case b := <-p.free:
		return b[:p.size]
	default:
	}
	for {
		n := p.allocated.Load()
		if n >= int64(cap(p.free)) {
			break
		}
		if p.allocated.CompareAndSwap(n, n+1) {
			return make([]byte, p.size)
		}
	}
	select {
	case b := <-p.free:
		return b[:p.size]
	case <-ctx.Done():
		return nil
	}
}

// collect allocates every buffer not yet made and then runs a garbage
// collection, for Options.Collect: with the run's buffers live, the heap
// has room for what the run allocates and no collection comes due while
// the workers are in assembly.
func (p *bufPool) collect() {
	for ; p.allocated.Load() < int64(cap(p.free)); p.allocated.Add(1) {
		p.free <- make([]byte, p.size)
	}
	runtime.GC()
}

// put returns a buffer taken with get. It never blocks: at most cap buffers
// exist.
func (p *bufPool) put(b []byte) {
	p.free <- b
}

// Buffers carries chunk buffers from one Run to the next (Options.Buffers).
// Runs that share a Buffers must not overlap. The zero value is ready.
type Buffers struct {
	free [][]byte
}

// lend moves kept buffers that are large enough into p, up to its cap, as
// if p had allocated them.
func (b *Buffers) lend(p *bufPool) {
	kept := b.free[:0]
	for _, buf := range b.free {
		if cap(buf) >= p.size && p.allocated.Load() < int64(p.cap()) {
			p.free <- buf[:p.size]
			p.allocated.Add(1)
			continue
		}
		kept = append(kept, buf)
	}
	clear(b.free[len(kept):])
	b.free = kept
}

// keep takes back the buffers that p holds once its run is over.
func (b *Buffers) keep(p *bufPool) {
	for {
		select {
		case buf := <-p.free:
			b.free = append(b.free, buf)
		default:
			return
		}
	}
}
