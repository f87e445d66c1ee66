package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/image/filelock"
)

const (
	veritySalt = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	verityUUID = "12345678-9abc-def0-1234-56789abcdef0"
)

// veritysetup runs veritysetup and returns its stdout and exit status.
func veritysetup(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(requireTool(t, "veritysetup"), args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// TestVerityFormatMatchesVeritysetup formats the same data with the same
// salt and UUID with both programs: the hash files are byte for byte the
// same, and so is what they print (the file name aside).
func TestVerityFormatMatchesVeritysetup(t *testing.T) {
	dir := t.TempDir()
	// 300 blocks and a tail: not a multiple of the fanout, a partial
	// last block that neither covers.
	data := randomFile(t, dir, "data", 300*4096+100)
	cases := [][]string{
		nil,
		{"--no-superblock"},
		{"--hash-offset", "8192"},
		{"--hash-offset", "1536"},
		{"--no-superblock", "--hash-offset", "6144"},
		{"--data-block-size", "512", "--hash-block-size", "1024"},
		{"--data-block-size", "1024", "--hash-block-size", "512", "--hash", "sha1"},
		{"--hash", "sha512", "--salt", "-"},
		{"--format", "0", "--hash", "sha1", "--data-blocks", "205"},
		{"--data-blocks", "1"},
		{"--salt", "0102030405"},
	}
	for _, extra := range cases {
		args := append([]string{"--salt", veritySalt, "--uuid", verityUUID}, extra...)
		want := filepath.Join(dir, "want.verity")
		got := filepath.Join(dir, "got.verity")
		os.Remove(want)
		os.Remove(got)
		vout, code := veritysetup(t, append([]string{"format", data, want}, args...)...)
		if code != 0 {
			t.Fatalf("veritysetup format %v: exit %d", extra, code)
		}
		r := mustRun(t, append([]string{"verity", "format", data, got}, args...)...)
		sameContent(t, got, want)
		if strings.ReplaceAll(r.stdout, got, "HASH") != strings.ReplaceAll(vout, want, "HASH") {
			t.Errorf("%v: cryptimg printed\n%s\nveritysetup\n%s", extra, r.stdout, vout)
		}
	}
}

// TestVeritySharedFile puts the tree after the data in one file with
// --hash-offset, as veritysetup does, and refuses a tree over the data.
func TestVeritySharedFile(t *testing.T) {
	dir := t.TempDir()
	img := randomFile(t, dir, "img", 1<<20)
	want := filepath.Join(dir, "want.img")
	b, _ := os.ReadFile(img)
	writeFile(t, want, string(b))
	args := []string{"--salt", veritySalt, "--uuid", verityUUID, "--data-blocks", "100", "--hash-offset", "409600"}
	for _, nosb := range [][]string{nil, {"--no-superblock"}} {
		if _, code := veritysetup(t, append(append([]string{"format", want, want}, args...), nosb...)...); code != 0 {
			t.Fatalf("veritysetup format: exit %d", code)
		}
		mustRun(t, append(append([]string{"verity", "format", img, img}, args...), nosb...)...)
		sameContent(t, img, want)
	}
	r := cryptimg(t, "", "verity", "format", img, img, "--data-blocks", "101", "--hash-offset", "409600")
	if r.code != exitFailure || !strings.Contains(r.stderr, "overlaps the hash area") {
		t.Fatalf("tree over its data: exit %d, %s", r.code, r.stderr)
	}
	sameContent(t, img, want)
}

// TestVerityVerifyInterop checks each program's trees with the other's
// verify, and a byte flipped in the data and in the tree with both: exit
// 4 from cryptimg, naming the block, and a failure from veritysetup.
func TestVerityVerifyInterop(t *testing.T) {
	dir := t.TempDir()
	data := randomFile(t, dir, "data", 300*4096)
	ours := filepath.Join(dir, "ours.verity")
	theirs := filepath.Join(dir, "theirs.verity")
	rootFile := filepath.Join(dir, "root")
	r := mustRun(t, "verity", "format", data, ours, "--root-hash-file", rootFile, "--json")
	var j verityJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	rb, _ := os.ReadFile(rootFile)
	if string(rb) != j.RootHash || len(j.RootHash) != 64 || j.DataBlocks != 300 || j.HashBlocks != 4 || j.HashDeviceSize != 5*4096 {
		t.Fatalf("--json %+v, root hash file %q", j, rb)
	}
	if _, code := veritysetup(t, "verify", data, ours, j.RootHash); code != 0 {
		t.Fatalf("veritysetup verify of cryptimg's tree: exit %d", code)
	}
	vout, code := veritysetup(t, "format", data, theirs)
	if code != 0 {
		t.Fatal("veritysetup format failed")
	}
	theirRoot := vout[strings.Index(vout, "Root hash:")+len("Root hash:"):]
	theirRoot = strings.Fields(theirRoot)[0]
	mustRun(t, "verity", "verify", data, theirs, theirRoot)
	mustRun(t, "verity", "verify", data, ours, "--root-hash-file", rootFile)

	flip := func(path string, off int64) string {
		b, _ := os.ReadFile(path)
		b[off] ^= 0x10
		return writeFile(t, fmt.Sprintf("%s.bad%d", path, off), string(b))
	}
	badData := flip(data, 123*4096+77)
	badLeaf := flip(ours, 4*4096+3) // level 1 is hash block 1, level 0 blocks 2-4
	badTop := flip(ours, 1*4096+40)
	for _, c := range []struct {
		data, hash, says string
	}{
		{badData, ours, "data block 123 (byte 503808 of the data) does not match its hash"},
		{data, badLeaf, "hash block 2 of level 0 (byte 16384 of the hash device) does not match its hash"},
		{data, badTop, "hash block 0 of level 1 (byte 4096 of the hash device) does not match the root hash"},
	} {
		r := cryptimg(t, "", "verity", "verify", c.data, c.hash, j.RootHash)
		if r.code != exitBadImage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("cryptimg verify %s %s: exit %d, %q; want 4 and %q", c.data, c.hash, r.code, r.stderr, c.says)
		}
		if _, code := veritysetup(t, "verify", c.data, c.hash, j.RootHash); code == 0 {
			t.Errorf("veritysetup verify %s %s accepted it", c.data, c.hash)
		}
	}
	// Truncated: the data, and the hash device, shorter than the tree.
	b, _ := os.ReadFile(data)
	shortData := writeFile(t, data+".short", string(b[:299*4096]))
	b, _ = os.ReadFile(ours)
	shortHash := writeFile(t, ours+".short", string(b[:len(b)-1]))
	for _, c := range []struct{ data, hash, says string }{
		{shortData, ours, shortData + ": dm-verity device too small: the data has 1224704 bytes, the tree needs 1228800"},
		{data, shortHash, shortHash + ": dm-verity device too small: the hash device has 20479 bytes, the tree needs 20480"},
	} {
		r := cryptimg(t, "", "verity", "verify", c.data, c.hash, j.RootHash)
		if r.code != exitBadImage || !strings.Contains(r.stderr, c.says) {
			t.Errorf("cryptimg verify %s %s: exit %d, %q; want 4 and %q", c.data, c.hash, r.code, r.stderr, c.says)
		}
		if _, code := veritysetup(t, "verify", c.data, c.hash, j.RootHash); code == 0 {
			t.Errorf("veritysetup verify %s %s accepted it", c.data, c.hash)
		}
	}

	// A tree without a superblock: the parameters come from the flags.
	nosb := filepath.Join(dir, "nosb.verity")
	mustRun(t, "verity", "format", data, nosb, "--no-superblock", "--salt", veritySalt, "--hash-block-size", "1024", "--root-hash-file", rootFile)
	rb, _ = os.ReadFile(rootFile)
	if _, code := veritysetup(t, "verify", data, nosb, string(rb), "--no-superblock", "--salt", veritySalt, "--hash-block-size", "1024"); code != 0 {
		t.Fatalf("veritysetup verify --no-superblock: exit %d", code)
	}
	mustRun(t, "verity", "verify", data, nosb, string(rb), "--no-superblock", "--salt", veritySalt, "--hash-block-size", "1024")
	if r := cryptimg(t, "", "verity", "verify", data, nosb, string(rb), "--no-superblock", "--hash-block-size", "1024"); r.code != exitBadImage {
		t.Fatalf("without the salt: exit %d, %s", r.code, r.stderr)
	}
	if r := cryptimg(t, "", "verity", "verify", data, ours, j.RootHash, "--salt", veritySalt); r.code != exitFailure {
		t.Fatalf("--salt with a superblock: exit %d, %s", r.code, r.stderr)
	}
}

// TestVerityDumpMatchesVeritysetup compares dump's output with
// veritysetup dump's, at offset 0 and at a hash offset, and refuses a
// file without a superblock with exit 4.
func TestVerityDumpMatchesVeritysetup(t *testing.T) {
	dir := t.TempDir()
	data := randomFile(t, dir, "data", 129*4096)
	for _, extra := range [][]string{nil, {"--hash-offset", "8192"}, {"--hash", "sha1", "--salt", "-", "--format", "0"}} {
		hash := filepath.Join(dir, "hash")
		os.Remove(hash)
		mustRun(t, append([]string{"verity", "format", data, hash}, extra...)...)
		var off []string
		if len(extra) > 0 && extra[0] == "--hash-offset" {
			off = extra
		}
		vout, code := veritysetup(t, append([]string{"dump", hash}, off...)...)
		if code != 0 {
			t.Fatalf("veritysetup dump: exit %d", code)
		}
		r := mustRun(t, append([]string{"verity", "dump", hash}, off...)...)
		if r.stdout != vout {
			t.Errorf("%v: cryptimg dump\n%s\nveritysetup dump\n%s", extra, r.stdout, vout)
		}
		r = mustRun(t, append([]string{"verity", "dump", "--json", hash}, off...)...)
		var j verityJSON
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.DataBlocks != 129 || j.RootHash != "" || !strings.Contains(vout, j.UUID) {
			t.Errorf("dump --json: %s (%v)", r.stdout, err)
		}
	}
	if r := cryptimg(t, "", "verity", "dump", data); r.code != exitBadImage || !strings.Contains(r.stderr, "no superblock") {
		t.Fatalf("dump of data: exit %d, %s", r.code, r.stderr)
	}
}

// TestVerityUsage: what veritysetup refuses is exit 1 with the reason, and
// nothing is written; --quiet keeps format's report off stdout.
func TestVerityUsage(t *testing.T) {
	dir := t.TempDir()
	data := randomFile(t, dir, "data", 64<<10)
	hash := filepath.Join(dir, "hash")
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"verity", "bogus"}, `unknown command "bogus"`},
		{[]string{"verity", "format", data, hash, "--uuid", "12345678-9abc"}, "UUID"},
		{[]string{"verity", "format", data, hash, "--salt", "xyz"}, "not hex"},
		{[]string{"verity", "format", data, hash, "--salt", strings.Repeat("00", 257)}, "salt of 257 bytes"},
		{[]string{"verity", "format", data, hash, "--data-block-size", "256"}, "block size 256"},
		{[]string{"verity", "format", data, hash, "--hash", "md5"}, `hash "md5"`},
		{[]string{"verity", "format", data, hash, "--hash-offset", "100"}, "hash offset 100"},
		{[]string{"verity", "format", data, hash, "--data-blocks", "17"}, "17 data blocks of 4096 bytes do not fit"},
		{[]string{"verity", "verify", data, hash}, "give the root hash"},
	} {
		r := cryptimg(t, "", c.args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d, %q; want 1 and %q", c.args, r.code, r.stderr, c.says)
		}
		noFile(t, hash)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
	if r := mustRun(t, "--quiet", "verity", "format", data, hash); r.stdout != "" {
		t.Errorf("--quiet printed %q", r.stdout)
	}
}

// TestVerityLocks: format writes an existing HASH under an exclusive lock
// and reads DATA under a shared one; verify and dump only read.
func TestVerityLocks(t *testing.T) {
	dir := t.TempDir()
	data := randomFile(t, dir, "data", 64<<10)
	hash := filepath.Join(dir, "hash")
	r := mustRun(t, "verity", "format", data, hash, "--json")
	var j verityJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	before := fileSHA(t, hash)
	for _, c := range []struct {
		file string
		held filelock.Mode
		args []string
	}{
		{hash, filelock.Shared, []string{"verity", "format", data, hash}},
		{data, filelock.Exclusive, []string{"verity", "format", data, hash}},
		{data, filelock.Exclusive, []string{"verity", "format", data, filepath.Join(dir, "new")}},
		{data, filelock.Exclusive, []string{"verity", "verify", data, hash, j.RootHash}},
		{hash, filelock.Exclusive, []string{"verity", "verify", data, hash, j.RootHash}},
		{hash, filelock.Exclusive, []string{"verity", "dump", hash}},
	} {
		release := holdLock(t, c.file, c.held)
		r := cryptimg(t, "", c.args...)
		release()
		how := map[filelock.Mode]string{filelock.Shared: "read-only", filelock.Exclusive: "read-write"}[c.held]
		wantBusy(t, r, c.file, how, os.Getpid(), "cryptimg.test)")
	}
	if fileSHA(t, hash) != before {
		t.Error("a locked hash file changed")
	}
	noFile(t, filepath.Join(dir, "new"))
	// Readers share.
	release := holdLock(t, data, filelock.Shared)
	defer release()
	mustRun(t, "verity", "verify", data, hash, j.RootHash)
	mustRun(t, "verity", "format", data, filepath.Join(dir, "new"))
}
