package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cryptimg/cryptimg/sectors"
)

// TestDecryptFileStream: a raw image file decrypts to a stream through
// workers that read the file themselves; the stream carries the plaintext
// in order, progress ends at the payload size, and a file cut short fails
// with the offset where the data ends.
func TestDecryptFileStream(t *testing.T) {
	plain := make([]byte, 3<<20+64<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range plain {
		plain[i] = byte(r.Uint32())
	}
	f, e, k := newTestImage(t, plain)
	var out bytes.Buffer
	var last, total int64
	p := Pipeline{Jobs: 3, ChunkSize: 64 << 10, Progress: func(d, t int64) { last, total = d, t }}
	n, err := e.DecryptFileStream(context.Background(), &out, k, p)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(plain)) || !bytes.Equal(out.Bytes(), plain) {
		t.Fatalf("streamed %d bytes, equal to the plaintext: %v", n, bytes.Equal(out.Bytes(), plain))
	}
	if last != int64(len(plain)) || total != int64(len(plain)) {
		t.Errorf("progress ended at %d of %d, want %d", last, total, len(plain))
	}

	cut := e.PayloadOffset + 1<<20 + 1000
	if err := f.Truncate(cut); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	n, err = e.DecryptFileStream(context.Background(), &out, k, p)
	var ioe *sectors.IOError
	if !errors.As(err, &ioe) || !errors.Is(err, io.ErrUnexpectedEOF) || ioe.Offset != cut {
		t.Fatalf("cut image: err = %v, want a short read at %d", err, cut)
	}
	if n > 1<<20 || !bytes.Equal(out.Bytes(), plain[:n]) {
		t.Errorf("cut image: %d bytes streamed, want at most the 1 MiB before the cut, all plaintext", n)
	}
}

// TestDecryptFileStreamNotRaw: qcow2 and authenticated images have their
// own paths.
func TestDecryptFileStreamNotRaw(t *testing.T) {
	e := &Encrypted{Format: Qcow2}
	if _, err := e.DecryptFileStream(context.Background(), io.Discard, &Key{}, Pipeline{}); err == nil {
		t.Error("DecryptFileStream of a qcow2 image: no error")
	}
}
