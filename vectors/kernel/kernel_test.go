package kernel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestArchiveOrder(t *testing.T) {
	a := newArchive()
	a.file("a/b/c", 0o644, []byte("xyz"))
	a.symlink("bin/sh", "busybox")
	var buf bytes.Buffer
	if err := a.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if buf.Len()%4 != 0 {
		t.Fatalf("archive length %d not a multiple of 4", buf.Len())
	}
	var names []string
	for len(b) >= 110 {
		if string(b[:6]) != "070701" {
			t.Fatalf("bad magic %q", b[:6])
		}
		size := hexField(t, b, 6)
		nameLen := hexField(t, b, 11)
		name := string(b[110 : 110+nameLen-1])
		names = append(names, name)
		off := (110 + nameLen + 3) &^ 3
		off += (size + 3) &^ 3
		if name == "TRAILER!!!" {
			break
		}
		b = b[off:]
	}
	want := "a a/b a/b/c bin bin/sh TRAILER!!!"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("entries %q, want %q", got, want)
	}
}

func hexField(t *testing.T, b []byte, i int) int {
	t.Helper()
	var v int
	for _, c := range b[6+8*i : 6+8*i+8] {
		v = v*16 + strings.IndexByte("0123456789ABCDEF", c)
	}
	return v
}

// TestBoot checks the harness itself: modules load, disks appear in order,
// files arrive, each check's status and output are kept apart, and a disk
// written by the guest reaches the host.
func TestBoot(t *testing.T) {
	m := Require(t)
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	rand.Read(data)
	in := filepath.Join(dir, "in.raw")
	os.WriteFile(in, data, 0o600)
	outDisk := filepath.Join(dir, "out.raw")
	os.WriteFile(outDisk, make([]byte, 1<<20), 0o600)

	b := NewBatch()
	vin := b.Disk(in)
	vout := b.Disk(outDisk)
	key := b.File("key", []byte("secret"))
	b.Check("modules", "for m in dm_crypt dm_integrity essiv xts aesni_intel virtio_blk; do grep -q \"^$m \" /proc/modules || { echo missing $m; exit 1; }; done")
	b.Check("read", "sha "+vin)
	b.Check("file", "cat "+key)
	b.Check("fails", "echo before; false; echo after")
	b.Check("exit3", "echo three; exit 3")
	b.Check("write", "dd if="+vin+" of="+vout+" bs=64k conv=fsync 2>/dev/null; tr a-z A-Z < "+key+" | dd of="+vout+" conv=notrunc,fsync 2>/dev/null")
	b.Check("tools", "cryptsetup --version; dmsetup version | head -1")
	r := m.RunBatch(t, b)

	r.Want(t, "modules")
	sum := sha256.Sum256(data)
	if got := r.Want(t, "read"); got != hex.EncodeToString(sum[:]) {
		t.Errorf("guest read sha %s, want %x", got, sum)
	}
	if got := r.Want(t, "file"); got != "secret" {
		t.Errorf("file arrived as %q", got)
	}
	r.WantFail(t, "fails", 1)
	if got := r["fails"].Output; got != "before" {
		t.Errorf("set -e check output %q, want only \"before\"", got)
	}
	r.WantFail(t, "exit3", 3)
	if got := r["exit3"].Output; got != "three" {
		t.Errorf("exit3 output %q", got)
	}
	r.Want(t, "write")
	if !strings.Contains(r.Want(t, "tools"), "cryptsetup 2.") {
		t.Errorf("tools: %q", r["tools"].Output)
	}
	got, _ := os.ReadFile(outDisk)
	want := append([]byte("SECRET"), data[6:]...)
	if !bytes.Equal(got, want) {
		t.Error("bytes the guest wrote did not reach the host file")
	}
}

// TestBootTimeout checks that a hung guest is killed at its deadline.
func TestBootTimeout(t *testing.T) {
	m := Require(t)
	start := time.Now()
	res, err := m.run(t.TempDir(), Job{Script: "sleep 600", Timeout: 12 * time.Second})
	if !errors.Is(err, errTimeout) {
		t.Fatalf("err %v, want a timeout; console:\n%s", err, tail(res.Console))
	}
	if d := time.Since(start); d > 25*time.Second {
		t.Fatalf("hung guest killed only after %v", d)
	}
}
