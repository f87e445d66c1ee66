package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// verityExt4 makes a 4 MiB ext4 filesystem holding /hello.txt and
// /big.txt (whose first data block is the only place the test phrase is),
// and returns its path and the byte offset of that phrase in it.
func verityExt4(t *testing.T, dir string) (string, int64) {
	t.Helper()
	mkfs := requireTool(t, "mkfs.ext4")
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o755)
	writeFile(t, filepath.Join(tree, "hello.txt"), "hello under verity\n")
	big := strings.Repeat("verity-protected line of text\n", 1000) // 30000 bytes
	writeFile(t, filepath.Join(tree, "big.txt"), big)
	fs := filepath.Join(dir, "fs.ext4")
	f, _ := os.Create(fs)
	f.Truncate(4 << 20)
	f.Close()
	sh(t, mkfs, "-q", "-F", "-b", "4096", "-E", "root_owner=0:0", "-d", tree, fs)
	b, err := os.ReadFile(fs)
	if err != nil {
		t.Fatal(err)
	}
	off := bytes.Index(b, []byte(big[:4096]))
	if off < 0 {
		t.Fatal("big.txt's first block not found in the filesystem")
	}
	return fs, int64(off)
}

// verityRoot runs verity format and returns the root hash in hex.
func verityRoot(t *testing.T, args ...string) string {
	t.Helper()
	r := mustRun(t, append([]string{"verity", "format", "--salt", "0011"}, args...)...)
	root := ""
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "Root hash:") && len(f) == 3 {
			root = f[2]
		}
	}
	if len(root) != 64 {
		t.Fatalf("verity format printed %q", r.stdout)
	}
	return root
}

// wantBadBlock checks that r failed with exit 4 and one line naming data
// block blk.
func wantBadBlock(t *testing.T, r result, blk int64) {
	t.Helper()
	want := fmt.Sprintf("data block %d ", blk)
	if r.code != 4 || !strings.Contains(r.stderr, want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("exit %d, want 4 and one line naming %q:\n%s", r.code, want, r.stderr)
	}
}

// TestVerityCatPlain: cat and ls of a plain ext4 image under its tree (in a
// separate hash file, and in the image itself after the data) read; a
// flipped byte in big.txt's first block makes cat of it exit 4 naming the
// block, while hello.txt still reads; a wrong root hash reads nothing.
func TestVerityCatPlain(t *testing.T) {
	dir := t.TempDir()
	img, off := verityExt4(t, dir)
	hash := filepath.Join(dir, "fs.verity")
	root := verityRoot(t, img, hash)
	vflags := []string{"--verity-hash", hash, "--root-hash", root}
	if r := mustRun(t, append(append([]string{"cat"}, vflags...), img, "0:/hello.txt")...); r.stdout != "hello under verity\n" {
		t.Fatalf("cat 0:/hello.txt = %q", r.stdout)
	}
	if r := mustRun(t, append(append([]string{"ls"}, vflags...), img, "0:/")...); !strings.Contains(r.stdout, "big.txt") {
		t.Fatalf("ls 0:/:\n%s", r.stdout)
	}
	// The tree inside the image, after its 4 MiB of data.
	shared := filepath.Join(dir, "shared.img")
	b, _ := os.ReadFile(img)
	os.WriteFile(shared, b, 0o600)
	sroot := verityRoot(t, "--data-blocks", "1024", "--hash-offset", "4194304", shared, shared)
	if sroot != root {
		t.Fatalf("same data and salt, root %s then %s", root, sroot)
	}
	sflags := []string{"--verity-hash-offset", "4194304", "--root-hash", root}
	if r := mustRun(t, append(append([]string{"cat"}, sflags...), shared, "0:/big.txt")...); len(r.stdout) != 30000 {
		t.Fatalf("cat 0:/big.txt with the tree inside: %d bytes", len(r.stdout))
	}

	flipByte(t, img, off+100)
	flipByte(t, shared, off+100)
	wantBadBlock(t, cryptimg(t, "", append(append([]string{"cat"}, vflags...), img, "0:/big.txt")...), off/4096)
	wantBadBlock(t, cryptimg(t, "", append(append([]string{"cat"}, sflags...), shared, "0:/big.txt")...), off/4096)
	if r := mustRun(t, append(append([]string{"cat"}, vflags...), img, "0:/hello.txt")...); r.stdout != "hello under verity\n" {
		t.Fatalf("cat 0:/hello.txt after the flip = %q", r.stdout)
	}
	bad := "0" + root[1:]
	if root[0] == '0' {
		bad = "1" + root[1:]
	}
	if r := cryptimg(t, "", "cat", "--verity-hash", hash, "--root-hash", bad, img, "0:/hello.txt"); r.code != 4 || !strings.Contains(r.stderr, "root hash") {
		t.Fatalf("wrong root hash: exit %d\n%s", r.code, r.stderr)
	}
	if r := cryptimg(t, "", "cat", "--verity-hash", hash, img, "0:/hello.txt"); r.code != 1 || !strings.Contains(r.stderr, "--root-hash") {
		t.Fatalf("no root hash: exit %d\n%s", r.code, r.stderr)
	}
}

// verityEncrypted encrypts the ext4 of verityExt4 with its tree made over
// the plaintext, and returns the image, the key, the hash file, the root
// hash, and where big.txt's first block is in the image's file.
func verityEncrypted(t *testing.T) (dir, img, key, hash, root string, fileOff, plainOff int64) {
	t.Helper()
	dir = t.TempDir()
	plain, off := verityExt4(t, dir)
	hash = filepath.Join(dir, "fs.verity")
	root = verityRoot(t, plain, hash)
	key = writeFile(t, filepath.Join(dir, "key"), "verity passphrase")
	img = filepath.Join(dir, "fs.luks")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, img)
	st, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	// Raw LUKS: the header, then the payload to the end of the file.
	return dir, img, key, hash, root, st.Size() - 4<<20 + off, off
}

// TestVerityCatEncrypted: the tree covers the decrypted payload; a flipped
// ciphertext byte in big.txt's first block decrypts to a block that fails
// its hash: cat exits 4 naming it, where without the tree it would print
// garbage.
func TestVerityCatEncrypted(t *testing.T) {
	_, img, key, hash, root, fileOff, plainOff := verityEncrypted(t)
	args := func(spec string) []string {
		return []string{"cat", "-d", key, "--verity-hash", hash, "--root-hash", root, img, spec}
	}
	if r := mustRun(t, args("0:/big.txt")...); len(r.stdout) != 30000 {
		t.Fatalf("cat 0:/big.txt: %d bytes", len(r.stdout))
	}
	// A tree of the image file itself (ciphertext and header: verity
	// under crypt, what encrypt --verity makes) is taken as such: it
	// covers more than the plaintext.
	chash := filepath.Join(filepath.Dir(img), "file.verity")
	croot := verityRoot(t, img, chash)
	cargs := func(spec string) []string {
		return []string{"cat", "-d", key, "--verity-hash", chash, "--root-hash", croot, img, spec}
	}
	if r := mustRun(t, cargs("0:/big.txt")...); len(r.stdout) != 30000 {
		t.Fatalf("cat 0:/big.txt under a tree of the file: %d bytes", len(r.stdout))
	}
	flipByte(t, img, fileOff+100)
	wantBadBlock(t, cryptimg(t, "", args("0:/big.txt")...), plainOff/4096)
	wantBadBlock(t, cryptimg(t, "", cargs("0:/big.txt")...), fileOff/4096)
	if r := mustRun(t, cargs("0:/hello.txt")...); r.stdout != "hello under verity\n" {
		t.Fatalf("cat 0:/hello.txt under a tree of the file after the flip = %q", r.stdout)
	}
	if r := mustRun(t, args("0:/hello.txt")...); r.stdout != "hello under verity\n" {
		t.Fatalf("cat 0:/hello.txt after the flip = %q", r.stdout)
	}
	if r := mustRun(t, "cat", "-d", key, img, "0:/big.txt"); len(r.stdout) != 30000 || strings.Count(r.stdout, "verity-protected line") == 1000 {
		t.Fatalf("without the tree the flip should read as garbage: %d bytes", len(r.stdout))
	}
}

// TestVerityOpenEIO mounts the encrypted image under its tree: the file
// holds the data blocks, reads of big.txt's flipped block fail with EIO,
// the blocks beside it read as the plaintext.
func TestVerityOpenEIO(t *testing.T) {
	requireFUSE(t)
	dir, img, key, hash, root, fileOff, plainOff := verityEncrypted(t)
	flipByte(t, img, fileOff+100)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	t.Cleanup(func() {
		if _, ok := findMount(mnt); ok {
			cryptimg(t, "", "close", mnt)
		}
		if _, ok := findMount(mnt); ok {
			lazyUnmount(mnt)
		}
	})
	out, err := exec.Command(binary(t), "open", "--background", "-d", key, "--verity-hash", hash, "--root-hash", root, img, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("open --background: %v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(mnt, "fs.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := f.Stat(); st.Size() != 4<<20 || st.Mode().Perm()&0o200 != 0 {
		t.Fatalf("mounted file: %v", st.Mode())
	}
	plain, _ := os.ReadFile(filepath.Join(dir, "fs.ext4"))
	blk := plainOff / 4096 * 4096
	b := make([]byte, 4096)
	if _, err := f.ReadAt(b, blk+10); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the bad block: %v, want EIO", err)
	}
	for _, o := range []int64{0, blk - 4096, blk + 4096} {
		if _, err := f.ReadAt(b, o); err != nil || !bytes.Equal(b, plain[o:o+4096]) {
			t.Fatalf("block at %d: %v or wrong bytes", o, err)
		}
	}
	f.Close()
	mustRun(t, "close", mnt)

	// A plain image with its tree inside, after the data: no key; the
	// background child gets the flags.
	shared := filepath.Join(dir, "shared.img")
	os.WriteFile(shared, plain, 0o600)
	sroot := verityRoot(t, "--data-blocks", "1024", "--hash-offset", "4194304", shared, shared)
	flipByte(t, shared, plainOff+100)
	out, err = exec.Command(binary(t), "open", "--background", "--verity-hash-offset", "4194304", "--root-hash", sroot, shared, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("open --background of the plain image: %v\n%s", err, out)
	}
	g, err := os.Open(filepath.Join(mnt, "shared.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if st, _ := g.Stat(); st.Size() != 4<<20 {
		t.Fatalf("mounted plain file: %d bytes, want the 4 MiB the tree covers", st.Size())
	}
	if _, err := g.ReadAt(b, blk); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the plain image's bad block: %v, want EIO", err)
	}
	if _, err := g.ReadAt(b, blk+4096); err != nil || !bytes.Equal(b, plain[blk+4096:blk+8192]) {
		t.Fatalf("the plain image's next block: %v or wrong bytes", err)
	}
}

// TestVerityPartitionRead: with --root-hash alone, ls/cat PART:PATH and
// open --partition N find the tree of partition N in the partition whose
// UUID is the root hash's last 128 bits (verity format --partition made
// both), on a plain disk and inside an encrypted one; a flipped byte of
// big.txt fails cat with exit 4 naming the block, and a FUSE read of it
// with EIO.
func TestVerityPartitionRead(t *testing.T) {
	dir := t.TempDir()
	disk := verityGPTDisk(t, dir, 12, "start=2048, size=16384, type="+typeRootX86+"\n")
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(tree, 0o755)
	writeFile(t, filepath.Join(tree, "hello.txt"), "hello from a verity partition\n")
	big := strings.Repeat("a line in a verity partition.\n", 1000)
	writeFile(t, filepath.Join(tree, "big.txt"), big)
	sh(t, requireTool(t, "mkfs.ext4"), "-q", "-F", "-b", "4096", "-E", "offset=1048576,root_owner=0:0", "-d", tree, disk, "8M")
	r := mustRun(t, "verity", "format", "--partition", "1", disk, "--salt", veritySalt)
	root := ""
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, "Root hash:") && len(f) == 3 {
			root = f[2]
		}
	}
	if len(root) != 64 {
		t.Fatalf("verity format --partition printed %q", r.stdout)
	}
	if r := mustRun(t, "cat", "--root-hash", root, disk, "1:/hello.txt"); r.stdout != "hello from a verity partition\n" {
		t.Fatalf("cat 1:/hello.txt = %q", r.stdout)
	}
	if r := cryptimg(t, "", "cat", "--root-hash", root, disk, "0:/hello.txt"); r.code != 1 {
		t.Fatalf("--root-hash alone with PART 0: exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(disk)
	off := int64(bytes.Index(b, []byte(big[:4096])))
	if off < 1<<20 {
		t.Fatalf("big.txt's first block at %d", off)
	}
	key := writeFile(t, filepath.Join(dir, "key"), "verity passphrase")
	enc := filepath.Join(dir, "disk.luks")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", disk, enc)
	st, _ := os.Stat(enc)
	if r := mustRun(t, "cat", "-d", key, "--root-hash", root, enc, "1:/big.txt"); r.stdout != big {
		t.Fatalf("cat 1:/big.txt inside the encrypted disk: %d bytes", len(r.stdout))
	}
	flipByte(t, disk, off+100)
	flipByte(t, enc, st.Size()-12<<20+off+100)
	blk := (off - 1<<20) / 4096 // in the partition
	wantBadBlock(t, cryptimg(t, "", "cat", "--root-hash", root, disk, "1:/big.txt"), blk)
	wantBadBlock(t, cryptimg(t, "", "cat", "-d", key, "--root-hash", root, enc, "1:/big.txt"), blk)
	if r := mustRun(t, "cat", "--root-hash", root, disk, "1:/hello.txt"); r.stdout != "hello from a verity partition\n" {
		t.Fatalf("cat 1:/hello.txt after the flip = %q", r.stdout)
	}

	requireFUSE(t)
	mnt := filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o755)
	t.Cleanup(func() {
		if _, ok := findMount(mnt); ok {
			cryptimg(t, "", "close", mnt)
		}
		if _, ok := findMount(mnt); ok {
			lazyUnmount(mnt)
		}
	})
	out, err := exec.Command(binary(t), "open", "--background", "--partition", "1", "--root-hash", root, disk, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("open --background --partition 1: %v\n%s", err, out)
	}
	f, err := os.Open(filepath.Join(mnt, "disk.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if st, _ := f.Stat(); st.Size() != 8<<20 {
		t.Fatalf("mounted partition: %d bytes, want 8 MiB", st.Size())
	}
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, blk*4096); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of the bad block: %v, want EIO", err)
	}
	if _, err := f.ReadAt(buf, blk*4096+4096); err != nil || !bytes.Equal(buf, b[off+4096:off+8192]) {
		t.Fatalf("the next block: %v or wrong bytes", err)
	}
}
