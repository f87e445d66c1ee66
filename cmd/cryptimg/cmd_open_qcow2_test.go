package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenMountExt4Qcow2 is the mount test on a qcow2+LUKS image:
// open, losetup, mkfs.ext4, mount, write files, umount, losetup -d,
// close; then decrypt to raw, e2fsck -fn and the files, and qemu-img check
// finds the refcounts of the clusters the writes allocated exact.
func TestOpenMountExt4Qcow2(t *testing.T) {
	requireFUSE(t)
	requireRoot(t)
	losetup := requireTool(t, "losetup")
	mkfs := requireTool(t, "mkfs.ext4")
	e2fsck := requireTool(t, "e2fsck")
	debugfs := requireTool(t, "debugfs")
	qi := requireTool(t, "qemu-img")
	fx := newOpenFixture(t, 64<<20)
	// The same empty plaintext, as qcow2+LUKS (nothing allocated yet).
	plain := filepath.Join(fx.dir, "plain.raw")
	fx.img = filepath.Join(fx.dir, "disk.qcow2")
	mustRun(t, "encrypt", "-d", fx.key, "--pbkdf-force-iterations", "1000", "-O", "qcow2", plain, fx.img)
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
	writeFile(t, filepath.Join(fsdir, "hello.txt"), "hello through qcow2\n")
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

	qemuCheck(t, qi, fx.key, fx.img, true)
	out := filepath.Join(fx.dir, "out.raw")
	mustRun(t, "decrypt", "-d", fx.key, "-O", "raw", fx.img, out)
	qemuCompare(t, qi, fx.key, qcowOpts(fx.img), rawOpts(out))
	sh(t, e2fsck, "-fn", out)
	if got := sh(t, debugfs, "-R", "cat /hello.txt", out); !strings.Contains(got, "hello through qcow2\n") {
		t.Errorf("debugfs cat /hello.txt: %q", got)
	}
	dump := filepath.Join(fx.dir, "big.dump")
	sh(t, debugfs, "-R", "dump /sub/big.bin "+dump, out)
	if got, err := os.ReadFile(dump); err != nil || !bytes.Equal(got, big) {
		t.Errorf("sub/big.bin after decrypt differs (%d bytes, %v)", len(got), err)
	}
	if r := mustRun(t, "cat", "-d", fx.key, fx.img, "0:/hello.txt"); r.stdout != "hello through qcow2\n" {
		t.Errorf("cat 0:/hello.txt = %q", r.stdout)
	}
}

// TestLsCatQcow2 lists and reads files of a GPT disk encrypted as
// qcow2+LUKS.
func TestLsCatQcow2(t *testing.T) {
	dir := t.TempDir()
	plain := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "ls passphrase")
	img := filepath.Join(dir, "disk.qcow2")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "-O", "qcow2", plain, img)
	r := mustRun(t, "ls", "-d", key, img)
	for _, want := range []string{"table: gpt", "ESP", "root", "extra"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("ls output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, "ls", "-d", key, img, "2:home/user")
	if !strings.Contains(r.stdout, "notes.txt") {
		t.Errorf("ls 2:home/user:\n%s", r.stdout)
	}
	for name, want := range testDisk.espFiles {
		if r := mustRun(t, "cat", "-d", key, img, "1:/"+name); r.stdout != want {
			t.Errorf("cat 1:/%s = %q, want %q", name, r.stdout, want)
		}
	}
	for name, want := range testDisk.rootFiles {
		if r := mustRun(t, "cat", "-d", key, img, "2:"+name); r.stdout != want {
			t.Errorf("cat 2:%s = %q, want %q", name, r.stdout, want)
		}
	}
}
