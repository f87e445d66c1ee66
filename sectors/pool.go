package sectors

import "context"

// bufPool hands out at most cap chunk buffers of one size. Buffers are
// allocated on first use and then recycled, so a run allocates at most cap
// buffers whatever its length. get is called only by the reader goroutine.
type bufPool struct {
	free      chan []byte
	size      int
	allocated int // buffers made so far; only the reader touches it
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
	if p.allocated < cap(p.free) {
		p.allocated++
		return make([]byte, p.size)
	}
	select {
	case b := <-p.free:
		return b[:p.size]
	case <-ctx.Done():
		return nil
	}
}

// put returns a buffer taken with get. It never blocks: at most cap buffers
// exist.
func (p *bufPool) put(b []byte) {
	p.free <- b
}
