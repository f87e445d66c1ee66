package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

func gptOf(t *testing.T, path string) *gpt.Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := gpt.Read(file.New(f, true), 512, 512)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	if table.RecoveredFromBackup {
		t.Fatalf("%s: primary GPT invalid", filepath.Base(path))
	}
	return table
}

func bytesOf(t *testing.T, disk []byte, p *gpt.Partition) []byte {
	t.Helper()
	return disk[p.GetStart() : p.GetStart()+p.GetSize()]
}

// TestPartitionEncrypt is the partition test: encrypt partition 2
// of a GPT disk (FAT32 ESP, ext4 root, a third partition), check the
// table with sfdisk, the untouched partitions byte for byte, the container
// with cryptsetup and qemu-img, then decrypt --partition back to the
// original bytes.
func TestPartitionEncrypt(t *testing.T) {
	sfdisk := requireTool(t, "sfdisk")
	cryptsetup := requireTool(t, "cryptsetup")
	qemuImg := requireTool(t, "qemu-img")
	dir := t.TempDir()
	orig := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "partition passphrase")
	enc := filepath.Join(dir, "enc.img")
	r := mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--partition", "2", "--json", orig, enc)
	if !strings.Contains(r.stdout, `"op":"encrypt"`) {
		t.Errorf("--json summary: %s", r.stdout)
	}

	if out, err := exec.Command(sfdisk, "--verify", enc).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("sfdisk --verify: %v\n%s", err, out)
	}
	before, after := gptOf(t, orig), gptOf(t, enc)
	origBytes, _ := os.ReadFile(orig)
	encBytes, _ := os.ReadFile(enc)
	payload := after.Partitions[1].GetSize() - before.Partitions[1].GetSize()
	if payload <= 0 || payload%(1<<20) != 0 || int64(len(encBytes)) != int64(len(origBytes))+payload {
		t.Fatalf("partition 2 grew by %d bytes, disk by %d", payload, len(encBytes)-len(origBytes))
	}
	if after.Partitions[0].GetStart() != before.Partitions[0].GetStart() ||
		!bytes.Equal(bytesOf(t, origBytes, before.Partitions[0]), bytesOf(t, encBytes, after.Partitions[0])) {
		t.Error("partition 1 is not byte-identical")
	}
	p2 := after.Partitions[1]
	if p2.Start != before.Partitions[1].Start || p2.Type != gpt.LinuxRootX86_64 || p2.Name != "root" ||
		p2.GUID != before.Partitions[1].GUID || p2.Attributes != before.Partitions[1].Attributes {
		t.Errorf("partition 2 entry: %+v", p2)
	}
	p3 := after.Partitions[2]
	if p3.GetStart() != before.Partitions[2].GetStart()+payload || p3.GetStart()%(1<<20) != 0 ||
		!bytes.Equal(bytesOf(t, origBytes, before.Partitions[2]), bytesOf(t, encBytes, p3)) {
		t.Errorf("partition 3 moved to %d (from %d) or changed", p3.GetStart(), before.Partitions[2].GetStart())
	}

	// Partition 2, extracted, is a LUKS1 image that cryptsetup unlocks and
	// qemu-img decrypts to the old partition.
	part := filepath.Join(dir, "part2.luks")
	if err := os.WriteFile(part, bytesOf(t, encBytes, p2), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, cryptsetup, "open", "--test-passphrase", "--key-file", key, part)
	plain := filepath.Join(dir, "part2.raw")
	sh(t, qemuImg, "convert", "--object", "secret,id=s,file="+key, "--image-opts",
		"driver=luks,key-secret=s,file.filename="+part, "-O", "raw", plain)
	got, _ := os.ReadFile(plain)
	if !bytes.Equal(got, bytesOf(t, origBytes, before.Partitions[1])) {
		t.Error("qemu-img's decryption of partition 2 differs from the old partition")
	}

	// decrypt --partition restores the original disk byte for byte.
	back := filepath.Join(dir, "back.img")
	mustRun(t, "decrypt", "-d", key, "--partition", "2", enc, back)
	sameContent(t, orig, back)

	// ls reads the untouched ESP of the partly encrypted disk? No: ls
	// expects a wholly encrypted image. It must say so, not crash.
	if r := cryptimg(t, "", "ls", "-d", key, enc); r.code != exitBadImage {
		t.Errorf("ls of a partly encrypted disk: exit %d, %s", r.code, r.stderr)
	}
}

// TestPartitionLUKS2: encrypt --type luks2 --partition makes a LUKS2
// container in the partition, with 512-byte sectors because the partition
// is not whole 4096-byte sectors (--sector-size 4096 is refused there); the
// other partitions stay byte-identical, cryptsetup opens it, and decrypt
// --partition gives the original disk back.
func TestPartitionLUKS2(t *testing.T) {
	sfdisk := requireTool(t, "sfdisk")
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	orig := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "partition passphrase")
	enc := filepath.Join(dir, "enc.img")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--partition", "2", orig, enc)
	if out, err := exec.Command(sfdisk, "--verify", enc).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("sfdisk --verify: %v\n%s", err, out)
	}
	before, after := gptOf(t, orig), gptOf(t, enc)
	origBytes, _ := os.ReadFile(orig)
	encBytes, _ := os.ReadFile(enc)
	for _, i := range []int{0, 2} {
		if !bytes.Equal(bytesOf(t, origBytes, before.Partitions[i]), bytesOf(t, encBytes, after.Partitions[i])) {
			t.Errorf("partition %d is not byte-identical", i+1)
		}
	}
	if grow := after.Partitions[1].GetSize() - before.Partitions[1].GetSize(); grow != 16<<20 {
		t.Errorf("partition 2 grew by %d bytes, want the 16 MiB LUKS2 header", grow)
	}
	part := filepath.Join(dir, "part2.luks")
	if err := os.WriteFile(part, bytesOf(t, encBytes, after.Partitions[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, cs, "open", "--test-passphrase", "--key-file", key, part)
	if d := sh(t, cs, "luksDump", part); !strings.Contains(d, "Version:       \t2") || !strings.Contains(d, "sector: 512 [bytes]") {
		t.Errorf("luksDump of partition 2:\n%s", d)
	}
	back := filepath.Join(dir, "back.img")
	mustRun(t, "decrypt", "-d", key, "--partition", "2", enc, back)
	sameContent(t, orig, back)

	bad := filepath.Join(dir, "bad.img")
	if r := cryptimg(t, "", "encrypt", "-d", key, "--type", "luks2", "--sector-size", "4096", "--pbkdf", "pbkdf2", fastIter, "--partition", "2", orig, bad); r.code != 1 || !strings.Contains(r.stderr, "4096-byte sectors") {
		t.Errorf("--sector-size 4096 on an unaligned partition: exit %d, %s", r.code, r.stderr)
	}
	noFile(t, bad)
}

func TestPartitionOptions(t *testing.T) {
	dir := t.TempDir()
	orig := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	enc := filepath.Join(dir, "enc.img")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--partition", "2",
		"--partition-type", "ca7d7ccb-63ed-4c53-861c-1742536059cc", "--partition-name", "luks-root", orig, enc)
	p := gptOf(t, enc).Partitions[1]
	if p.Type != gpt.LinuxLUKS || p.Name != "luks-root" {
		t.Errorf("partition 2 after --partition-type/--partition-name: %s %q", p.Type, p.Name)
	}
	back := filepath.Join(dir, "back.img")
	mustRun(t, "decrypt", "-d", key, "--partition", "2", "--partition-type", string(gpt.LinuxRootX86_64), "--partition-name", "root", enc, back)
	sameContent(t, orig, back)

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"encrypt", "-d", key, "--partition", "4", orig, filepath.Join(dir, "x")}, exitFailure, "partition 4: no such partition (the disk has 1, 2, 3)"},
		{[]string{"encrypt", "-d", key, "--partition", "0", orig, filepath.Join(dir, "x")}, exitFailure, "--partition must be"},
		{[]string{"encrypt", "-d", key, "--partition-name", "x", orig, filepath.Join(dir, "x")}, exitFailure, "need --partition"},
		{[]string{"encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--partition", "1", "--partition-type", "nope", orig, filepath.Join(dir, "x")}, exitFailure, "invalid partition type"},
		{[]string{"encrypt", "-d", key, "--partition", "1", key, filepath.Join(dir, "x")}, exitFailure, "image size is not a multiple of 512 bytes"},
		{[]string{"decrypt", "-d", key, "--partition", "1", enc, filepath.Join(dir, "x")}, exitBadImage, ""},
		{[]string{"decrypt", "-d", writeFile(t, filepath.Join(dir, "bad"), "bad"), "--partition", "2", enc, filepath.Join(dir, "x")}, exitNoKey, ""},
	} {
		r := cryptimg(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
	noFile(t, filepath.Join(dir, "x"))
}
