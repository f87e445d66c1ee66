package main

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// requireFUSE skips (outside CI) or fails (in CI) unless FUSE mounts work
// here: /dev/fuse opens and we are root or have fusermount3.
func requireFUSE(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts through FUSE and builds the binary")
	}
	if err := checkFUSE(); err != nil {
		peer.Missing(t, err.Error())
	}
}

// requireRoot is for tests that need loop devices and mount(8).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		peer.Missing(t, "this test needs root for loop devices and mount")
	}
}

// openFixture is an encrypted image with a key and an empty mount point.
type openFixture struct {
	dir, img, key, mnt string
	size               int64
}

func newOpenFixture(t *testing.T, size int64) openFixture {
	t.Helper()
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain.raw")
	f, err := os.Create(plain)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	fx := openFixture{dir: dir, img: filepath.Join(dir, "disk.luks"), key: writeFile(t, filepath.Join(dir, "key"), "open passphrase"),
		mnt: filepath.Join(dir, "mnt"), size: size}
	if err := os.Mkdir(fx.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "encrypt", "-d", fx.key, "--pbkdf-force-iterations", "1000", plain, fx.img)
	// Whatever happens, leave no mount behind.
	t.Cleanup(func() {
		if _, ok := findMount(fx.mnt); ok {
			lazyUnmount(fx.mnt)
		}
	})
	return fx
}

// openBackground runs the real binary's open --background.
func (fx openFixture) openBackground(t *testing.T, extra ...string) {
	t.Helper()
	args := append([]string{"open", "--background", "-d", fx.key}, extra...)
	out, err := exec.Command(binary(t), append(args, fx.img, fx.mnt)...).CombinedOutput()
	if err != nil {
		t.Fatalf("open --background: %v\n%s", err, out)
	}
	if st, err := os.Stat(filepath.Join(fx.mnt, "disk.raw")); err != nil {
		t.Fatalf("mounted file: %v", err)
	} else if st.Size() != fx.size {
		t.Fatalf("mounted file is %d bytes", st.Size())
	}
	checkSecretsHeld(t, fx.mnt, os.Geteuid())
}

// TestOpenMountExt4 is the mount test: open, losetup, mkfs.ext4,
// mount, write files, umount, losetup -d, close; then decrypt and check
// the filesystem with e2fsck and debugfs, and read a file with cat.
func TestOpenMountExt4(t *testing.T) {
	requireFUSE(t)
	requireRoot(t)
	losetup := requireTool(t, "losetup")
	mkfs := requireTool(t, "mkfs.ext4")
	e2fsck := requireTool(t, "e2fsck")
	debugfs := requireTool(t, "debugfs")
	fx := newOpenFixture(t, 64<<20)
	fx.openBackground(t)

	dev := strings.TrimSpace(sh(t, losetup, "-f", "--show", filepath.Join(fx.mnt, "disk.raw")))
	detached := false
	t.Cleanup(func() {
		if !detached {
			exec.Command(losetup, "-d", dev).Run()
		}
	})
	sh(t, mkfs, "-q", "-F", dev)
	fsdir := filepath.Join(fx.dir, "fs")
	os.Mkdir(fsdir, 0o755)
	sh(t, "mount", dev, fsdir)
	mounted := true
	t.Cleanup(func() {
		if mounted {
			exec.Command("umount", "-l", fsdir).Run()
		}
	})
	big := make([]byte, 5<<20+123)
	rand.Read(big)
	writeFile(t, filepath.Join(fsdir, "hello.txt"), "hello through FUSE\n")
	os.Mkdir(filepath.Join(fsdir, "sub"), 0o755)
	if err := os.WriteFile(filepath.Join(fsdir, "sub", "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, "umount", fsdir)
	mounted = false
	sh(t, losetup, "-d", dev)
	detached = true
	r := mustRun(t, "close", fx.mnt)
	if _, ok := findMount(fx.mnt); ok {
		t.Fatalf("still mounted after close: %s", r.stderr)
	}

	out := filepath.Join(fx.dir, "out.raw")
	mustRun(t, "decrypt", "-d", fx.key, fx.img, out)
	sh(t, e2fsck, "-fn", out)
	if got := sh(t, debugfs, "-R", "cat /hello.txt", out); !strings.Contains(got, "hello through FUSE\n") {
		t.Errorf("debugfs cat /hello.txt: %q", got)
	}
	dump := filepath.Join(fx.dir, "big.dump")
	sh(t, debugfs, "-R", "dump /sub/big.bin "+dump, out)
	if got, err := os.ReadFile(dump); err != nil || !bytes.Equal(got, big) {
		t.Errorf("sub/big.bin after decrypt differs (%d bytes, %v)", len(got), err)
	}
	// The same file read inside the encrypted image by cat (go-diskfs ext4).
	if r := mustRun(t, "cat", "-d", fx.key, fx.img, "0:/hello.txt"); r.stdout != "hello through FUSE\n" {
		t.Errorf("cat 0:/hello.txt = %q", r.stdout)
	}
}

// waitKilled waits for a SIGKILLed open to exit. One that does not within
// 10 s is stuck in its own mount (a file of the mount open in the server
// process, flushed on exit to itself): the test fails, after aborting the
// connection with a forced unmount so that the process and the rest of the
// tests go on.
func waitKilled(t *testing.T, cmd *exec.Cmd, mnt string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	syscall.Unmount(mnt, syscall.MNT_FORCE)
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	t.Fatal("SIGKILLed open did not exit within 10 s: it hung on its own mount")
}

// TestOpenKilled: a SIGKILLed open leaves a stale mount (ENOTCONN); close
// clears it, and so does the next open. The kill lands as soon as the file
// shows, while open may still be checking its own mount.
func TestOpenKilled(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 8<<20)
	kill := func() {
		t.Helper()
		cmd := exec.Command(binary(t), "open", "-d", fx.key, fx.img, fx.mnt)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(filepath.Join(fx.mnt, "disk.raw")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("open did not mount within 20s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Kill()
		waitKilled(t, cmd, fx.mnt)
		if _, err := os.Stat(fx.mnt); !errors.Is(err, syscall.ENOTCONN) {
			t.Fatalf("after SIGKILL, stat: %v, want ENOTCONN", err)
		}
	}

	kill()
	r := mustRun(t, "close", fx.mnt)
	if !strings.Contains(r.stderr, "stale") {
		t.Errorf("close of a stale mount said %q", r.stderr)
	}
	if _, err := os.Stat(fx.mnt); err != nil {
		t.Fatalf("mount point after close: %v", err)
	}
	if _, ok := findMount(fx.mnt); ok {
		t.Fatal("stale mount still listed after close")
	}

	kill()
	fx.openBackground(t)
	mustRun(t, "close", fx.mnt)
	if _, ok := findMount(fx.mnt); ok {
		t.Fatal("still mounted after close")
	}
}

// TestOpenReadWrite writes through the mounted file with unaligned
// offsets and reads back, then checks read-only mounts and errors.
func TestOpenReadWrite(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 4<<20)
	fx.openBackground(t)
	file := filepath.Join(fx.mnt, "disk.raw")
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("unaligned write across a sector boundary")
	if _, err := f.WriteAt(data, 1000-7); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 4<<20); err == nil {
		t.Error("write past the end succeeded")
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 1000-7); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %q, %v", got, err)
	}
	if err := f.Truncate(1 << 20); err == nil {
		t.Error("truncating the mounted file succeeded")
	}
	f.Close()
	// A second open on the same mount point refuses.
	if r := cryptimg(t, "", "open", "-d", fx.key, fx.img, fx.mnt); r.code != exitFailure || !strings.Contains(r.stderr, "already mounted") {
		t.Errorf("open on a mounted point: exit %d, %q", r.code, r.stderr)
	}
	mustRun(t, "close", fx.mnt)

	fx.openBackground(t, "--read-only")
	if _, err := os.OpenFile(file, os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("read-write open of a read-only mount: %v, want EROFS", err)
	}
	b, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(b[1000-7:1000-7+len(data)], data) {
		t.Errorf("read-only mount content: %v", err)
	}
	mustRun(t, "close", fx.mnt)

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"close", fx.mnt}, exitFailure, "nothing is mounted there"},
		{[]string{"close", fx.dir}, exitFailure, "nothing is mounted there"},
		{[]string{"open", "-d", writeFile(t, filepath.Join(fx.dir, "bad"), "nope"), fx.img, fx.mnt}, exitNoKey, ""},
		{[]string{"open", "-d", fx.key, fx.key, fx.mnt}, exitBadImage, ""},
		{[]string{"open", "-d", fx.key, fx.img, fx.key}, exitFailure, "not a directory"},
	} {
		if r := cryptimg(t, "", c.args...); r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
}

// TestOpenSignal: SIGINT or SIGTERM to a foreground open unmounts cleanly
// and exits 0, after flushing what was written.
func TestOpenSignal(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 4<<20)
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(binary(t), "open", "-d", fx.key, fx.img, fx.mnt)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(fx.mnt, "disk.raw")
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := os.Stat(file); err == nil {
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("open did not mount within 20s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		msg := []byte("written before signal " + sig.String())
		f, err := os.OpenFile(file, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(msg, int64(i)*4096+3); err != nil {
			t.Fatal(err)
		}
		f.Close()
		cmd.Process.Signal(sig)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%v: open exited with %v, want 0", sig, err)
		}
		if _, ok := findMount(fx.mnt); ok {
			t.Fatalf("%v: still mounted", sig)
		}
		out := filepath.Join(fx.dir, "out"+sig.String())
		mustRun(t, "decrypt", "-d", fx.key, fx.img, out)
		b, _ := os.ReadFile(out)
		if !bytes.Equal(b[int64(i)*4096+3:][:len(msg)], msg) {
			t.Errorf("%v: write before the signal is missing", sig)
		}
	}
}
