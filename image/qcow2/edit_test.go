package qcow2

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestRefcountWidths(t *testing.T) {
	for _, bits := range []int{1, 2, 4, 8, 16, 32, 64} {
		blk := make([]byte, 512)
		n := int64(512 * 8 / bits)
		want := make([]uint64, n)
		rng := rand.New(rand.NewPCG(uint64(bits), 1))
		for i := range want {
			want[i] = rng.Uint64() & (1<<bits - 1)
			if bits == 64 {
				want[i] = rng.Uint64()
			}
			setRefcount(blk, int64(i), bits, want[i])
		}
		for i, w := range want {
			if got := getRefcount(blk, int64(i), bits); got != w {
				t.Fatalf("bits %d entry %d: %#x, want %#x", bits, i, got, w)
			}
		}
	}
	// Layout: 16-bit big-endian; sub-byte widths least significant first.
	blk := make([]byte, 4)
	setRefcount(blk, 1, 16, 0x0102)
	setRefcount(blk, 0, 4, 0x3)
	setRefcount(blk, 1, 4, 0xa)
	if !bytes.Equal(blk, []byte{0xa3, 0, 0x01, 0x02}) {
		t.Fatalf("refcount layout % x", blk)
	}
}

// editImage opens a qemu-made plain qcow2 image for editing.
func editImage(t *testing.T, path string) (*os.File, *Editor) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, _ := f.Stat()
	e, err := OpenEdit(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return f, e
}

// writeCluster allocates the guest cluster at g and fills it with b.
func writeCluster(e *Editor, f *os.File, g int64, b []byte) error {
	_, err := e.Allocate(g, func(h int64) error {
		_, err := f.WriteAt(b, h)
		return err
	})
	return err
}

// TestEditorAllocate allocates every cluster of plain qemu images of
// several geometries (small clusters and wide refcounts need new refcount
// blocks), replacing data-less, zero and compressed clusters, and checks
// with qemu-img check and convert.
func TestEditorAllocate(t *testing.T) {
	needQemu(t)
	for _, tc := range []struct {
		compat string
		cs     int64
		bits   int
		size   int64
		ext    bool // extended L2 entries
	}{
		{"1.1", 4 << 10, 64, 6 << 20, false}, // 512 clusters per refcount block
		{"1.1", 64 << 10, 1, 4 << 20, false},
		{"1.1", 64 << 10, 4, 4 << 20, false},
		{"0.10", 4 << 10, 16, 3 << 20, false},
		{"1.1", 512, 64, 4 << 20, false}, // outgrows its refcount table
		{"1.1", 16 << 10, 16, 4 << 20, true},
		{"1.1", 64 << 10, 16, 4 << 20, true},
	} {
		t.Run(fmt.Sprintf("%s-%d-%d-ext=%v", tc.compat, tc.cs, tc.bits, tc.ext), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.qcow2")
			opts := fmt.Sprintf("compat=%s,cluster_size=%d,refcount_bits=%d", tc.compat, tc.cs, tc.bits)
			if tc.ext {
				opts += ",extended_l2=on"
			}
			runCmd(t, "qemu-img", "create", "-f", "qcow2", "-o", opts, path, fmt.Sprint(tc.size))
			cmds := []string{"-c", fmt.Sprintf("write -P 0x61 0 %d", 3*tc.cs), "-c", fmt.Sprintf("write -z %d %d", tc.cs, tc.cs)}
			if tc.bits > 1 {
				cmds = append(cmds, "-c", fmt.Sprintf("write -c -P 0x62 %d %d", 4*tc.cs, tc.cs), "-c", fmt.Sprintf("write -c -P 0x63 %d %d", 5*tc.cs, tc.cs))
			}
			sc := tc.cs / 32
			if tc.ext {
				// Cluster 6: two subclusters of data, one zero, the
				// rest unallocated.
				cmds = append(cmds, "-c", fmt.Sprintf("write -P 0x64 %d %d", 6*tc.cs+sc, 2*sc), "-c", fmt.Sprintf("write -z %d %d", 6*tc.cs+5*sc, sc))
			}
			runCmd(t, "qemu-io", append([]string{"-f", "qcow2", path}, cmds...)...)
			model := qemuRaw(t, path)
			f, e := editImage(t, path)
			rtOff := e.rtOff

			m, err := e.Lookup(0, tc.size)
			if err != nil || m.Kind != Data || !m.InPlace || m.GuestOffset != 0 {
				t.Fatalf("Lookup(0): %+v, %v", m, err)
			}
			if err := writeCluster(e, f, 0, nil); !errors.Is(err, ErrInPlace) {
				t.Fatalf("Allocate of an in-place cluster: %v", err)
			}
			if tc.bits > 1 {
				if m, err := e.Lookup(4*tc.cs+7, 1); err != nil || m.Kind != Compressed || m.GuestOffset != 4*tc.cs {
					t.Fatalf("Lookup of a compressed cluster: %+v, %v", m, err)
				}
			}
			if tc.ext {
				// Data, but not in place until every subcluster is.
				if m, err := e.Lookup(6*tc.cs+sc, 1); err != nil || m.Kind != Data || m.InPlace || m.Length != 2*sc {
					t.Fatalf("Lookup of a partly allocated cluster: %+v, %v", m, err)
				}
			}
			buf := make([]byte, tc.cs)
			for g := tc.cs; g < tc.size; g += tc.cs {
				if g == 2*tc.cs {
					continue
				}
				for i := range buf {
					buf[i] = byte(g/tc.cs) ^ byte(i)
				}
				if err := writeCluster(e, f, g, buf); err != nil {
					t.Fatalf("Allocate %#x: %v", g, err)
				}
				copy(model[g:], buf)
				if m, err := e.Lookup(g, tc.cs); err != nil || m.Kind != Data || !m.InPlace {
					t.Fatalf("Lookup after Allocate: %+v, %v", m, err)
				}
			}
			if tc.cs == 512 && e.rtOff == rtOff {
				t.Fatal("the refcount table did not move")
			}
			if err := e.Flush(); err != nil {
				t.Fatal(err)
			}
			qemuCheck(t, path)
			if !bytes.Equal(qemuRaw(t, path), model) {
				t.Fatal("qemu reads something else than was allocated")
			}
			// A second editor sees the flushed mappings.
			_, e2 := editImage(t, path)
			if m, err := e2.Lookup(tc.cs, tc.size); err != nil || m.Kind != Data || m.GuestOffset != tc.cs {
				t.Fatalf("reopened Lookup: %+v, %v", m, err)
			}
		})
	}
}

// TestEditorRefusesDirty: a dirty image maps fine but allocates nothing.
func TestEditorRefusesDirty(t *testing.T) {
	needQemu(t)
	path := filepath.Join(t.TempDir(), "d.qcow2")
	runCmd(t, "qemu-img", "create", "-f", "qcow2", path, "1M")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteAt([]byte{0, 0, 0, 0, 0, 0, 0, 1}, 72) // incompatible bit 0
	_, e := editImage(t, path)
	if m, err := e.Lookup(0, 1<<20); err != nil || m.Kind != Unallocated || m.Length != 1<<20 {
		t.Fatalf("Lookup: %+v, %v", m, err)
	}
	if err := writeCluster(e, f, 0, make([]byte, 64<<10)); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Allocate in a dirty image: %v", err)
	}
}

// syncMem is writer_test.go's memFile with a Sync, an in-memory File.
type syncMem struct{ *memFile }

func (syncMem) Sync() error { return nil }

// FuzzEditor runs Lookup over the whole image, then Allocate on a few
// clusters and Flush, on arbitrary bytes (seeded like FuzzOpen): errors
// must be classified or ErrInPlace, and nothing may panic; what Lookup
// says after the edits must agree with a fresh Editor's view.
func FuzzEditor(f *testing.F) {
	f.Add(hostileBase(f, 512, true))
	f.Add(hostileBase(f, 512, false))
	gz, _ := filepath.Glob("testdata/*.qcow2.gz")
	for _, p := range gz {
		f.Add(gunzipFile(f, p))
	}
	f.Fuzz(fuzzEdit)
}

func fuzzEdit(t *testing.T, data []byte) {
	{
		if len(data) > 4<<20 {
			return
		}
		m := syncMem{&memFile{b: bytes.Clone(data)}}
		e, err := OpenEdit(m, int64(len(data)))
		if err != nil {
			if !isClassified(err) {
				t.Fatalf("OpenEdit: unclassified error %v", err)
			}
			return
		}
		size := e.Image().Size
		step := max(e.cs, size/64)
		for g := int64(0); g < size; g += step {
			if _, err := e.Lookup(g, min(step, 64*e.cs)); err != nil && !isClassified(err) {
				t.Fatalf("Lookup: unclassified error %v", err)
			}
		}
		for k, g := 0, int64(0); k < 4 && g < size; k, g = k+1, g+step {
			if _, err := e.Lookup(g, 1); err != nil {
				continue
			}
			_, err := e.Allocate(g, func(h int64) error {
				_, err := m.WriteAt(bytes.Repeat([]byte{byte(k + 1)}, int(e.cs)), h)
				return err
			})
			if err != nil && !isClassified(err) && !errors.Is(err, ErrInPlace) {
				t.Fatalf("Allocate: unclassified error %v", err)
			}
		}
		if err := e.Flush(); err != nil {
			if !isClassified(err) {
				t.Fatalf("Flush: unclassified error %v", err)
			}
			return
		}
		e2, err := OpenEdit(m, int64(len(m.b)))
		if err != nil {
			t.Fatalf("reopening after edits: %v", err)
		}
		for g := int64(0); g < size; g += step {
			a, errA := e.Lookup(g, 1)
			b, errB := e2.Lookup(g, 1)
			if (errA == nil) != (errB == nil) || a != b {
				t.Fatalf("guest %#x: editor %+v (%v), reopened %+v (%v)", g, a, errA, b, errB)
			}
		}
	}
}
