package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

// newTestImage encrypts plain into a raw LUKS image in a temporary file and
// returns it opened read-write, with its key.
func newTestImage(t testing.TB, plain []byte) (*os.File, *Encrypted, *Key) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "plain.raw")
	if err := os.WriteFile(src, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	sf, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	f, err := os.OpenFile(filepath.Join(dir, "img.luks"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	pass := []byte("view test")
	if _, err := EncryptRaw(context.Background(), f, sf, EncryptOptions{
		Header:     header.Params{ForceIterations: header.MinIterations},
		Passphrase: pass,
	}); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Clear)
	return f, e, k
}

// decryptedFile decrypts the image through the sectors pipeline, a path
// independent of the view, and returns the plaintext.
func decryptedFile(t *testing.T, f *os.File, e *Encrypted, k *Key) []byte {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "out.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := e.Decrypt(context.Background(), out, k, Pipeline{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestViewReadsPlaintext(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	plain := randomBytes(r, 3<<20+5*SectorSize)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Size() != int64(len(plain)) {
		t.Fatalf("Size() = %d, want %d", v.Size(), len(plain))
	}
	// Whole image in one call (several internal steps), then random
	// unaligned ranges.
	got := make([]byte, len(plain))
	if n, err := v.ReadAt(got, 0); n != len(plain) || err != nil {
		t.Fatalf("ReadAt(all) = %d, %v", n, err)
	}
	if !bytes.Equal(got, plain) {
		t.Fatal("whole-image read differs from the plaintext")
	}
	for range 300 {
		off := r.IntN(len(plain))
		n := r.IntN(min(len(plain)-off, 1<<21) + 1)
		b := make([]byte, n)
		if m, err := v.ReadAt(b, int64(off)); m != n || err != nil {
			t.Fatalf("ReadAt(%d bytes at %d) = %d, %v", n, off, m, err)
		}
		if !bytes.Equal(b, plain[off:off+n]) {
			t.Fatalf("ReadAt(%d bytes at %d) differs", n, off)
		}
	}
}

func TestViewEOF(t *testing.T) {
	plain := randomBytes(rand.New(rand.NewPCG(3, 4)), 8*SectorSize)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	size := v.Size()
	b := make([]byte, 1000)
	// Exactly up to the end: no error.
	if n, err := v.ReadAt(b, size-1000); n != 1000 || err != nil {
		t.Errorf("read to the end = %d, %v; want 1000, nil", n, err)
	}
	// Straddling the end: short count and io.EOF.
	if n, err := v.ReadAt(b, size-300); n != 300 || err != io.EOF {
		t.Errorf("read across the end = %d, %v; want 300, EOF", n, err)
	}
	if !bytes.Equal(b[:300], plain[len(plain)-300:]) {
		t.Error("short read at the end returned wrong bytes")
	}
	for _, off := range []int64{size, size + 1, size + 4096} {
		if n, err := v.ReadAt(b, off); n != 0 || err != io.EOF {
			t.Errorf("read at %d = %d, %v; want 0, EOF", off, n, err)
		}
	}
	if n, err := v.ReadAt(nil, size); n != 0 || err != nil {
		t.Errorf("empty read at the end = %d, %v; want 0, nil", n, err)
	}
	if _, err := v.ReadAt(b, -1); err == nil {
		t.Error("read at a negative offset succeeded")
	}
	// Writes never grow the image, and a refused write changes nothing.
	for _, c := range []struct{ off, n int64 }{{size - 10, 11}, {size, 1}, {size + 100, 5}} {
		n, err := v.WriteAt(make([]byte, c.n), c.off)
		if n != 0 || !errors.Is(err, ErrBeyondEnd) {
			t.Errorf("WriteAt(%d bytes at %d) = %d, %v; want 0, ErrBeyondEnd", c.n, c.off, n, err)
		}
	}
	if n, err := v.WriteAt([]byte{1, 2, 3}, size-3); n != 3 || err != nil {
		t.Errorf("write of the last 3 bytes = %d, %v", n, err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(b, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close: %v, want ErrClosed", err)
	}
	if _, err := v.WriteAt(b, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteAt after Close: %v, want ErrClosed", err)
	}
	want := bytes.Clone(plain)
	copy(want[len(want)-3:], []byte{1, 2, 3})
	if !bytes.Equal(decryptedFile(t, f, e, k), want) {
		t.Error("image content differs after the refused writes")
	}
}

func TestViewReadOnly(t *testing.T) {
	plain := randomBytes(rand.New(rand.NewPCG(5, 6)), 4*SectorSize)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if n, err := v.WriteAt([]byte{1}, 0); n != 0 || !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteAt on a read-only view = %d, %v", n, err)
	}
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestViewReadModifyWrite writes single bytes and short runs across
// sector edges and checks both the view and an independent decryption.
func TestViewReadModifyWrite(t *testing.T) {
	plain := randomBytes(rand.New(rand.NewPCG(7, 8)), 16*SectorSize)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	model := bytes.Clone(plain)
	writes := []struct {
		off int64
		n   int
	}{
		{0, 1}, {511, 1}, {512, 1}, {510, 4}, {1000, 3000}, {5 * 512, 512},
		{6*512 + 1, 510}, {7*512 - 1, 2*512 + 2}, {int64(len(plain)) - 1, 1},
	}
	for i, w := range writes {
		b := bytes.Repeat([]byte{byte(0xa0 + i)}, w.n)
		if n, err := v.WriteAt(b, w.off); n != w.n || err != nil {
			t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", w.n, w.off, n, err)
		}
		copy(model[w.off:], b)
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("view content differs from the model")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decryptedFile(t, f, e, k), model) {
		t.Fatal("decrypted image differs from the model")
	}
}

// TestViewConcurrent runs writers whose byte ranges interleave inside
// shared sectors (each owns every 4th 100-byte segment), so a lost
// read-modify-write update shows as a mismatch, while readers read
// everywhere. Then big random unaligned requests run against the model,
// and an independent decryption must equal the model.
func TestViewConcurrent(t *testing.T) {
	const seg, workers = 100, 4
	size := 1<<20 + 3*SectorSize
	plain := randomBytes(rand.New(rand.NewPCG(9, 10)), size)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	model := bytes.Clone(plain)
	iters := 2000
	if testing.Short() || raceEnabled {
		iters = 300
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 99))
			segs := size / seg
			for range iters {
				s := (r.IntN(segs/workers)*workers + w)
				if s >= segs {
					continue
				}
				a := s*seg + r.IntN(seg)
				b := a + 1 + r.IntN(s*seg+seg-a)
				data := randomBytes(r, b-a)
				if _, err := v.WriteAt(data, int64(a)); err != nil {
					errs <- err
					return
				}
				copy(model[a:b], data) // only this worker touches these bytes
				got := make([]byte, b-a)
				if _, err := v.ReadAt(got, int64(a)); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, model[a:b]) {
					errs <- errors.New("read after write differs")
					return
				}
			}
		})
		// A reader that only checks lengths and errors: its bytes race
		// with the writers by design.
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range iters / 4 {
				off := r.IntN(size)
				b := make([]byte, r.IntN(200000))
				n, err := v.ReadAt(b, int64(off))
				if want := min(len(b), size-off); n != want || (err != nil && !(err == io.EOF && want < len(b))) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(11, 12))
	for range 200 {
		a := r.IntN(size)
		b := a + r.IntN(min(size-a, 3<<20)+1)
		if r.IntN(2) == 0 {
			data := randomBytes(r, b-a)
			if _, err := v.WriteAt(data, int64(a)); err != nil {
				t.Fatal(err)
			}
			copy(model[a:b], data)
		} else {
			got := make([]byte, b-a)
			if _, err := v.ReadAt(got, int64(a)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model[a:b]) {
				t.Fatalf("ReadAt(%d bytes at %d) differs from the model", b-a, a)
			}
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(decryptedFile(t, f, e, k), model) {
		t.Fatal("decrypted image differs from the model")
	}
}

// The serial variants are the baseline of the split across CPUs: compare
// them in the same run (the machine may be shared).
func BenchmarkViewReadAt(b *testing.B) {
	b.Run("split", func(b *testing.B) { benchView(b, false) })
	b.Run("serial", func(b *testing.B) {
		splitCrypt = false
		defer func() { splitCrypt = true }()
		benchView(b, false)
	})
}

func BenchmarkViewWriteAt(b *testing.B) {
	b.Run("split", func(b *testing.B) { benchView(b, true) })
	b.Run("serial", func(b *testing.B) {
		splitCrypt = false
		defer func() { splitCrypt = true }()
		benchView(b, true)
	})
}

func benchView(b *testing.B, write bool) {
	const size = 64 << 20
	f, e, k := newTestImage(b, make([]byte, size))
	v, err := e.View(f, k, false)
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	var off int64
	for b.Loop() {
		if write {
			_, err = v.WriteAt(buf, off)
		} else {
			_, err = v.ReadAt(buf, off)
		}
		if err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(buf))) % size
	}
}

func TestKeyFromVolume(t *testing.T) {
	plain := randomBytes(rand.New(rand.NewPCG(13, 14)), 4*SectorSize)
	f, e, k := newTestImage(t, plain)
	k2, err := e.KeyFromVolume(k.VolumeKey(), k.Slot)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Clear()
	v, err := e.View(f, k2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, len(plain))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("view through a key from the volume key: %v", err)
	}
	bad := bytes.Clone(k.VolumeKey())
	bad[0] ^= 1
	if _, err := e.KeyFromVolume(bad, 0); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Fatalf("wrong volume key: %v, want ErrNoMatchingKeyslot", err)
	}
	if _, err := e.KeyFromVolume(bad[:16], 0); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Fatalf("short volume key: %v, want ErrNoMatchingKeyslot", err)
	}
}

// TestViewBounceCleared checks that an unaligned read, whose plaintext passes
// through the view's pooled bounce buffer, leaves that buffer cleared, and
// that an aligned read, which decrypts in the caller's buffer, leaves it
// alone (it holds nothing to clear).
func TestViewBounceCleared(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: the pool hands back what was put
	r := rand.New(rand.NewPCG(5, 6))
	plain := randomBytes(r, 1<<20)
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	rv := v.(*rawView)
	// Control: a buffer marked as holding no plaintext comes back as it
	// went in. Without that the pool is not reusing buffers here and the
	// test below would prove nothing.
	mark := rv.bufs.get()
	mark.b[0] = 0xAA
	rv.bufs.put(mark)
	if bb := rv.bufs.get(); bb != mark || bb.b[0] != 0xAA {
		t.Skip("sync.Pool did not hand back the buffer just put")
	} else {
		bb.b[0] = 0
		rv.bufs.put(bb)
	}
	got := make([]byte, 3000)
	if _, err := v.ReadAt(got, 100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, plain[100:3100]) {
		t.Fatal("unaligned read differs from the plaintext")
	}
	bb := rv.bufs.get()
	if bb != mark {
		t.Skip("sync.Pool did not hand back the read's buffer")
	}
	if i := bytes.IndexFunc(bb.b, func(c rune) bool { return c != 0 }); i >= 0 || bb.plain {
		t.Fatalf("bounce buffer holds data at %d after an unaligned read (plain=%v)", i, bb.plain)
	}
	rv.bufs.put(bb)
}
