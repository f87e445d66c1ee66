package qcow2

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// writeRandomImage builds an image at path with Writer: the guest clusters
// are cut into runs that are left unmapped, zeroed with SetZero, or
// allocated (in shuffled guest order) and filled with random bytes. It
// returns the expected guest view.
func writeRandomImage(t testing.TB, path string, size int64, o CreateOptions, seed uint64) ([]byte, *Writer) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := Create(f, size, o)
	if err != nil {
		t.Fatal(err)
	}
	cs := w.ClusterSize()
	rng := rand.New(rand.NewPCG(seed, 7))
	type run struct {
		off, n int64
		kind   int
	}
	var runs []run
	maxRun := max(2, min(40, size/cs/8))
	for g := int64(0); g < size; {
		n := min(size-g, cs*(1+rng.Int64N(maxRun)))
		runs = append(runs, run{g, n, rng.IntN(3)})
		g += n
	}
	rng.Shuffle(len(runs), func(i, j int) { runs[i], runs[j] = runs[j], runs[i] })
	want := make([]byte, size)
	for _, r := range runs {
		switch r.kind {
		case 1:
			if err := w.SetZero(r.off, r.n); err != nil {
				t.Fatal(err)
			}
		case 2:
			host, err := w.AllocateData(r.off, r.n)
			if err != nil {
				t.Fatal(err)
			}
			b := want[r.off : r.off+r.n]
			for i := range b {
				b[i] = byte(rng.Uint32() | 1)
			}
			if _, err := f.WriteAt(b, host); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return want, w
}

// TestWriterVsQemu writes random images with several cluster sizes and
// checks that qemu-img check is clean and qemu-img convert -O raw (and this
// package's reader) return exactly what was written.
func TestWriterVsQemu(t *testing.T) {
	needQemu(t)
	for i, c := range []struct {
		cs, size int64
	}{
		{512, 3<<20 + 512},
		{4 << 10, 20<<20 + 1536},
		{64 << 10, 24<<20 + 4096},
		{0, 16 << 20}, // default 64 KiB
		{2 << 20, 21<<20 + 512},
	} {
		t.Run(strconv.FormatInt(c.cs, 10), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "w.qcow2")
			want, _ := writeRandomImage(t, path, c.size, CreateOptions{ClusterSize: c.cs}, uint64(i))
			qemuCheck(t, path)
			if got := qemuRaw(t, path); !bytes.Equal(got, want) {
				t.Fatalf("qemu-img convert differs from the written data: %s", firstDiff(got, want))
			}
			im, exts, got := guestView(t, path)
			if !bytes.Equal(got, want) {
				t.Fatalf("guest view differs from the written data: %s", firstDiff(got, want))
			}
			st, _ := os.Stat(path)
			if st.Size()%im.ClusterSize != 0 {
				t.Errorf("file size %d not a multiple of the cluster size", st.Size())
			}
			t.Logf("%d extents, file %d bytes", len(exts), st.Size())
		})
	}
}

// TestWriterCrypt reserves a LUKS area: the reader finds it through the FDE
// extension, and data extents stay clear of it.
func TestWriterCrypt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.qcow2")
	want, w := writeRandomImage(t, path, 8<<20, CreateOptions{CryptLength: 1052672}, 3)
	im, exts, got := guestView(t, path)
	if !bytes.Equal(got, want) {
		t.Fatalf("guest view differs: %s", firstDiff(got, want))
	}
	if im.CryptMethod != CryptLUKS || im.CryptOffset != w.CryptOffset() || im.CryptOffset != 64<<10 || im.CryptLength != 1052672 {
		t.Fatalf("crypt %d at %#x+%d, writer said %#x", im.CryptMethod, im.CryptOffset, im.CryptLength, w.CryptOffset())
	}
	areaEnd := im.CryptOffset + 17*im.ClusterSize
	for _, e := range exts {
		if e.Kind == Data && e.HostOffset < areaEnd && e.HostOffset+e.Length > im.CryptOffset {
			t.Fatalf("data %+v overlaps the LUKS area", e)
		}
	}
	// The area is zero-filled until the caller writes the LUKS header.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw[im.CryptOffset:areaEnd], make([]byte, areaEnd-im.CryptOffset)) {
		t.Fatal("LUKS area not zero-filled")
	}
}

// TestWriterCryptQemu puts a real LUKS header made by qemu into a Writer
// image's LUKS area; qemu-img check (which needs the key, so it parses the
// header) must find the layout clean: the LUKS clusters are refcounted and
// the extension is right. The data is not encrypted: check does not read it.
func TestWriterCryptQemu(t *testing.T) {
	needQemu(t)
	dir := t.TempDir()
	ref := qemuLUKSImage(t)
	refIm, _, _ := guestView(t, ref)
	refRaw, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	blob := refRaw[refIm.CryptOffset : refIm.CryptOffset+refIm.CryptLength]

	for _, cs := range []int64{4 << 10, 64 << 10} {
		path := filepath.Join(dir, "w"+strconv.FormatInt(cs, 10)+".qcow2")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w, err := Create(f, 8<<20, CreateOptions{ClusterSize: cs, CryptLength: int64(len(blob))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(blob, w.CryptOffset()); err != nil {
			t.Fatal(err)
		}
		for _, g := range []int64{0, 1 << 20, 5 << 20} {
			host, err := w.AllocateData(g, 256<<10)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 256<<10), host); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.SetZero(2<<20, 64<<10); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		f.Close()
		qemuCheck(t, testSecret, "--image-opts", "driver=qcow2,encrypt.key-secret=sec0,file.filename="+path)
		out := runCmd(t, "qemu-img", "info", path)
		if !bytes.Contains(out, []byte("encrypted: yes")) || !bytes.Contains(out, []byte("cipher mode: cbc")) {
			t.Fatalf("qemu-img info does not show the LUKS header:\n%s", out)
		}
	}
}

// TestWriterHugeSparse writes a 1 TiB virtual image with 80 MiB of data in
// four extents: Close must be fast, the file small, qemu-img check clean.
func TestWriterHugeSparse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.qcow2")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const tib = int64(1) << 40
	w, err := Create(f, tib, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type ext struct{ guest, host int64 }
	var exts []ext
	for _, g := range []int64{0, 300 << 30, 700 << 30, tib - 20<<20} {
		host, err := w.AllocateData(g, 20<<20)
		if err != nil {
			t.Fatal(err)
		}
		// Mark the first and last sector; the rest stays a hole.
		for _, o := range []int64{0, 20<<20 - 512} {
			if _, err := f.WriteAt(bytes.Repeat([]byte{byte(len(exts) + 1)}, 512), host+o); err != nil {
				t.Fatal(err)
			}
		}
		exts = append(exts, ext{g, host})
	}
	start := time.Now()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	st, _ := f.Stat()
	t.Logf("1 TiB / 80 MiB: Close %v, file %d bytes (%d bytes metadata)", elapsed, st.Size(), st.Size()-80<<20-64<<10)
	if elapsed > 300*time.Millisecond {
		t.Errorf("Close took %v", elapsed)
	}
	if st.Size() > 81<<20 {
		t.Errorf("file is %d bytes", st.Size())
	}
	im, err := Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	got, err := im.Extents(f)
	if err != nil {
		t.Fatal(err)
	}
	var data []Extent
	for _, e := range got {
		if e.Kind == Data {
			data = append(data, e)
		}
	}
	if len(data) != len(exts) {
		t.Fatalf("data extents %+v", data)
	}
	for i, e := range exts {
		if data[i].GuestOffset != e.guest || data[i].HostOffset != e.host || data[i].Length != 20<<20 {
			t.Fatalf("data extent %d = %+v, want guest %#x host %#x", i, data[i], e.guest, e.host)
		}
	}
	if _, err := exec.LookPath("qemu-img"); err == nil || peer.InCI() {
		needQemu(t)
		qemuCheck(t, path)
	}
}

// TestWriterMisuse covers argument checks.
func TestWriterMisuse(t *testing.T) {
	var buf memFile
	for _, o := range []CreateOptions{{ClusterSize: 256}, {ClusterSize: 4 << 20}, {ClusterSize: 3000}, {CryptLength: -1}} {
		if _, err := Create(&buf, 1<<20, o); err == nil {
			t.Errorf("Create accepted %+v", o)
		}
	}
	if _, err := Create(&buf, 1000, CreateOptions{}); err == nil {
		t.Error("Create accepted a size that is not a multiple of 512")
	}
	w, err := Create(&buf, 1<<20+512, CreateOptions{ClusterSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{512, 4096}, {0, 1000}, {0, 0}, {-4096, 4096}, {1 << 20, 4096}, {1<<20 + 4096, 512}} {
		if _, err := w.AllocateData(r[0], r[1]); err == nil {
			t.Errorf("AllocateData(%#x, %#x) accepted", r[0], r[1])
		}
	}
	if _, err := w.AllocateData(1<<20, 512); err != nil { // the partial last cluster
		t.Errorf("AllocateData of the tail: %v", err)
	}
	if _, err := w.AllocateData(0, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := w.AllocateData(4096, 4096); err == nil {
		t.Error("AllocateData remapped a cluster")
	}
	if err := w.SetZero(0, 4096); err == nil {
		t.Error("SetZero over data accepted")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	if _, err := w.AllocateData(8192, 4096); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocateData after Close: %v", err)
	}
	if _, _, _, err := readGuest(&buf, int64(len(buf.b))); err != nil {
		t.Fatal(err)
	}
}

// memFile is an in-memory io.ReaderAt and io.WriterAt.
type memFile struct{ b []byte }

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, errors.New("read beyond end")
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, errors.New("short read")
	}
	return n, nil
}
