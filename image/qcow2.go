package image

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// openQcow2 opens a qcow2+LUKS image: the LUKS header lives in the area the
// full-disk-encryption header extension points to, and its key-material
// offsets count from the start of that area.
func openQcow2(f *os.File, size int64) (*Encrypted, error) {
	im, err := qcow2.Open(f, size)
	if err != nil {
		return nil, err
	}
	if im.CryptMethod != qcow2.CryptLUKS {
		return nil, fmt.Errorf("%w: qcow2 image with crypt method %d (want LUKS)", ErrNotEncrypted, im.CryptMethod)
	}
	h, err := header.Read(f, im.CryptOffset, im.CryptLength)
	if err != nil {
		return nil, err
	}
	if v := h.Info().Version; v != 1 {
		return nil, fmt.Errorf("%w: qcow2 with a LUKS%d header (qemu writes and reads only LUKS1)", header.ErrCorrupt, v)
	}
	return &Encrypted{
		Format: Qcow2, Header: h, HeaderOffset: im.CryptOffset,
		PayloadSize: im.Size, FileSize: size, Qcow2: im,
		f: f, qcow: im,
	}, nil
}

// decryptQcow2 decrypts the allocated data of a qcow2+LUKS image into w,
// at guest offsets. Each data run is host-contiguous, so its IV sectors
// advance by one per 512 bytes from host offset / 512. Compressed clusters
// hold plaintext (qemu never encrypts them) and are only inflated.
func (e *Encrypted) decryptQcow2(ctx context.Context, w io.WriterAt, t sectors.Transform, p Pipeline) error {
	ext, err := e.qcow.Extents(e.f)
	if err != nil {
		return err
	}
	var runs []sectors.Extent
	var total int64
	var compressed []qcow2.Extent
	for _, x := range ext {
		switch x.Kind {
		case qcow2.Data:
			runs = append(runs, sectors.Extent{SrcOffset: x.HostOffset, DstOffset: x.GuestOffset, Length: x.Length, Sector: qcowIV(x.HostOffset)})
			total += x.Length
		case qcow2.Compressed:
			compressed = append(compressed, x)
			total += x.Length
		}
	}
	o := p.options(total, true)
	o.Unordered = newFile(w) // a raw output; a qcow2 one allocates in order
	if err := sectors.Run(ctx, w, e.f, runs, t, o); err != nil {
		return err
	}
	var done int64
	for _, r := range runs {
		done += r.Length
	}
	buf := make([]byte, e.qcow.ClusterSize)
	for _, x := range compressed {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.qcow.ReadCompressed(e.f, x, buf); err != nil {
			return err
		}
		if _, err := w.WriteAt(buf[:x.Length], x.GuestOffset); err != nil {
			return &sectors.IOError{Op: "write output", Offset: x.GuestOffset, Err: err}
		}
		done += x.Length
		if p.Progress != nil {
			p.Progress(done, total)
		}
	}
	return nil
}

// encryptQcow2 writes src as a qcow2+LUKS image. Only clusters that hold
// non-zero data are allocated, as qemu-img convert does, so the work is
// proportional to the data, not to the virtual size.
func encryptQcow2(ctx context.Context, dst *os.File, src *Plain, area []byte, t sectors.Transform, o EncryptOptions) error {
	w, err := qcow2.Create(dst, src.Size, qcow2.CreateOptions{ClusterSize: o.ClusterSize, CryptLength: int64(len(area))})
	if err != nil {
		return err
	}
	if _, err := dst.WriteAt(area, w.CryptOffset()); err != nil {
		return fmt.Errorf("failed to write header: %w", err)
	}
	// A qcow2 input's map already says which clusters are unallocated or
	// zero; a raw input's all-zero clusters are found by reading them, and
	// left unallocated as qemu-img convert does.
	var runs []Range
	if src.Format == Qcow2 {
		runs = clusterRuns(src.dataMap(), w.ClusterSize(), src.Size)
	} else if runs, err = nonZeroClusters(ctx, src.guest, src.dataMap(), w.ClusterSize(), src.Size); err != nil {
		return err
	}
	var ext []sectors.Extent
	var total int64
	for _, r := range runs {
		host, err := w.AllocateData(r.Offset, r.Length)
		if err != nil {
			return err
		}
		// An allocated cluster is encrypted whole, zeros included: qemu
		// decrypts every byte of it.
		ext = append(ext, sectors.Extent{SrcOffset: r.Offset, DstOffset: host, Length: r.Length, Sector: qcowIV(host)})
		total += r.Length
	}
	if err := sectors.Run(ctx, dst, src.guest, ext, t, o.Pipeline.options(total, false)); err != nil {
		return err
	}
	return w.Close()
}

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
