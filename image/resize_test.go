package image

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/vectors/peer"
)

// resizeCase is an image kind resize handles differently.
type resizeCase struct {
	name    string
	p       header.Params
	format  Format
	cluster int64
	fixed   bool // LUKS2: make the data segment's size fixed
}

var resizeCases = []resizeCase{
	{name: "luks1", p: header.Params{}},
	{name: "luks2-dynamic", p: header.Params{Version: 2}},
	{name: "luks2-fixed", p: header.Params{Version: 2}, fixed: true},
	{name: "luks2-fixed-512", p: header.Params{Version: 2, SectorSize: 512}, fixed: true},
	{name: "qcow2", format: Qcow2},
	{name: "qcow2-512", format: Qcow2, cluster: 512}, // one L1 cluster maps 2 MiB
}

// newResizable makes an image of c's kind holding plain (its size) and
// returns its path.
func newResizable(t *testing.T, c resizeCase, plain []byte) string {
	t.Helper()
	f := newCreateFile(t, c.name)
	o := createOpts(c.p)
	o.Format, o.ClusterSize = c.format, c.cluster
	if _, err := Create(context.Background(), f, int64(len(plain)), o); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.fixed {
		if err := e.Apply(e.Header.(*header.LUKS2).WithDataSize(int64(len(plain)))); err != nil {
			t.Fatal(err)
		}
	}
	writePlain(t, f, e, plain, 0)
	return f.Name()
}

// writePlain writes b at off through a writable view of the image in f.
func writePlain(t *testing.T, f *os.File, e *Encrypted, b []byte, off int64) {
	t.Helper()
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}

// readPlain opens the image at path and returns its size and plaintext.
func readPlain(t *testing.T, path string) (*Encrypted, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	b := make([]byte, v.Size())
	if _, err := v.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return e, b
}

func openRW(t *testing.T, path string) (*os.File, *Encrypted) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, e
}

func resizeTo(t *testing.T, path string, size int64, o ResizeOptions) ResizeResult {
	t.Helper()
	_, e := openRW(t, path)
	r, err := e.Resize(size, o)
	if err != nil {
		t.Fatalf("resize to %d: %v", size, err)
	}
	if e.PayloadSize != size {
		t.Fatalf("resized to %d: the image says %d", size, e.PayloadSize)
	}
	return r
}

// TestResize grows every kind of image (the data stays; what is written
// after the old end reads back, and reads as zeros in qcow2 before), shrinks
// it back only when told, and checks the fixed LUKS2 segment size.
func TestResize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range resizeCases {
		t.Run(c.name, func(t *testing.T) {
			const old, grown = 1 << 20, 3<<20 + 64<<10
			plain := testPlain(rng, old)
			path := newResizable(t, c, plain)

			r := resizeTo(t, path, grown, ResizeOptions{})
			if r.OldSize != old || r.NewSize != grown || r.Format != formatOr(c.format) || r.FixedSegment != c.fixed || !r.Changed() {
				t.Errorf("result %+v", r)
			}
			e, got := readPlain(t, path)
			if !bytes.Equal(got[:old], plain) {
				t.Fatal("the old data changed")
			}
			if c.format == Qcow2 && !bytes.Equal(got[old:], make([]byte, grown-old)) {
				t.Error("the grown qcow2 range does not read as zeros")
			}
			if fixed := e.Header.Info().PayloadSize; c.fixed && fixed != grown {
				t.Errorf("segment size %d, want %d", fixed, grown)
			}
			after := testPlain(rng, grown-old+512)
			f, e := openRW(t, path)
			writePlain(t, f, e, after, old-512)
			if _, got = readPlain(t, path); !bytes.Equal(got[:old-512], plain[:old-512]) || !bytes.Equal(got[old-512:], after) {
				t.Fatal("data written after growing does not read back")
			}

			// Same size: nothing happens.
			before, _ := os.ReadFile(path)
			if r := resizeTo(t, path, grown, ResizeOptions{}); r.Changed() {
				t.Errorf("same size: %+v", r)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(before, now) {
				t.Error("a resize to the same size changed the file")
			}

			// Shrinking needs Shrink, and qcow2 data past the end DataLoss.
			_, e = openRW(t, path)
			if _, err := e.Resize(old, ResizeOptions{}); !errors.Is(err, ErrShrink) {
				t.Fatalf("shrink without Shrink: %v", err)
			}
			if _, err := e.Resize(old, ResizeOptions{Shrink: true}); c.format == Qcow2 && !errors.Is(err, ErrDataLoss) {
				t.Fatalf("qcow2 shrink over data without DataLoss: %v", err)
			} else if c.format != Qcow2 && err != nil {
				t.Fatal(err)
			}
			resizeTo(t, path, old, ResizeOptions{Shrink: true, DataLoss: true})
			e, got = readPlain(t, path)
			if int64(len(got)) != old || !bytes.Equal(got[:old-512], plain[:old-512]) || !bytes.Equal(got[old-512:], after[:512]) {
				t.Fatal("shrunk image: wrong data")
			}
			if fixed := e.Header.Info().PayloadSize; c.fixed && fixed != old {
				t.Errorf("segment size %d after shrinking, want %d", fixed, old)
			}
			if st, _ := os.Stat(path); c.format == Raw && st.Size() != e.PayloadOffset+old {
				t.Errorf("raw file of %d bytes after shrinking, want %d", st.Size(), e.PayloadOffset+old)
			}
			if c.format == Qcow2 {
				// Grown again, the dropped clusters do not come back.
				resizeTo(t, path, grown, ResizeOptions{})
				if _, got = readPlain(t, path); !bytes.Equal(got[old:], make([]byte, grown-old)) {
					t.Error("data dropped by the shrink is back after growing again")
				}
			}
		})
	}
}

func formatOr(f Format) Format {
	if f == "" {
		return Raw
	}
	return f
}

// TestResizeQcow2Tail: growing a qcow2 image whose old size ends inside a
// stored cluster needs the key, and the rest of that cluster then reads as
// zeros; an image whose end is unallocated needs none.
func TestResizeQcow2Tail(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	c := resizeCase{name: "tail", format: Qcow2}
	const old = 1<<20 + 4096 // the last 64 KiB cluster is cut after 4 KiB
	plain := testPlain(rng, old)
	copy(plain[old-4096:], bytes.Repeat([]byte{0xa5}, 4096))
	path := newResizable(t, c, plain)
	// The cluster's host bytes past the old end, garbage to begin with.
	f, e := openRW(t, path)
	if _, err := e.Resize(2<<20, ResizeOptions{}); !errors.Is(err, ErrKeyNeeded) {
		t.Fatalf("without the key: %v", err)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	if _, err := e.Resize(2<<20, ResizeOptions{Key: k}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, got := readPlain(t, path)
	if !bytes.Equal(got[:old], plain) || !bytes.Equal(got[old:], make([]byte, 2<<20-old)) {
		t.Fatal("after growing: the old data changed or the new range is not zeros")
	}

	// A shrink that cuts a cluster keeps its tail on the host; growing again
	// zeroes it.
	resizeTo(t, path, old-2048, ResizeOptions{Shrink: true, DataLoss: true})
	f, e = openRW(t, path)
	if _, err := e.Resize(old, ResizeOptions{Key: k}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, got = readPlain(t, path); !bytes.Equal(got[:old-2048], plain[:old-2048]) || !bytes.Equal(got[old-2048:], make([]byte, 2048)) {
		t.Fatal("the tail cut by the shrink is not zeros after growing again")
	}

	// The end in an unallocated cluster: no key needed.
	empty := newCreateFile(t, "empty")
	if _, err := Create(context.Background(), empty, old, EncryptOptions{Header: createOpts(header.Params{}).Header, Passphrase: testPass, Format: Qcow2}); err != nil {
		t.Fatal(err)
	}
	resizeTo(t, empty.Name(), 2<<20, ResizeOptions{})
}

// TestResizeRefusals: sizes that are not whole sectors, images with
// integrity, and a too large qcow2 are refused before anything is written.
func TestResizeRefusals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	path := newResizable(t, resizeCase{name: "luks2", p: header.Params{Version: 2}}, testPlain(rng, 1<<20))
	before, _ := os.ReadFile(path)
	_, e := openRW(t, path)
	for _, size := range []int64{0, -4096, 1<<20 + 512} {
		if _, err := e.Resize(size, ResizeOptions{Shrink: true}); !errors.Is(err, ErrEmptySize) && !errors.Is(err, ErrUnaligned) {
			t.Errorf("size %d: %v", size, err)
		}
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(before, now) {
		t.Error("a refused resize changed the file")
	}

	f := newCreateFile(t, "integrity")
	if _, err := Create(context.Background(), f, 1<<20, createOpts(header.Params{Version: 2, Integrity: "hmac(sha256)"})); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Resize(2<<20, ResizeOptions{}); !errors.Is(err, ErrAuthenticatedUnsupported) {
		t.Errorf("integrity: %v", err)
	}

	q := newResizable(t, resizeCase{name: "qcow2", format: Qcow2, cluster: 512}, testPlain(rng, 64<<10))
	_, e = openRW(t, q)
	if _, err := e.Resize(1<<40, ResizeOptions{}); !errors.Is(err, qcow2.ErrUnsupported) {
		t.Errorf("qcow2 beyond qemu's L1 limit: %v", err)
	}
}

// TestResizeDetached: the data file grows, the fixed segment's size goes to
// the header file.
func TestResizeDetached(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	data, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer data.Close()
	hdr, err := os.Create(filepath.Join(dir, "hdr"))
	if err != nil {
		t.Fatal(err)
	}
	defer hdr.Close()
	o := createOpts(header.Params{Version: 2})
	o.HeaderFile = hdr
	if _, err := Create(context.Background(), data, 1<<20, o); err != nil {
		t.Fatal(err)
	}
	e, err := OpenDetached(hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(e.Header.(*header.LUKS2).WithDataSize(1 << 20)); err != nil {
		t.Fatal(err)
	}
	plain := testPlain(rng, 2<<20)
	writePlain(t, data, e, plain[:1<<20], 0)
	if _, err := e.Resize(2<<20, ResizeOptions{}); err != nil {
		t.Fatal(err)
	}
	writePlain(t, data, e, plain[1<<20:], 1<<20)
	e, err = OpenDetached(hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := data.Stat(); st.Size() != 2<<20 || e.PayloadSize != 2<<20 || e.Header.Info().PayloadSize != 2<<20 {
		t.Fatalf("data file %d bytes, payload %d, segment %d", st.Size(), e.PayloadSize, e.Header.Info().PayloadSize)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(data, k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, 2<<20)
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("detached image after growing: %v", err)
	}
}

// openFault opens the image held by ff as Open would open its file.
func openFault(t *testing.T, ff *faultFile, format Format) *Encrypted {
	t.Helper()
	e, err := openImage(namedFault{ff}, int64(len(ff.cur)))
	if err != nil {
		t.Fatal(err)
	}
	if e.Format != format {
		t.Fatalf("opened a %s image as %s", format, e.Format)
	}
	return e
}

// TestResizePowerLoss cuts the power before every write, truncate and sync
// of a resize, with unsynced writes lost or torn at 512 bytes: the image
// then opens at the old or the new size and holds the old data; a grown
// qcow2 range reads as zeros.
func TestResizePowerLoss(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		resizeCase
		from, to int64
	}{
		{resizeCase{name: "luks2-fixed-grow", p: header.Params{Version: 2}, fixed: true}, 1 << 20, 2 << 20},
		{resizeCase{name: "luks2-fixed-shrink", p: header.Params{Version: 2}, fixed: true}, 2 << 20, 1 << 20},
		{resizeCase{name: "luks1-grow", p: header.Params{}}, 1 << 20, 2 << 20},
		{resizeCase{name: "luks1-shrink", p: header.Params{}}, 2 << 20, 1 << 20},
		{resizeCase{name: "qcow2-l1-grow", format: Qcow2, cluster: 512}, 1 << 20, 5 << 20},
		{resizeCase{name: "qcow2-tail-grow", format: Qcow2}, 1<<20 + 4096, 2 << 20},
		{resizeCase{name: "qcow2-shrink", format: Qcow2, cluster: 512}, 1 << 20, 1<<20 - 40<<10},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := testPlain(rng, int(c.from))
			path := newResizable(t, c.resizeCase, plain)
			content, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			format := formatOr(c.format)
			check := func(what string, img []byte) int64 {
				t.Helper()
				p := filepath.Join(t.TempDir(), "img")
				if err := os.WriteFile(p, img, 0o600); err != nil {
					t.Fatal(err)
				}
				_, got := readPlain(t, p)
				n := int64(len(got))
				if format == Qcow2 {
					qemuCheckLeaksOnly(t, p)
				}
				keep := min(c.from, c.to)
				switch {
				case n != c.from && n != c.to:
					t.Fatalf("%s: size %d, want %d or %d", what, n, c.from, c.to)
				case !bytes.Equal(got[:keep], plain[:keep]):
					t.Fatalf("%s: the data changed", what)
				case format == Qcow2 && n > c.from && !bytes.Equal(got[c.from:], make([]byte, n-c.from)):
					t.Fatalf("%s: the grown range is not zeros", what)
				}
				return n
			}
			seen := map[int64]int{}
			step := 1
			if raceEnabled {
				step = 5 // the race run looks for data races, not every crash state
			}
			for cut := 1; ; cut += step {
				d := newFaultDisk(uint64(cut))
				d.atom, d.crashAt = 512, cut
				ff := d.add("img", content)
				e := openFault(t, ff, format)
				o := ResizeOptions{Shrink: true, DataLoss: true}
				if c.name == "qcow2-tail-grow" {
					if o.Key, err = e.Unlock(testPass, -1); err != nil {
						t.Fatal(err)
					}
				}
				_, err := e.Resize(c.to, o)
				if err == nil {
					if n := check("finished", ff.cur); n != c.to {
						t.Fatalf("finished: size %d", n)
					}
					t.Logf("%d crash points; sizes after a crash: %v", cut-1, seen)
					break
				}
				if !errors.Is(err, errCrash) {
					t.Fatalf("cut %d: %v", cut, err)
				}
				d.crash()
				seen[check("crash", ff.durable)]++
			}
			// A one-step resize, or a last step whose write the random
			// loss dropped, may never leave the new size.
			if step == 1 && seen[c.to] == 0 && len(seen) > 0 && c.name != "luks1-grow" && c.name != "luks1-shrink" && c.name != "qcow2-tail-grow" {
				t.Errorf("no crash left the new size: %v", seen)
			}
		})
	}
}

// qemuCheckLeaksOnly runs qemu-img check on the qcow2+LUKS image at path,
// when qemu-img is there (in CI it must be): clean or leaked clusters only
// (exit 0 or 3), never corruption.
func qemuCheckLeaksOnly(t *testing.T, path string) {
	t.Helper()
	qi, err := exec.LookPath("qemu-img")
	if err != nil {
		if peer.InCI() {
			t.Fatal("qemu-img is missing")
		}
		return
	}
	key := filepath.Join(filepath.Dir(path), "qemu.key")
	if err := os.WriteFile(key, testPass, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(qi, "check", "--object", "secret,id=sec0,file="+key, "--image-opts",
		"driver=qcow2,encrypt.key-secret=sec0,file.filename="+path).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) {
		t.Fatalf("qemu-img check after a crash: %v\n%s", err, out)
	}
}
