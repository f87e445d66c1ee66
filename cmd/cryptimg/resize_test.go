package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/filelock"
)

// unlockedImage opens the image at path (flag: os.O_RDONLY or os.O_RDWR)
// and unlocks it with key; the file is closed and the key cleared when the
// test ends.
func unlockedImage(t *testing.T, path, key string, flag int) (*os.File, *image.Encrypted, *image.Key) {
	t.Helper()
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	e, err := image.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte(key), -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Clear)
	return f, e, k
}

// imageIO opens the image at path read-write with key and calls fn with
// its writable view.
func imageIO(t *testing.T, path, key string, fn func(v image.View)) {
	t.Helper()
	f, e, k := unlockedImage(t, path, key, os.O_RDWR)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	fn(v)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeAt writes b at off of the plaintext of the image at path.
func writeAt(t *testing.T, path, key string, b []byte, off int64) {
	t.Helper()
	imageIO(t, path, key, func(v image.View) {
		if _, err := v.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	})
}

// readAll returns the whole plaintext of the image at path.
func readAll(t *testing.T, path, key string) []byte {
	t.Helper()
	var b []byte
	imageIO(t, path, key, func(v image.View) {
		b = make([]byte, v.Size())
		if _, err := v.ReadAt(b, 0); err != nil {
			t.Fatal(err)
		}
	})
	return b
}

// readRange returns n bytes of plaintext at off.
func readRange(t *testing.T, path, key string, off, n int64) []byte {
	t.Helper()
	b := make([]byte, n)
	imageIO(t, path, key, func(v image.View) {
		if _, err := v.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
	})
	return b
}

// fixSegment gives the LUKS2 image at path a data segment of fixed size
// (its current payload), as cryptsetup records one after some reencryptions.
func fixSegment(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := image.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Apply(e.Header.(*header.LUKS2).WithDataSize(e.PayloadSize)); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

func resizeJSON(t *testing.T, args ...string) resizeSummary {
	t.Helper()
	var s resizeSummary
	r := mustRun(t, append([]string{"resize", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("resize --json: %v\n%s", err, r.stdout)
	}
	return s
}

// TestResizeCommand: grow, the same size and a forced shrink of a raw
// image, with the --json summary, and every refusal with its exit code
// and a message naming the flag that helps.
func TestResizeCommand(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "disk.luks")
	fastCreate(t, key, "4M", img)
	plain := randomBytes(4 << 20)
	writeAt(t, img, testPassphrase, plain, 0)

	s := resizeJSON(t, "--size", "8M", img)
	want := resizeSummary{MessageType: "summary", Op: "resize", Image: img, Format: "raw", OldSize: 4 << 20, NewSize: 8 << 20, Changed: true}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	payload := dumpOf(t, img).PayloadOffsetBytes
	if st, _ := os.Stat(img); st.Size() != payload+8<<20 {
		t.Errorf("file of %d bytes, want %d", st.Size(), payload+8<<20)
	}
	if a := allocated(t, img); a > payload+4<<20+64<<10 {
		t.Errorf("%d bytes allocated: the grown part is not a hole", a)
	}
	if got := readAll(t, img, testPassphrase); int64(len(got)) != 8<<20 || !bytes.Equal(got[:4<<20], plain) {
		t.Fatal("the old data changed")
	}
	if r := mustRun(t, "resize", "--size", strconv.Itoa(8<<20), img); !strings.Contains(r.stderr, "nothing to do") {
		t.Errorf("same size: %q", r.stderr)
	}
	if s := resizeJSON(t, "--size", "8M", img); s.Changed {
		t.Errorf("same size, --json: %+v", s)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--size", "2M", img}, exitFailure, "--force"},
		{[]string{"--size", "1000", img}, exitFailure, "multiple of 512"},
		{[]string{"--size", "1x", img}, exitFailure, "invalid size"},
		{[]string{"--size", "0", img}, exitFailure, "positive"},
		{[]string{"--allow-data-loss", "--size", "2M", img}, exitFailure, "--force"},
		{[]string{img}, exitFailure, "--size"},
		{[]string{"--size", "2M", filepath.Join(dir, "missing")}, exitFailure, "no such file"},
		{[]string{"--size", "2M", key}, exitBadImage, ""},
	} {
		r := cryptimg(t, "", append([]string{"resize"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("resize %s: exit %d, %q; want %d and %q on one line", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}

	// Locked by another process (here: this one): busy.
	lf, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := filelock.Lock(lf, img, filelock.Exclusive); err != nil {
		t.Fatal(err)
	}
	if r := cryptimg(t, "", "resize", "--size", "16M", img); r.code != exitBusy || !strings.Contains(r.stderr, "is busy") {
		t.Errorf("locked image: exit %d, %s", r.code, r.stderr)
	}
	lf.Close()

	s = resizeJSON(t, "--force", "--size", "3M", img)
	if s.OldSize != 8<<20 || s.NewSize != 3<<20 || !s.Changed {
		t.Errorf("shrink summary %+v", s)
	}
	if got := readAll(t, img, testPassphrase); !bytes.Equal(got, plain[:3<<20]) {
		t.Fatal("shrunk image: wrong data")
	}

	// LUKS2 at 4096-byte sectors: the size must be whole sectors.
	l2 := filepath.Join(dir, "disk.luks2")
	fastCreate(t, key, "4M", l2, "--type", "luks2", "--pbkdf", "pbkdf2")
	r := cryptimg(t, "", "resize", "--size", strconv.Itoa(4<<20+512), l2)
	if r.code != exitFailure || !strings.Contains(r.stderr, "4096-byte sector size") {
		t.Errorf("unaligned LUKS2 size: exit %d, %s", r.code, r.stderr)
	}

	// Integrity: refused, nothing changed.
	auth := filepath.Join(dir, "auth.luks2")
	fastCreate(t, key, "1M", auth, "--type", "luks2", "--pbkdf", "pbkdf2", "--integrity", "hmac-sha256")
	before := fileSHA(t, auth)
	if r := cryptimg(t, "", "resize", "--size", "2M", auth); r.code != exitFailure || !strings.Contains(r.stderr, "integrity") {
		t.Errorf("integrity: exit %d, %s", r.code, r.stderr)
	}
	if fileSHA(t, auth) != before {
		t.Error("a refused resize changed the image")
	}
}

// TestResizeQcow2Command: a qcow2 shrink over data needs --allow-data-loss
// as well; growing past an allocated last cluster asks for the key, which
// -d gives, and a wrong one exits 2 before anything changes.
func TestResizeQcow2Command(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	wrong := writeFile(t, filepath.Join(dir, "wrong"), "not the key")
	img := filepath.Join(dir, "vm.qcow2")
	fastCreate(t, key, strconv.Itoa(1<<20+4096), img, "-O", "qcow2")
	plain := randomBytes(1<<20 + 4096)
	writeAt(t, img, testPassphrase, plain, 0)

	before := fileSHA(t, img)
	r := cryptimg(t, "", "resize", "--size", "2M", img)
	if r.code != exitFailure || !strings.Contains(r.stderr, "key") {
		t.Errorf("grow without a key: exit %d, %s", r.code, r.stderr)
	}
	if r := cryptimg(t, "", "resize", "-d", wrong, "--size", "2M", img); r.code != exitNoKey {
		t.Errorf("wrong key: exit %d, %s", r.code, r.stderr)
	}
	if fileSHA(t, img) != before {
		t.Fatal("a refused resize changed the image")
	}
	s := resizeJSON(t, "-d", key, "--size", "2M", img)
	if s.Format != "qcow2" || s.OldSize != 1<<20+4096 || s.NewSize != 2<<20 {
		t.Errorf("summary %+v", s)
	}
	got := readAll(t, img, testPassphrase)
	if !bytes.Equal(got[:len(plain)], plain) || !bytes.Equal(got[len(plain):], make([]byte, 2<<20-len(plain))) {
		t.Fatal("grown qcow2: the old data changed or the new range is not zeros")
	}

	r = cryptimg(t, "", "resize", "--force", "--size", "512K", img)
	if r.code != exitFailure || !strings.Contains(r.stderr, "--allow-data-loss") {
		t.Errorf("shrink over data: exit %d, %s", r.code, r.stderr)
	}
	mustRun(t, "resize", "--force", "--allow-data-loss", "--size", "512K", img)
	if got := readAll(t, img, testPassphrase); !bytes.Equal(got, plain[:512<<10]) {
		t.Fatal("shrunk qcow2: wrong data")
	}
}

// luks2SegmentLength is the length luksDump gives the data segment:
// bytes, or "(whole device)".
var luks2SegmentLength = regexp.MustCompile(`(?m)^\s*length:\s*(.*)$`)

// TestResizeCryptsetup: after growing, cryptsetup reads the new fixed
// LUKS2 segment size, unlocks the key, and its offline decryption gives
// the old data and what was written after the old end; a grown LUKS1 image
// opens too, and qemu decrypts the data written after growing.
func TestResizeCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)

	t.Run("luks2-fixed", func(t *testing.T) {
		img := filepath.Join(dir, "fixed.luks2")
		fastCreate(t, key, "2M", img, "--type", "luks2", "--pbkdf", "pbkdf2")
		fixSegment(t, img)
		if m := luks2SegmentLength.FindStringSubmatch(sh(t, cs, "luksDump", img)); m == nil || m[1] != "2097152 [bytes]" {
			t.Fatalf("before: segment length %q", m)
		}
		plain := randomBytes(5 << 20)
		writeAt(t, img, testPassphrase, plain[:2<<20], 0)
		if s := resizeJSON(t, "--size", "5M", img); !s.FixedSegment {
			t.Errorf("summary %+v: no fixed segment", s)
		}
		writeAt(t, img, testPassphrase, plain[2<<20:], 2<<20)
		if m := luks2SegmentLength.FindStringSubmatch(sh(t, cs, "luksDump", img)); m == nil || m[1] != "5242880 [bytes]" {
			t.Fatalf("after: segment length %q", m)
		}
		sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
		// cryptsetup decrypts it offline (root only): the plaintext moves
		// to the start of the file, the header to a new file.
		requireRoot(t)
		sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
			"--disable-locks", "--batch-mode", "--key-file", key, img)
		got, _ := os.ReadFile(img)
		if len(got) < len(plain) || !bytes.Equal(got[:len(plain)], plain) {
			t.Error("cryptsetup reencrypt --decrypt does not give the data written before and after growing")
		}
	})

	t.Run("luks1", func(t *testing.T) {
		img := filepath.Join(dir, "grown.luks")
		fastCreate(t, key, "2M", img)
		plain := randomBytes(6 << 20)
		writeAt(t, img, testPassphrase, plain[:2<<20], 0)
		mustRun(t, "resize", "--size", "6M", img)
		writeAt(t, img, testPassphrase, plain[2<<20:], 2<<20)
		if !strings.Contains(sh(t, cs, "luksDump", img), "Version:       \t1") {
			t.Error("luksDump does not see LUKS1")
		}
		sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
		qi := requireTool(t, "qemu-img")
		out := filepath.Join(dir, "grown.raw")
		sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+img, "-O", "raw", out)
		if got, _ := os.ReadFile(out); !bytes.Equal(got, plain) {
			t.Error("qemu-img does not decrypt the grown LUKS1 image to the data")
		}
	})
}

// qemuIO runs qemu-io commands on the encrypted qcow2 image and fails on
// an error or a pattern mismatch.
func qemuIO(t *testing.T, qio, key, img string, cmds ...string) {
	t.Helper()
	args := []string{"--object", qemuSecret(key), "--image-opts", qcowOpts(img)}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	out, err := exec.Command(qio, args...).CombinedOutput()
	if err != nil || strings.Contains(string(out), "failed") || strings.Contains(string(out), "error") {
		t.Fatalf("qemu-io %v: %v\n%s", cmds, err, out)
	}
}

func qemuVirtualSize(t *testing.T, qi, img string) int64 {
	t.Helper()
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	if err := json.Unmarshal([]byte(sh(t, qi, "info", "--output=json", img)), &info); err != nil {
		t.Fatal(err)
	}
	return info.VirtualSize
}

// TestResizeQemu: a qcow2 image grown by cryptimg past what its L1 table
// maps (5 TiB at 64 KiB clusters needs a second L1 cluster) is clean for
// qemu-img check, has the new virtual size, and qemu reads what cryptimg
// wrote after the old end and the other way round; shrunk, it is still
// clean; and an image grown by qemu-img resize reads in cryptimg.
func TestResizeQemu(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	qio := requireTool(t, "qemu-io")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "vm.qcow2")
	fastCreate(t, key, "1M", img, "-O", "qcow2")
	writeAt(t, img, testPassphrase, bytes.Repeat([]byte{0x11}, 1<<20), 0)

	const tib = int64(1) << 40
	mustRun(t, "resize", "--size", "5T", img)
	qemuCheck(t, qi, key, img, true)
	if got := qemuVirtualSize(t, qi, img); got != 5*tib {
		t.Fatalf("qemu-img info: virtual size %d, want %d", got, 5*tib)
	}
	far := 4*tib + 12345*512 // mapped by the second L1 cluster
	writeAt(t, img, testPassphrase, bytes.Repeat([]byte{0x22}, 64<<10), far)
	qemuIO(t, qio, key, img,
		"read -P 0x11 0 1M", "read -P 0 1M 1M", fmt.Sprintf("read -P 0x22 %d 64k", far),
		"write -P 0x33 3M 64k", fmt.Sprintf("write -P 0x44 %d 4k", 5*tib-4096))
	qemuCheck(t, qi, key, img, true)
	if b := readRange(t, img, testPassphrase, 3<<20, 64<<10); !bytes.Equal(b, bytes.Repeat([]byte{0x33}, 64<<10)) {
		t.Error("cryptimg does not read what qemu wrote after the old end")
	}
	if b := readRange(t, img, testPassphrase, 5*tib-4096, 4096); !bytes.Equal(b, bytes.Repeat([]byte{0x44}, 4096)) {
		t.Error("cryptimg does not read what qemu wrote at the new end")
	}

	mustRun(t, "resize", "--force", "--allow-data-loss", "--size", "2M", img)
	qemuCheck(t, qi, key, img, true)
	if got := qemuVirtualSize(t, qi, img); got != 2<<20 {
		t.Fatalf("after shrinking: virtual size %d", got)
	}
	qemuIO(t, qio, key, img, "read -P 0x11 0 1M", "read -P 0 1M 1M")

	// The other way: qemu-img resize, then cryptimg reads and writes it.
	q2 := filepath.Join(dir, "qemu-grown.qcow2")
	fastCreate(t, key, "1M", q2, "-O", "qcow2")
	writeAt(t, q2, testPassphrase, bytes.Repeat([]byte{0x55}, 1<<20), 0)
	sh(t, qi, "resize", "--object", qemuSecret(key), "--image-opts", qcowOpts(q2), "6M")
	qemuIO(t, qio, key, q2, "write -P 0x66 5M 1M")
	got := readAll(t, q2, testPassphrase)
	want := append(append(bytes.Repeat([]byte{0x55}, 1<<20), make([]byte, 4<<20)...), bytes.Repeat([]byte{0x66}, 1<<20)...)
	if !bytes.Equal(got, want) {
		t.Fatal("cryptimg does not read the image qemu-img resize grew")
	}
	mustRun(t, "resize", "--size", "8M", q2)
	qemuCheck(t, qi, key, q2, true)
}

// TestResizeDetachedCommand: with --header the data file grows and a fixed
// segment's new size goes to the header file; cryptsetup reads the size
// and, offline, decrypts what was written before and after growth.
func TestResizeDetachedCommand(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomBytes(5 << 20)
	src := filepath.Join(dir, "plain")
	if err := os.WriteFile(src, plain[:2<<20], 0o600); err != nil {
		t.Fatal(err)
	}
	hdr, data := filepath.Join(dir, "disk.hdr"), filepath.Join(dir, "disk.data")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--header", hdr, src, data)
	detached := func() *image.Encrypted {
		t.Helper()
		h, err := os.OpenFile(hdr, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		d, err := os.OpenFile(data, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		e, err := image.OpenDetached(h, d)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := detached(); e.Apply(e.Header.(*header.LUKS2).WithDataSize(2<<20)) != nil {
		t.Fatal("fixing the segment failed")
	}
	hdrSize := func() int64 { st, _ := os.Stat(hdr); return st.Size() }
	before := hdrSize()

	// Without --header the data file is no image.
	if r := cryptimg(t, "", "resize", "--size", "5M", data); r.code != exitBadImage {
		t.Errorf("data file without --header: exit %d, %s", r.code, r.stderr)
	}
	s := resizeJSON(t, "--header", hdr, "--size", "5M", data)
	want := resizeSummary{MessageType: "summary", Op: "resize", Image: data, Header: hdr, Format: "raw",
		OldSize: 2 << 20, NewSize: 5 << 20, Changed: true, FixedSegment: true}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	e := detached()
	if st, _ := os.Stat(data); st.Size() != 5<<20 || e.PayloadSize != 5<<20 || e.Header.Info().PayloadSize != 5<<20 {
		t.Fatalf("data file %d bytes, payload %d, segment %d; want %d", st.Size(), e.PayloadSize, e.Header.Info().PayloadSize, 5<<20)
	}
	if hdrSize() != before {
		t.Errorf("the header file changed size: %d, was %d", hdrSize(), before)
	}
	// The grown part, written through the header's key, and the old part
	// read back.
	k, err := e.Unlock([]byte(testPassphrase), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	d, _ := os.OpenFile(data, os.O_RDWR, 0)
	defer d.Close()
	v, err := e.View(d, k, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(plain[2<<20:], 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, "--header", hdr, data, out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, plain) {
		t.Fatal("decrypt --header after growing: wrong data")
	}

	// A forced shrink commits the smaller segment.
	if s := resizeJSON(t, "--header", hdr, "--force", "--size", "3M", data); s.NewSize != 3<<20 || !s.FixedSegment {
		t.Errorf("shrink summary %+v", s)
	}
	if e := detached(); e.Header.Info().PayloadSize != 3<<20 {
		t.Errorf("segment %d after shrinking, want %d", e.Header.Info().PayloadSize, 3<<20)
	}
	if st, _ := os.Stat(data); st.Size() != 3<<20 {
		t.Errorf("data file %d bytes after shrinking", st.Size())
	}

	cs := requireTool(t, "cryptsetup")
	if m := luks2SegmentLength.FindStringSubmatch(sh(t, cs, "luksDump", hdr)); m == nil || m[1] != "3145728 [bytes]" {
		t.Fatalf("cryptsetup luksDump: segment length %q", m)
	}
	sh(t, cs, "open", "--test-passphrase", "--key-file", key, "--header", hdr, data)
	requireRoot(t)
	sh(t, cs, "reencrypt", "--decrypt", "--header", hdr, "--force-offline-reencrypt",
		"--disable-locks", "--batch-mode", "--key-file", key, data)
	if got, _ := os.ReadFile(data); len(got) < 3<<20 || !bytes.Equal(got[:3<<20], plain[:3<<20]) {
		t.Error("cryptsetup reencrypt --decrypt of the shrunk image does not give the plaintext")
	}
}
