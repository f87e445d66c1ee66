package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// nobody is the unprivileged user TestOpenUnprivileged runs as.
const nobody = 65534

// asNobody runs a command as user nobody and returns its output.
func asNobody(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("as nobody: %s %s: %v\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// TestOpenUnprivileged is the README's claim that open works without root:
// with /dev/fuse at mode 0666, as on ordinary systems, user nobody mounts
// an image through the setuid fusermount3, reads and writes its plaintext,
// sees the file as its own, and closes it; nothing stays mounted, and the
// writes are in the image.
func TestOpenUnprivileged(t *testing.T) {
	requireFUSE(t)
	requireRoot(t)
	if st, err := os.Stat(requireTool(t, "fusermount3")); err != nil || st.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("fusermount3 is not setuid root: %v", err)
	}
	st, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Fatal(err)
	}
	if mode := st.Mode().Perm(); mode != 0o666 {
		if err := os.Chmod("/dev/fuse", 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod("/dev/fuse", mode) })
	}

	// A directory nobody can use, outside the 0700 test temp dirs.
	dir, err := os.MkdirTemp("", "cryptimg-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cryptimg")
	copyImage(t, binary(t), bin)
	os.Chmod(bin, 0o755)
	plain := randomFile(t, dir, "plain.raw", 4<<20)
	want, _ := os.ReadFile(plain)
	key := writeFile(t, filepath.Join(dir, "key"), "nobody's passphrase")
	img := filepath.Join(dir, "disk.luks")
	fastEncrypt(t, key, plain, img)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	for _, p := range []string{key, img, mnt} {
		if err := os.Chown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if _, ok := findMount(mnt); ok {
			lazyUnmount(mnt)
		}
	})

	asNobody(t, bin, "open", "--background", "-d", key, img, mnt)
	m, ok := findMount(mnt)
	if !ok {
		t.Fatal("nothing mounted after open --background")
	}
	t.Logf("mounted as %s", m.fstype)
	// The background process holds the key for the mount's whole life.
	checkSecretsHeld(t, mnt, nobody)
	file := filepath.Join(mnt, "disk.raw")
	if got := strings.TrimSpace(asNobody(t, "stat", "-c", "%u %s", file)); got != "65534 4194304" {
		t.Errorf("mounted file owner and size %q, want \"65534 4194304\"", got)
	}
	sum := sha256.Sum256(want)
	if got := strings.Fields(asNobody(t, "sha256sum", file))[0]; got != hex.EncodeToString(sum[:]) {
		t.Errorf("plaintext read through the mount has sha256 %s, want %x", got, sum)
	}
	patch := make([]byte, 64<<10)
	rand.Read(patch)
	p := writeFile(t, filepath.Join(dir, "patch"), string(patch))
	os.Chmod(p, 0o644)
	asNobody(t, "dd", "if="+p, "of="+file, "bs=65536", "seek=17", "conv=notrunc,fsync", "status=none")
	copy(want[17*65536:], patch)
	asNobody(t, bin, "close", mnt)

	if _, ok := findMount(mnt); ok {
		t.Fatal("still mounted after close")
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(info), mnt) {
		t.Fatalf("mountinfo still names %s", mnt)
	}
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, img, out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Error("the image does not hold what nobody wrote through the mount")
	}
}
