package qcow2

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestResizeVsQemu resizes images qemu made and wrote (several cluster
// sizes, version 2, extended L2, compressed clusters) and has qemu check and
// read them: growing keeps the data and adds zeros (past the old end's
// cluster), through a new L1 table where the old one is full; qemu writes
// after the old end; shrinking drops what lies past the new size, and a
// later grow does not bring it back.
func TestResizeVsQemu(t *testing.T) {
	needQemu(t)
	for _, opts := range []string{
		"cluster_size=512",
		"cluster_size=65536",
		"compat=0.10,cluster_size=4096",
		"extended_l2=on,cluster_size=16384",
	} {
		t.Run(opts, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "img.qcow2")
			const old, grown, shrunk = 1<<20 + 1536, 5 << 20, 512 << 10
			runCmd(t, "qemu-img", "create", "-q", "-f", "qcow2", "-o", opts, path, "1050112")
			runCmd(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0xab 0 64k", "-c", "write -c -P 0xcd 128k 64k",
				"-c", "write -P 0x11 600k 400k", "-c", "write -P 0x22 1048576 1536", path)
			before := qemuRaw(t, path)
			resize := func(size int64) {
				t.Helper()
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				st, _ := f.Stat()
				ed, err := OpenEdit(f, st.Size())
				if err != nil {
					t.Fatal(err)
				}
				if err := ed.Resize(size, f.Truncate); err != nil {
					t.Fatal(err)
				}
				if ed.Image().Size != size {
					t.Fatalf("editor size %d, want %d", ed.Image().Size, size)
				}
			}
			resize(grown)
			qemuCheck(t, path)
			got := qemuRaw(t, path)
			cs := int64(1) << mustOpen(t, path).ClusterBits
			end := (old + cs - 1) / cs * cs // the old end's cluster is left as stored
			if len(got) != grown || !bytes.Equal(got[:old], before) || !bytes.Equal(got[end:], make([]byte, grown-end)) {
				t.Fatal("grown: the old data changed or the new range is not zeros")
			}
			runCmd(t, "qemu-io", "-f", "qcow2", "-c", "write -P 0x33 4M 1M", path)
			qemuCheck(t, path)

			resize(shrunk)
			qemuCheck(t, path)
			if got := qemuRaw(t, path); !bytes.Equal(got, before[:shrunk]) {
				t.Fatal("shrunk: wrong data")
			}
			resize(grown)
			qemuCheck(t, path)
			if got := qemuRaw(t, path); !bytes.Equal(got[:shrunk], before[:shrunk]) || !bytes.Equal(got[shrunk:], make([]byte, grown-shrunk)) {
				t.Fatal("grown again: the data dropped by the shrink is back")
			}
		})
	}
}

func mustOpen(t *testing.T, path string) *Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	im, err := Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	return im
}
