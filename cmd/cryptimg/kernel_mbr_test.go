package main

import (
	"path/filepath"
	"testing"
)

// kernelMBRChecks registers the kernel oracle's checks of encrypt
// --partition on an MBR disk (mbrDisk: FAT32, ext4, a third partition):
// partition 2 encrypted as LUKS1, as LUKS2, and as LUKS1 in a qcow2 output
// that qemu-img turns back into a raw disk for the guest. For each, the
// kernel scans the DOS table, /dev/vdX1 and /dev/vdX3 are the old bytes,
// cryptsetup takes /dev/vdX2 for LUKS (of the right version) and dm-crypt
// reads partition 2's old contents from it. It boots nothing: the caller
// runs o, which also asserts the isLuks checks' exit status.
func kernelMBRChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	qi := requireTool(t, "qemu-img")
	orig := mbrDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "mbr-key"), "mbr partition passphrase")
	var want [3][32]byte
	for i := range want {
		off, size := partRange(t, "mbr", orig, i+1)
		want[i] = shaOf(fileRange(t, orig, off, size))
	}
	add := func(name, img, isLuks string) {
		dev := o.disk(img)
		o.raw(name+"-partition-1", dev+"1", want[0])
		o.readsDev(name+"-partition-2", dev+"2", key, want[1])
		o.raw(name+"-partition-3", dev+"3", want[2])
		o.check(name+"-partition-2-is-luks", "cryptsetup isLuks "+isLuks+dev+"2")
	}

	enc := filepath.Join(dir, "mbr-luks1.img")
	mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", orig, enc)
	add("mbr-luks1", enc, "--type luks1 ")

	enc2 := filepath.Join(dir, "mbr-luks2.img")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--partition", "2", orig, enc2)
	add("mbr-luks2", enc2, "--type luks2 ")

	q := filepath.Join(dir, "mbr-luks1.qcow2")
	mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", "-O", "qcow2", orig, q)
	encq := filepath.Join(dir, "mbr-qcow2.img")
	sh(t, qi, "convert", "-O", "raw", q, encq)
	add("mbr-qcow2", encq, "")
}
