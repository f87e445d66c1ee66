package image

// Plain qcow2 helpers: which clusters of a plaintext hold data, and a
// writer that makes a plain qcow2 output (decrypt --format qcow2,
// partitions). The qcow2+LUKS container is container_qcow2.go.

import (
	"context"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// clusterRuns widens ranges to whole clusters (cut at the virtual size)
// and merges them.
func clusterRuns(ranges []Range, cs, size int64) []Range {
	var runs []Range
	for _, r := range ranges {
		start := r.Offset - r.Offset%cs
		end := min((r.Offset+r.Length+cs-1)/cs*cs, size)
		if n := len(runs); n > 0 && runs[n-1].Offset+runs[n-1].Length >= start {
			runs[n-1].Length = max(runs[n-1].Length, end-runs[n-1].Offset)
			continue
		}
		runs = append(runs, Range{start, end - start})
	}
	return runs
}

// nonZeroClusters returns the cluster-aligned runs (cut at the virtual
// size) of the clusters within ranges that hold any non-zero byte.
func nonZeroClusters(ctx context.Context, r io.ReaderAt, ranges []Range, cs, size int64) ([]Range, error) {
	const batch = 4 << 20
	buf := make([]byte, max(cs, batch-batch%cs))
	var runs []Range
	next := int64(0) // first cluster not yet examined
	for _, rg := range ranges {
		start := max(rg.Offset-rg.Offset%cs, next)
		end := min(rg.Offset+rg.Length, size)
		for off := start; off < end; {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			n := min(int64(len(buf)), end-off)
			n = min(n+(cs-(off+n)%cs)%cs, size-off) // whole clusters
			b := buf[:n]
			if _, err := r.ReadAt(b, off); err != nil && err != io.EOF {
				return nil, &sectors.IOError{Op: "read input", Offset: off, Err: err}
			}
			for c := int64(0); c < n; c += cs {
				cl := b[c:min(c+cs, n)]
				if !sectors.IsZero(cl) {
					runs = appendRange(runs, Range{off + c, int64(len(cl))})
				}
			}
			off += n
			next = off
		}
	}
	return runs, nil
}

// qcowOut writes a plain qcow2 image through guest offsets, allocating a
// cluster when the first non-zero byte lands in it. Writes come in order
// from one goroutine, so host clusters are handed out sequentially.
type qcowOut struct {
	f    *os.File
	w    *qcow2.Writer
	cs   int64
	size int64
	host map[int64]int64 // guest cluster offset -> host offset
}

func newQcowOut(f *os.File, size, clusterSize int64) (*qcowOut, error) {
	w, err := qcow2.Create(f, size, qcow2.CreateOptions{ClusterSize: clusterSize})
	if err != nil {
		return nil, err
	}
	return &qcowOut{f: f, w: w, cs: w.ClusterSize(), size: size, host: map[int64]int64{}}, nil
}

func (q *qcowOut) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		c := pos - pos%q.cs
		part := p[n:min(len(p), n+int(c+q.cs-pos))]
		h, ok := q.host[c]
		if !ok {
			if sectors.IsZero(part) {
				n += len(part)
				continue
			}
			var err error
			if h, err = q.w.AllocateData(c, min(q.cs, q.size-c)); err != nil {
				return n, err
			}
			q.host[c] = h
		}
		if _, err := q.f.WriteAt(part, h+pos-c); err != nil {
			return n, err
		}
		n += len(part)
	}
	return n, nil
}

func (q *qcowOut) close() error { return q.w.Close() }
