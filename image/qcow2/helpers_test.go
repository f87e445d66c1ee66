package qcow2

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// needQemu skips the test when qemu-img or qemu-io is missing, except in CI
// (env CI set), where their absence is a failure.
func needQemu(t testing.TB) {
	t.Helper()
	peer.Require(t, "qemu-img", "qemu-io")
}

// runCmd runs a command and fails the test with its output if it fails.
func runCmd(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// qemuRaw converts an image to raw with qemu-img and returns the bytes.
func qemuRaw(t testing.TB, path string) []byte {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "out.raw")
	runCmd(t, "qemu-img", "convert", "-O", "raw", path, raw)
	b, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// qemuCheck runs qemu-img check and fails unless it exits 0.
func qemuCheck(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("qemu-img", append([]string{"check"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img check %v: %v\n%s", args, err, out)
	}
	if !bytes.Contains(out, []byte("No errors were found")) {
		t.Fatalf("qemu-img check %v: unexpected output\n%s", args, out)
	}
}

// checkExtents verifies the invariants every Extents result must hold:
// guest order, exact coverage of [0, Size), positive lengths, merged
// neighbours, host ranges inside the file, compressed extents one cluster.
func checkExtents(im *Image, exts []Extent) error {
	var pos int64
	for i, e := range exts {
		if e.GuestOffset != pos || e.Length <= 0 {
			return fmt.Errorf("extent %d %+v: want guest offset %#x and a positive length", i, e, pos)
		}
		pos += e.Length
		switch e.Kind {
		case Data:
			if !inFile(e.HostOffset, e.Length, im.fileSize) {
				return fmt.Errorf("extent %d %+v beyond end of file %d", i, e, im.fileSize)
			}
		case Compressed:
			if e.GuestOffset%im.ClusterSize != 0 || e.Length > im.ClusterSize || e.CompressedLength <= 0 ||
				!inFile(e.HostOffset, e.CompressedLength, im.fileSize) {
				return fmt.Errorf("extent %d %+v: bad compressed extent", i, e)
			}
		case Zero, Unallocated:
		default:
			return fmt.Errorf("extent %d: bad kind %d", i, e.Kind)
		}
		if i > 0 {
			p := exts[i-1]
			if p.Kind == e.Kind && (e.Kind == Zero || e.Kind == Unallocated ||
				e.Kind == Data && p.HostOffset+p.Length == e.HostOffset) {
				return fmt.Errorf("extents %d and %d not merged: %+v %+v", i-1, i, p, e)
			}
		}
	}
	if pos != im.Size {
		return fmt.Errorf("extents cover %#x bytes, virtual size %#x", pos, im.Size)
	}
	return nil
}

// guestView reads the whole guest view of an image file through Open,
// Extents, ReadAt and ReadCompressed.
func guestView(t testing.TB, path string) (*Image, []Extent, []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	im, exts, view, err := readGuest(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return im, exts, view
}

func readGuest(r io.ReaderAt, size int64) (*Image, []Extent, []byte, error) {
	im, err := Open(r, size)
	if err != nil {
		return nil, nil, nil, err
	}
	exts, err := im.Extents(r)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := checkExtents(im, exts); err != nil {
		return nil, nil, nil, err
	}
	view := make([]byte, im.Size)
	cluster := make([]byte, im.ClusterSize)
	for _, e := range exts {
		dst := view[e.GuestOffset : e.GuestOffset+e.Length]
		switch e.Kind {
		case Data:
			if _, err := r.ReadAt(dst, e.HostOffset); err != nil {
				return nil, nil, nil, err
			}
		case Compressed:
			if err := im.ReadCompressed(r, e, cluster); err != nil {
				return nil, nil, nil, err
			}
			copy(dst, cluster)
		}
	}
	return im, exts, view, nil
}

// firstDiff describes where two byte slices differ.
func firstDiff(a, b []byte) string {
	if len(a) != len(b) {
		return fmt.Sprintf("lengths %d and %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("first difference at %#x: %#02x vs %#02x", i, a[i], b[i])
		}
	}
	return "equal"
}

// isClassified reports whether err wraps one of the package's sentinels.
func isClassified(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnsupported) || errors.Is(err, ErrNotQcow2)
}
