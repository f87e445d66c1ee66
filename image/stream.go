package image

// Streams: raw LUKS images read from a pipe or written to one (cryptimg
// encrypt - and decrypt -), where nothing can seek. The header is read or
// written first, then the sectors in order through sectors.Stream.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// ErrNotStreamable refuses a stream that only a seekable file can carry:
// qcow2, whose metadata points anywhere in the file, or an authenticated
// image, whose tags live apart from their sectors.
var ErrNotStreamable = errors.New("needs a seekable file, not a stream")

// EncryptStream writes the raw LUKS image of the plaintext stream r under
// f to w: f's header area (none for a detached header), then every sector
// of r, IV sector 0 first. The stream must end on a sector boundary. A
// qcow2 stream is refused before anything is written. It returns the
// plaintext bytes.
func EncryptStream(ctx context.Context, w io.Writer, r io.Reader, f *Formatted, p Pipeline) (int64, error) {
	if f.Key.Auth != nil {
		return 0, fmt.Errorf("integrity protection %w", ErrNotStreamable)
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if head, _ := br.Peek(4); qcow2.IsQcow2(bytes.NewReader(head)) {
		return 0, fmt.Errorf("qcow2 input %w", ErrNotStreamable)
	}
	if f.Header.Info().PayloadOffset > 0 {
		if err := streamArea(w, f); err != nil {
			return 0, &sectors.IOError{Op: "write output", Offset: 0, Err: err}
		}
	}
	c := f.Key.Cipher
	so := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: c.Geometry().SectorSize}
	if p.Progress != nil {
		p.Progress(0, -1)
		so.Progress = func(d int64) { p.Progress(d, -1) }
	}
	n, err := sectors.Stream(ctx, w, br, rawIV(0), c.EncryptSectors, so)
	if errors.Is(err, sectors.ErrPartialSector) {
		err = fmt.Errorf("%w: %w", ErrUnaligned, err)
	}
	return n, err
}

// OpenStream reads the LUKS header at the start of the stream r (a raw
// image) and returns the image and the rest of the stream, its payload.
// Key slots unlock from the bytes read; the payload is DecryptStream's.
func OpenStream(r io.Reader) (*Encrypted, io.Reader, error) {
	var buf []byte
	need := 0
	for {
		length, more, err := header.StreamLength(buf)
		if err != nil {
			return nil, nil, err
		}
		if more > 0 {
			need = more
		} else {
			need = int(length)
		}
		if len(buf) >= need && more == 0 {
			break
		}
		old := len(buf)
		buf = append(buf, make([]byte, need-old)...)
		if n, err := io.ReadFull(r, buf[old:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				if old+n < header.PhdrSize || !header.IsLUKSMagic(buf) {
					// No LUKS magic, and the stream ends before a LUKS2
					// secondary header copy was found.
					return nil, nil, fmt.Errorf("%w: the stream ends after %d bytes", header.ErrNotLUKS, old+n)
				}
				return nil, nil, fmt.Errorf("%w: the stream ends inside the LUKS header area (%d of %d bytes)", ErrTruncated, old+n, need)
			}
			return nil, nil, fmt.Errorf("reading the LUKS header: %w", err)
		}
	}
	h, err := header.Read(bytes.NewReader(buf), 0, int64(len(buf)))
	if err != nil {
		return nil, nil, err
	}
	i := h.Info()
	if i.Integrity != "" {
		return nil, nil, fmt.Errorf("integrity protection %w", ErrNotStreamable)
	}
	if i.PayloadOffset != int64(len(buf)) {
		return nil, nil, fmt.Errorf("%w: the payload is at %d, the stream was read to %d", header.ErrCorrupt, i.PayloadOffset, len(buf))
	}
	hr := bytes.NewReader(buf)
	e := newEncrypted(&rawContainer{luks: luksArea{r: hr, limit: int64(len(buf))}, data: hr, base: i.PayloadOffset, size: i.PayloadSize}, h, 0)
	if i.PayloadSize != 0 {
		r = io.LimitReader(r, i.PayloadSize)
	}
	return e, r, nil
}

// DecryptStream writes the plaintext of payload, the rest of the stream
// OpenStream read e from, to w, and returns its length.
func (e *Encrypted) DecryptStream(ctx context.Context, w io.Writer, payload io.Reader, k *Key, p Pipeline) (int64, error) {
	c := k.Cipher
	so := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: c.Geometry().SectorSize}
	if p.Progress != nil {
		p.Progress(0, -1)
		so.Progress = func(d int64) { p.Progress(d, -1) }
	}
	n, err := sectors.Stream(ctx, w, payload, rawIV(0), c.DecryptSectors, so)
	if errors.Is(err, sectors.ErrPartialSector) {
		err = fmt.Errorf("%w: %w", ErrTruncated, err)
	}
	return n, err
}

// DecryptFileStream writes the plaintext of a raw image opened from a
// file (Open) to w, in order, and returns its length. Unlike
// DecryptStream, the workers read the file themselves, in parallel; only
// the writes to w are in order.
func (e *Encrypted) DecryptFileStream(ctx context.Context, w io.Writer, k *Key, p Pipeline) (int64, error) {
	if e.c == nil || e.Authenticated() {
		return 0, fmt.Errorf("image: DecryptFileStream of a %s image with integrity %v", e.Format, e.Authenticated())
	}
	return e.c.stream(ctx, w, k, p, false)
}

// streamAt writes the chunks of an ordered sectors.Run to a stream: they
// come in order, back to back from offset 0.
type streamAt struct {
	w   io.Writer
	off int64
}

func (s *streamAt) WriteAt(p []byte, off int64) (int, error) {
	if off != s.off {
		return 0, fmt.Errorf("image: stream written at %d, want %d", off, s.off)
	}
	n, err := s.w.Write(p)
	s.off += int64(n)
	return n, err
}
