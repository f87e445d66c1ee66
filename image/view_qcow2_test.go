package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/vectors/peer"
)

const qcowPass = "qcow2 view test"

// needQemuTools skips without qemu-img/qemu-io, except in CI where their
// absence fails the test.
func needQemuTools(t *testing.T) {
	t.Helper()
	peer.Require(t, "qemu-img", "qemu-io")
}

func qemuSecret() string { return "secret,id=sec0,data=" + qcowPass }

func qemuOpts(path string) string {
	return "driver=qcow2,encrypt.key-secret=sec0,file.filename=" + path
}

// qemuRun runs a qemu tool, retrying the spurious PBKDF benchmark failure
// of Debian's qemu 7.2 when creating LUKS headers.
func qemuRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	var out []byte
	var err error
	for i := range 10 {
		out, err = exec.Command(name, args...).CombinedOutput()
		if err == nil && !bytes.Contains(out, []byte("failed")) {
			return string(out)
		}
		if !bytes.Contains(out, []byte("accurate CPU usage")) {
			break
		}
		// The failures come in bursts on a busy machine: back off.
		time.Sleep(time.Duration(i+1) * 100 * time.Millisecond)
	}
	t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	return ""
}

// qemuCheckClean fails unless qemu-img check finds no errors and no leaks.
func qemuCheckClean(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("qemu-img", "check", "--object", qemuSecret(), "--image-opts", qemuOpts(path)).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("No errors were found")) {
		t.Fatalf("qemu-img check: %v\n%s", err, out)
	}
}

// qemuPlain returns the plaintext of an encrypted qcow2 image as qemu sees it.
func qemuPlain(t *testing.T, path string) []byte {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "qemu.raw")
	qemuRun(t, "qemu-img", "convert", "--object", qemuSecret(), "--image-opts", qemuOpts(path), "-O", "raw", raw)
	b, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// qemuCreate makes an empty qcow2+LUKS image (aes-256-cbc-essiv:sha256,
// the test passphrase) of size bytes with qemu-img, with the extra qcow2
// options opts.
func qemuCreate(t *testing.T, path, opts string, size int64) {
	t.Helper()
	qemuRun(t, "qemu-img", "create", "--object", qemuSecret(), "-f", "qcow2", "-o",
		opts+",encrypt.format=luks,encrypt.key-secret=sec0,encrypt.cipher-alg=aes-256,encrypt.cipher-mode=cbc,"+
			"encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha256,encrypt.iter-time=10",
		path, fmt.Sprint(size))
}

// qemuImage makes a qcow2+LUKS image with qemu and fills it with data,
// zero and compressed clusters, returning its path and plaintext model.
func qemuImage(t *testing.T, version int, cs int64) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "qemu.qcow2")
	size := 16*cs + 3*512
	compat := "1.1"
	if version == 2 {
		compat = "0.10"
	}
	qemuCreate(t, path, fmt.Sprintf("compat=%s,cluster_size=%d", compat, cs), size)
	model := make([]byte, size)
	var cmds []string
	fill := func(pat byte, off, n int64) {
		cmds = append(cmds, "-c", fmt.Sprintf("write -P %d %d %d", pat, off, n))
		for i := off; i < off+n; i++ {
			model[i] = pat
		}
	}
	fill(0xab, 0, 2*cs)          // data
	fill(0x5c, 5*cs, cs)         // data, then zeroed below (zero flag with a host cluster on v3)
	fill(0x11, 13*cs+1024, 3072) // partial cluster
	cmds = append(cmds, "-c", fmt.Sprintf("write -z %d %d", 5*cs, cs), "-c", fmt.Sprintf("write -z %d %d", 8*cs, cs))
	clear(model[5*cs : 6*cs])
	for _, c := range []int64{10, 11} { // compressed, plaintext deflate
		cmds = append(cmds, "-c", fmt.Sprintf("write -c -P %d %d %d", 0x30+c, c*cs, cs))
		for i := c * cs; i < (c+1)*cs; i++ {
			model[i] = byte(0x30 + c)
		}
	}
	qemuRun(t, "qemu-io", append([]string{"--object", qemuSecret(), "--image-opts", qemuOpts(path)}, cmds...)...)
	if got := qemuPlain(t, path); !bytes.Equal(got, model) {
		t.Fatal("qemu-made image does not match its model")
	}
	return path, model
}

// unlockQcow opens the image at path read-write and unlocks it with the
// test passphrase.
func unlockQcow(t *testing.T, path string) (*os.File, *Encrypted, *Key) {
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
	k, err := e.Unlock([]byte(qcowPass), -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Clear)
	return f, e, k
}

// openQcowView opens path's plaintext view.
func openQcowView(t *testing.T, path string, readOnly bool) (*os.File, View) {
	t.Helper()
	f, e, k := unlockQcow(t, path)
	v, err := e.View(f, k, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	return f, v
}

// readsModel fails t unless a whole-image read through v gives model.
func readsModel(t *testing.T, v View, model []byte, what string) {
	t.Helper()
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if i := firstDifference(got, model); i >= 0 {
		t.Fatalf("%s differs from qemu's plaintext at byte %d", what, i)
	}
}

// exerciseView runs concurrent random unaligned writes and reads against
// the view and the model: each goroutine owns every G-th 700-byte chunk, so
// chunks of different goroutines share sectors and clusters (concurrent
// read-modify-writes and allocations of one cluster) while every byte has
// one writer. A quarter of the writes are zeros, which the view does not
// store over clusters that read as zeros. Then single-threaded large
// writes span clusters.
func exerciseView(t *testing.T, v View, model []byte, seed uint64) {
	t.Helper()
	const chunk, workers = 700, 4
	size := int64(len(model))
	if v.Size() != size {
		t.Fatalf("Size %d, want %d", v.Size(), size)
	}
	chunks := size / chunk
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for range 150 {
				c := rng.Int64N(chunks/workers)*workers + int64(w)
				lo := c*chunk + rng.Int64N(chunk)
				hi := lo + 1 + rng.Int64N((c+1)*chunk-lo)
				if rng.IntN(3) == 0 {
					got := make([]byte, hi-lo)
					if _, err := v.ReadAt(got, lo); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(got, model[lo:hi]) {
						errs <- fmt.Errorf("read %d..%d differs from the model", lo, hi)
						return
					}
					continue
				}
				b := make([]byte, hi-lo)
				if rng.IntN(4) > 0 { // else zeros, which may need no storing
					for i := range b {
						b[i] = byte(rng.Uint32())
					}
				}
				if _, err := v.WriteAt(b, lo); err != nil {
					errs <- err
					return
				}
				copy(model[lo:hi], b)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	for range 6 {
		lo := rng.Int64N(size)
		n := min(size-lo, 1+rng.Int64N(3<<20))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if _, err := v.WriteAt(b, lo); err != nil {
			t.Fatal(err)
		}
		copy(model[lo:], b)
	}
	got := make([]byte, size)
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, model) {
		t.Fatal("full read differs from the model")
	}
}

func TestQcowViewQemuImages(t *testing.T) {
	needQemuTools(t)
	for _, tc := range []struct {
		version int
		cs      int64
	}{{3, 4 << 10}, {2, 4 << 10}, {3, 64 << 10}, {2, 64 << 10}, {3, 2 << 20}} {
		t.Run(fmt.Sprintf("v%d-%dk", tc.version, tc.cs>>10), func(t *testing.T) {
			path, model := qemuImage(t, tc.version, tc.cs)
			_, v := openQcowView(t, path, false)
			readsModel(t, v, model, "view of the qemu image")
			exerciseView(t, v, model, uint64(tc.cs)+uint64(tc.version))
			// A synced view is consistent on disk while still open.
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			qemuCheckClean(t, path)
			if _, err := v.WriteAt([]byte("after sync"), int64(len(model))-10); err != nil {
				t.Fatal(err)
			}
			copy(model[len(model)-10:], "after sync")
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			qemuCheckClean(t, path)
			if !bytes.Equal(qemuPlain(t, path), model) {
				t.Fatal("qemu's plaintext differs from the model after the writes")
			}
			// Reopened, the view reads what it wrote.
			_, v2 := openQcowView(t, path, true)
			readsModel(t, v2, model, "reopened view")
			if _, err := v2.WriteAt([]byte{1}, 0); !errors.Is(err, ErrReadOnly) {
				t.Fatalf("write to a read-only view: %v", err)
			}
			v2.Close()
		})
	}
}

func TestQcowViewCryptimgImage(t *testing.T) {
	needQemuTools(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 5))
	plain := make([]byte, 3<<20)
	for i := range 1 << 20 { // first MiB data, the rest unallocated
		plain[i] = byte(rng.Uint32())
	}
	src := filepath.Join(dir, "plain.raw")
	if err := os.WriteFile(src, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pl, err := OpenPlain(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "enc.qcow2")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Encrypt(context.Background(), out, pl, EncryptOptions{
		Header: header.Params{ForceIterations: 1000}, Passphrase: []byte(qcowPass), Format: Qcow2, ClusterSize: 16 << 10,
	}); err != nil {
		t.Fatal(err)
	}
	out.Close()
	_, v := openQcowView(t, path, false)
	exerciseView(t, v, plain, 7)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	qemuCheckClean(t, path)
	if !bytes.Equal(qemuPlain(t, path), plain) {
		t.Fatal("qemu's plaintext differs from the model")
	}
}

// TestQcowViewUnsyncedIsConsistent checks that a crash before Sync leaves an image
// qemu reads without garbage: no L2 entry may point at unwritten clusters.
func TestQcowViewUnsyncedIsConsistent(t *testing.T) {
	needQemuTools(t)
	path, model := qemuImage(t, 3, 64<<10)
	_, v := openQcowView(t, path, false)
	// Only clusters that need allocation: compressed, zero with a host
	// cluster, unallocated (in-place writes reach the file at once).
	for _, c := range []int64{10, 5, 14, 15} {
		if _, err := v.WriteAt(bytes.Repeat([]byte{7}, 1000), c*64<<10+300); err != nil {
			t.Fatal(err)
		}
	}
	// Without Sync, the new mappings are not on disk yet: qemu sees the old
	// plaintext, and at worst leaked clusters (exit 3), never corruption.
	out, err := exec.Command("qemu-img", "check", "--object", qemuSecret(), "--image-opts", qemuOpts(path)).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) {
		t.Fatalf("qemu-img check before Sync: %v\n%s", err, out)
	}
	if !bytes.Equal(qemuPlain(t, path), model) {
		t.Fatal("unsynced allocations changed what qemu reads")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	qemuCheckClean(t, path)
}

// TestQcowViewExtendedL2 reads and writes extended L2 images made by qemu,
// with clusters of every state: some subclusters allocated, some zero,
// whole data clusters, compressed, unallocated. A cluster is written in
// place only once all of its subclusters are allocated; the others are
// reallocated whole. Concurrent writers to different parts of one cluster
// must not lose each other's data, and qemu must read the model and find
// no errors or leaks.
func TestQcowViewExtendedL2(t *testing.T) {
	needQemuTools(t)
	for _, cs := range []int64{16 << 10, 64 << 10} {
		t.Run(fmt.Sprintf("%dk", cs>>10), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ext.qcow2")
			size := 16*cs + 1536 // the last cluster is partial
			qemuCreate(t, path, fmt.Sprintf("extended_l2=on,cluster_size=%d", cs), size)
			sc := cs / 32
			qemuRun(t, "qemu-io", "--object", qemuSecret(), "--image-opts", qemuOpts(path),
				"-c", fmt.Sprintf("write -P 0x42 %d %d", sc, sc), // cluster 0: one subcluster
				"-c", fmt.Sprintf("write -z %d %d", 4*sc, sc), // and one zero subcluster
				"-c", fmt.Sprintf("write -P 0x17 %d %d", cs, cs), // cluster 1: whole
				"-c", fmt.Sprintf("write -c -P 0x33 %d %d", 3*cs, cs), // cluster 3: compressed
				"-c", fmt.Sprintf("write -P 0x99 %d %d", 4*cs+300, 3*sc), // cluster 4: partial subclusters
				"-c", fmt.Sprintf("write -P 0x55 %d %d", 16*cs, 512)) // the partial last cluster
			model := qemuPlain(t, path)
			_, v := openQcowView(t, path, false)
			readsModel(t, v, model, "extended L2 view")
			exerciseView(t, v, model, uint64(cs))
			if err := v.Sync(); err != nil {
				t.Fatal(err)
			}
			qemuCheckClean(t, path)
			// Cluster 1 is fully allocated and written in place; the
			// last one was reallocated whole by now or is here.
			for _, off := range []int64{cs + 100, 16*cs + 1000, 9 * cs} {
				if _, err := v.WriteAt([]byte("after sync"), off); err != nil {
					t.Fatal(err)
				}
				copy(model[off:], "after sync")
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			qemuCheckClean(t, path)
			if i := firstDifference(qemuPlain(t, path), model); i >= 0 {
				t.Fatalf("qemu's plaintext differs from the model at byte %d", i)
			}
		})
	}
}

// TestQcowViewZeroWritesStaySparse writes zeros through the view: over
// clusters that already read as zeros (unallocated, zero flag with and
// without a host cluster) they must allocate nothing, while over data and
// compressed clusters, and when any byte is not zero, they must be stored.
// qemu must read the result as the model says.
func TestQcowViewZeroWritesStaySparse(t *testing.T) {
	needQemuTools(t)
	const cs = 64 << 10
	path, model := qemuImage(t, 3, cs)
	f, v := openQcowView(t, path, false)
	size := func() int64 {
		t.Helper()
		if err := v.(interface{ Sync() error }).Sync(); err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	write := func(b []byte, off int64) {
		t.Helper()
		if n, err := v.WriteAt(b, off); n != len(b) || err != nil {
			t.Fatalf("WriteAt(%d bytes at %d) = %d, %v", len(b), off, n, err)
		}
		copy(model[off:], b)
	}
	size0 := size()
	write(make([]byte, 3*cs), 2*cs)                             // unallocated 2-4
	write(make([]byte, cs), 5*cs)                               // zero flag, host cluster
	write(make([]byte, 1000), 8*cs+100)                         // zero flag, partial
	write(make([]byte, int64(len(model))-14*cs-512), 14*cs+512) // unallocated tail
	if got := size(); got != size0 {
		t.Errorf("zero writes over zero clusters grew the image from %d to %d bytes", size0, got)
	}
	write(make([]byte, cs), 10*cs) // compressed
	write(make([]byte, cs/2), 100) // data, in place
	nz := make([]byte, 2*cs)       // zeros but for one byte, unallocated 6-7
	nz[len(nz)-1] = 1
	write(nz, 6*cs)
	if got := size(); got <= size0 {
		t.Errorf("a write with a non-zero byte allocated nothing (size %d)", got)
	}
	got := make([]byte, len(model))
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if i := firstDifference(got, model); i >= 0 {
		t.Fatalf("view byte %d = %#x, model %#x", i, got[i], model[i])
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	qemuCheckClean(t, path)
	if i := firstDifference(qemuPlain(t, path), model); i >= 0 {
		t.Fatalf("qemu's plaintext differs from the model at byte %d", i)
	}
}

func firstDifference(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestQcowViewPreallocated writes through the view into images whose
// clusters read as zeros but have host clusters: made by qemu with
// preallocation=metadata and then zeroed with "write -z", which keeps the
// host clusters (standard L2: the zero flag; extended L2: zero
// subclusters). Writes must use those host clusters: the file must not
// grow, qemu-img check must stay clean, and qemu must read the model.
func TestQcowViewPreallocated(t *testing.T) {
	needQemuTools(t)
	for _, ext := range []string{"off", "on"} {
		t.Run("extended_l2="+ext, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pre.qcow2")
			const size = 2 << 20
			qemuCreate(t, path, "preallocation=metadata,extended_l2="+ext+",cluster_size=65536", size)
			// Encrypted preallocated clusters are data (they decrypt to
			// noise) until zeroed.
			qemuRun(t, "qemu-io", "--object", qemuSecret(), "--image-opts", qemuOpts(path), "-c", fmt.Sprintf("write -z 0 %d", size))
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			model := make([]byte, size)
			if !bytes.Equal(qemuPlain(t, path), model) {
				t.Fatal("the zeroed image does not read as zeros")
			}
			f, v := openQcowView(t, path, false)
			exerciseView(t, v, model, 99)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			after, err := f.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if after.Size() != fi.Size() {
				t.Errorf("writes into preallocated clusters grew the image from %d to %d bytes", fi.Size(), after.Size())
			}
			qemuCheckClean(t, path)
			if i := firstDifference(qemuPlain(t, path), model); i >= 0 {
				t.Fatalf("qemu's plaintext differs from the model at byte %d", i)
			}
		})
	}
}

// TestQcowViewDirty: an image with the dirty bit opens read-only, and a
// read-write view is refused up front with a message that says what to do,
// instead of failing the first write that needs a cluster.
func TestQcowViewDirty(t *testing.T) {
	needQemuTools(t)
	path, model := qemuImage(t, 3, 64<<10)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0, 0, 0, 0, 0, 0, 0, 1}, 72); err != nil { // incompatible bit 0
		t.Fatal(err)
	}
	f.Close()
	_, v := openQcowView(t, path, true)
	readsModel(t, v, model, "read-only view of a dirty image")
	v.Close()
	f2, e, k := unlockQcow(t, path)
	if _, err := e.View(f2, k, false); !errors.Is(err, qcow2.ErrUnsupported) || !strings.Contains(err.Error(), "qemu-img check -r all") {
		t.Fatalf("read-write view of a dirty image: %v", err)
	}
}
