package main

import (
	"bytes"
	le "encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
)

// mbrLayout is the MBR disk mbrDisk builds, testDisk's geometry in
// sectors: a FAT32 partition, an ext4 one that is not whole MiB, and a
// small third one after a gap.
var mbrLayout = struct {
	size   int64
	starts [3]int64
	sizes  [3]int64
}{
	size:   testDisk.size,
	starts: [3]int64{testDisk.espStart / 512, testDisk.rootStart / 512, (testDisk.rootStart + testDisk.rootSize + 2<<20) &^ (1<<20 - 1) / 512},
	sizes:  [3]int64{testDisk.espSize / 512, testDisk.rootSize / 512, 8192},
}

// mbrBootCode is what mbrDisk puts in the boot code area.
var mbrBootCode = bytes.Repeat([]byte("not really boot code "), 21)[:440]

// mbrDisk builds an MBR disk with sfdisk (so the records, CHS fields
// included, are what util-linux writes; disk signature 0x5eed1234,
// partition 1 bootable): partition 1 a FAT32 file system written by
// go-diskfs, partition 2 ext4 made by mkfs.ext4 -d, partition 3 and the gap
// before it recognisable bytes, and boot code in sector 0.
func mbrDisk(t *testing.T, dir string) string {
	t.Helper()
	sfdisk := requireTool(t, "sfdisk")
	ext4 := ext4Image(t, dir)
	l := mbrLayout
	path := filepath.Join(dir, "mbr.img")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, l.size); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("label: dos\nlabel-id: 0x5eed1234\nstart=%d, size=%d, type=c, bootable\nstart=%d, size=%d, type=83\nstart=%d, size=%d, type=83\n",
		l.starts[0], l.sizes[0], l.starts[1], l.sizes[1], l.starts[2], l.sizes[2])
	sfdiskScript(t, sfdisk, path, script)

	b, err := file.OpenFromPath(path, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := diskfs.OpenBackend(b)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 1, FSType: filesystem.TypeFat32, VolumeLabel: "DATA"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fsys.OpenFile("/hello.txt", os.O_CREATE|os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("hello from an MBR disk\n"))
	w.Close()
	d.Close()

	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	root, err := os.ReadFile(ext4)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(root, l.starts[1]*512)
	f.WriteAt([]byte(strings.Repeat("partition three ", 1000)), l.starts[2]*512)
	f.WriteAt([]byte("bytes in the gap"), (l.starts[1]+l.sizes[1])*512+4096)
	f.WriteAt(mbrBootCode, 0)
	return path
}

// ext4Image is gptDisk's root file system as a file.
func ext4Image(t *testing.T, dir string) string {
	t.Helper()
	mkfs := requireTool(t, "mkfs.ext4")
	tree := filepath.Join(dir, "mbr-tree")
	for name, content := range testDisk.rootFiles {
		p := filepath.Join(tree, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		writeFile(t, p, content)
	}
	ext4 := filepath.Join(dir, "mbr-root.ext4")
	if err := os.WriteFile(ext4, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(ext4, testDisk.rootSize)
	sh(t, mkfs, "-q", "-F", "-E", "root_owner=0:0", "-d", tree, ext4)
	return ext4
}

func sfdiskScript(t *testing.T, sfdisk, path, script string) {
	t.Helper()
	cmd := exec.Command(sfdisk, "-q", path)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
}

// sfdiskVerify fails the test unless sfdisk --verify finds no errors.
func sfdiskVerify(t *testing.T, sfdisk, path string) {
	t.Helper()
	if out, err := exec.Command(sfdisk, "--verify", path).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("sfdisk --verify %s: %v\n%s", filepath.Base(path), err, out)
	}
}

// partRange returns the byte offset and size of partition n of the raw
// disk image at path, from its GPT or (n 1-4) its MBR records.
func partRange(t *testing.T, kind, path string, n int) (int64, int64) {
	t.Helper()
	if kind == "gpt" {
		p := gptOf(t, path).Partitions[n-1]
		return p.GetStart(), p.GetSize()
	}
	e := fileRange(t, path, int64(446+16*(n-1)), 16)
	return int64(le.LittleEndian.Uint32(e[8:])) * 512, int64(le.LittleEndian.Uint32(e[12:])) * 512
}

func fileRange(t *testing.T, path string, off, n int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	return b
}

// sameRange reports whether n bytes at aoff of file a equal those at boff
// of b, read 1 MiB at a time: disks are too big to hash or load whole in
// every check.
func sameRange(t *testing.T, a string, aoff int64, b string, boff, n int64) bool {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for done := int64(0); done < n; {
		m := min(n-done, int64(len(ba)))
		if _, err := fa.ReadAt(ba[:m], aoff+done); err != nil {
			t.Fatal(err)
		}
		if _, err := fb.ReadAt(bb[:m], boff+done); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ba[:m], bb[:m]) {
			return false
		}
		done += m
	}
	return true
}

// sameDisk fails the test unless the files a and b are equal.
func sameDisk(t *testing.T, a, b string) {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	if sa.Size() != sb.Size() || !sameRange(t, a, 0, b, 0, sa.Size()) {
		t.Fatalf("%s and %s differ", filepath.Base(a), filepath.Base(b))
	}
}

// samePartition reports whether partition n of the disks a and b holds
// the same bytes.
func samePartition(t *testing.T, kind, a, b string, n int) bool {
	t.Helper()
	ao, as := partRange(t, kind, a, n)
	bo, bs := partRange(t, kind, b, n)
	return as == bs && sameRange(t, a, ao, b, bo, as)
}

// extractPartition copies partition n of the disk at path to dst.
func extractPartition(t *testing.T, kind, path string, n int, dst string) {
	t.Helper()
	off, size := partRange(t, kind, path, n)
	if err := os.WriteFile(dst, fileRange(t, path, off, size), 0o600); err != nil {
		t.Fatal(err)
	}
}

// sameRecordsAsSfdisk checks that the MBR records of path are byte for
// byte what sfdisk writes for the layout sfdisk -d reads from them (CHS
// fields included).
func sameRecordsAsSfdisk(t *testing.T, sfdisk, path string) {
	t.Helper()
	dump := sh(t, sfdisk, "-d", path)
	st, _ := os.Stat(path)
	fresh := filepath.Join(t.TempDir(), "fresh.img")
	os.WriteFile(fresh, nil, 0o600)
	os.Truncate(fresh, st.Size())
	sfdiskScript(t, sfdisk, fresh, dump)
	a, b := readPrefix(t, path, 512), readPrefix(t, fresh, 512)
	if !bytes.Equal(a[440:], b[440:]) {
		t.Errorf("MBR records of %s\n%x, sfdisk writes\n%x", filepath.Base(path), a[440:], b[440:])
	}
}

// TestPartitionMBR: encrypt --partition 2 of an MBR disk, LUKS1 and LUKS2:
// sfdisk --verify is clean, the records are what sfdisk writes for the new
// layout, boot code, disk signature and partitions 1 and 3 are
// byte-identical, partition 2 is a LUKS container that cryptsetup opens
// (and, for LUKS2, decrypts offline to the old partition), and decrypt
// --partition gives the original disk back.
func TestPartitionMBR(t *testing.T) {
	sfdisk := requireTool(t, "sfdisk")
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	orig := mbrDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "partition passphrase")
	head := fileRange(t, orig, 0, 512)
	for _, c := range []struct {
		name string
		args []string
		grow int64
	}{
		{"luks1", []string{fastIter}, 2 << 20},
		{"luks2", []string{"--type", "luks2", "--pbkdf", "pbkdf2", fastIter}, 16 << 20},
	} {
		enc := filepath.Join(dir, c.name+".img")
		r := mustRun(t, append(append([]string{"encrypt", "-d", key, "--partition", "2", "--json"}, c.args...), orig, enc)...)
		if !strings.Contains(r.stdout, `"format":"raw"`) {
			t.Errorf("%s: summary %s", c.name, r.stdout)
		}
		sfdiskVerify(t, sfdisk, enc)
		sameRecordsAsSfdisk(t, sfdisk, enc)
		eh := fileRange(t, enc, 0, 512)
		if !bytes.Equal(eh[:462], head[:462]) || !bytes.Equal(eh[:440], mbrBootCode) || !bytes.Equal(eh[510:], head[510:]) {
			t.Errorf("%s: boot code, disk signature or record 1 changed", c.name)
		}
		for _, n := range []int{1, 3} {
			if !samePartition(t, "mbr", orig, enc, n) {
				t.Errorf("%s: partition %d is not byte-identical", c.name, n)
			}
		}
		_, before := partRange(t, "mbr", orig, 2)
		if _, after := partRange(t, "mbr", enc, 2); after-before != c.grow {
			t.Errorf("%s: partition 2 grew by %d bytes, want %d", c.name, after-before, c.grow)
		}
		part := filepath.Join(dir, c.name+"-part2.luks")
		extractPartition(t, "mbr", enc, 2, part)
		sh(t, cs, "isLuks", part)
		sh(t, cs, "open", "--test-passphrase", "--key-file", key, part)
		if d := sh(t, cs, "luksDump", part); !strings.Contains(d, "Version:       \t"+c.name[4:]) {
			t.Errorf("luksDump of partition 2:\n%s", d)
		}
		back := filepath.Join(dir, c.name+"-back.img")
		mustRun(t, "decrypt", "-d", key, "--partition", "2", enc, back)
		sameDisk(t, orig, back)
		if c.name == "luks2" {
			// cryptsetup's own decryption of the container (offline,
			// root only): the data moves to the start.
			requireRoot(t)
			sh(t, cs, "reencrypt", "--decrypt", "--header", filepath.Join(dir, "moved.hdr"), "--force-offline-reencrypt",
				"--disable-locks", "--batch-mode", "--key-file", key, part)
			off, size := partRange(t, "mbr", orig, 2)
			if !sameRange(t, orig, off, part, 0, size) {
				t.Error("cryptsetup's decryption of partition 2 is not the old partition")
			}
		}
	}

}

// TestPartitionMBRRefused: logical and extended partitions, missing
// numbers, names and disks without a table are refused with one line and
// exit 1 (a partition that is not LUKS with exit 4), nothing written; a
// primary partition before an extended one is encrypted (with a new type
// byte), the extended partition moving whole with its logical partitions.
func TestPartitionMBRRefused(t *testing.T) {
	sfdisk := requireTool(t, "sfdisk")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "k")
	ext := filepath.Join(dir, "ext.img")
	os.WriteFile(ext, nil, 0o600)
	os.Truncate(ext, 32<<20)
	sfdiskScript(t, sfdisk, ext, "label: dos\nstart=2048, size=8192, type=83\nstart=10240, size=30720, type=5\nstart=12288, size=8192, type=83\nstart=22528, size=8192, type=83\n")
	f, _ := os.OpenFile(ext, os.O_RDWR, 0)
	for i, at := range []int64{2048, 12288, 22528} {
		f.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 4096), at*512)
	}
	f.Close()
	none := writeFile(t, filepath.Join(dir, "none.img"), strings.Repeat("\x00", 1<<20))
	out := filepath.Join(dir, "x")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"encrypt", "--partition", "5", ext, out}, exitFailure, "partition 5: unsupported partition: it is a logical partition"},
		{[]string{"encrypt", "--partition", "2", ext, out}, exitFailure, "partition 2: unsupported partition: it is the extended partition"},
		{[]string{"encrypt", "--partition", "9", ext, out}, exitFailure, "partition 9: no such partition (the disk has 1, 2, 5, 6)"},
		{[]string{"encrypt", "--partition", "1", none, out}, exitFailure, "no GPT or MBR partition table"},
		{[]string{"decrypt", "--partition", "1", ext, out}, exitBadImage, "partition 1"},
		{[]string{"decrypt", "--partition", "6", ext, out}, exitFailure, "logical partition"},
	} {
		args := append([]string{c.args[0], "-d", key}, c.args[1:]...)
		if c.args[0] == "encrypt" {
			args = append(args[:3], append([]string{fastIter}, args[3:]...)...)
		}
		r := cryptimg(t, "", args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want %d and one line with %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
		noFile(t, out)
	}

	if r := cryptimg(t, "", "encrypt", "-d", key, fastIter, "--partition", "1", "--partition-name", "x", ext, out); r.code != exitFailure || !strings.Contains(r.stderr, "MBR partitions have no names") {
		t.Errorf("--partition-name on an MBR: exit %d, %s", r.code, r.stderr)
	}
	noFile(t, out)

	// With a new type byte, put back by decrypt.
	enc := filepath.Join(dir, "enc.img")
	mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "1", "--partition-type", "e8", ext, enc)
	sfdiskVerify(t, sfdisk, enc)
	sameRecordsAsSfdisk(t, sfdisk, enc)
	d := sh(t, sfdisk, "-d", enc)
	for _, want := range []string{"start=        2048, size=       12288, type=e8", "start=       14336, size=       30720, type=5",
		"start=       16384, size=        8192, type=83", "start=       26624, size=        8192, type=83"} {
		if !strings.Contains(d, want) {
			t.Errorf("sfdisk -d lacks %q:\n%s", want, d)
		}
	}
	if !sameRange(t, enc, 14336*512, ext, 10240*512, 32<<20-10240*512) {
		t.Error("the extended partition did not move unchanged")
	}
	back := filepath.Join(dir, "back.img")
	mustRun(t, "decrypt", "-d", key, "--partition", "1", "--partition-type", "83", enc, back)
	sameDisk(t, ext, back)
}

// TestPartitionQcow2: --partition with qcow2, GPT and MBR: plain qcow2 in
// and out (the input's format), qcow2 → raw and raw → qcow2 with
// --output-format, and decrypt likewise. qemu-img check is clean, the
// outputs stay sparse, qemu-img's raw view passes sfdisk --verify, its
// other partitions are byte-identical and partition 2 is LUKS; every
// round trip gives the original disk.
func TestPartitionQcow2(t *testing.T) {
	sfdisk := requireTool(t, "sfdisk")
	cs := requireTool(t, "cryptsetup")
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "partition passphrase")
	for _, c := range []struct {
		name  string
		build func(t *testing.T, dir string) string
	}{{"gpt", gptDisk}, {"mbr", mbrDisk}} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(dir, c.name)
			os.Mkdir(dir, 0o700)
			orig := c.build(t, dir)
			in := filepath.Join(dir, "in.qcow2")
			sh(t, qi, "convert", "-O", "qcow2", orig, in)
			inSt, _ := os.Stat(in)

			// qcow2 → qcow2.
			enc := filepath.Join(dir, "enc.qcow2")
			r := mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", "--json", in, enc)
			if !strings.Contains(r.stdout, `"format":"qcow2"`) {
				t.Errorf("summary %s", r.stdout)
			}
			if out := sh(t, qi, "check", enc); !strings.Contains(out, "No errors were found") {
				t.Errorf("qemu-img check:\n%s", out)
			}
			if info := sh(t, qi, "info", enc); strings.Contains(info, "encrypted: yes") {
				t.Errorf("the output is a qcow2+LUKS image, want a plain qcow2:\n%s", info)
			}
			if st, _ := os.Stat(enc); st.Size() > inSt.Size()+testDisk.rootSize+3<<20 {
				t.Errorf("the encrypted qcow2 is %d bytes, more than the input (%d) and the encrypted partition", st.Size(), inSt.Size())
			}
			encRaw := filepath.Join(dir, "enc.raw")
			sh(t, qi, "convert", "-O", "raw", enc, encRaw)
			sfdiskVerify(t, sfdisk, encRaw)
			checkOtherPartitions(t, c.name, orig, encRaw)
			part := filepath.Join(dir, "part2.luks")
			extractPartition(t, c.name, encRaw, 2, part)
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, part)

			// Decrypted qcow2 → qcow2 and qcow2 → raw.
			back := filepath.Join(dir, "back.qcow2")
			mustRun(t, "decrypt", "-d", key, "--partition", "2", enc, back)
			sh(t, qi, "check", back)
			sh(t, qi, "compare", "-f", "qcow2", "-F", "raw", back, orig)
			if st, _ := os.Stat(back); st.Size() > inSt.Size()+1<<20 {
				t.Errorf("the decrypted qcow2 is %d bytes, the input %d", st.Size(), inSt.Size())
			}
			backRaw := filepath.Join(dir, "back.raw")
			mustRun(t, "decrypt", "-d", key, "--partition", "2", "-O", "raw", enc, backRaw)
			sameDisk(t, orig, backRaw)

			// qcow2 → raw, and back to qcow2.
			toRaw := filepath.Join(dir, "enc2.img")
			mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", "-O", "raw", in, toRaw)
			sfdiskVerify(t, sfdisk, toRaw)
			checkOtherPartitions(t, c.name, orig, toRaw)
			back2 := filepath.Join(dir, "back2.qcow2")
			mustRun(t, "decrypt", "-d", key, "--partition", "2", "-O", "qcow2", toRaw, back2)
			sh(t, qi, "compare", "-f", "qcow2", "-F", "raw", back2, orig)

			// raw → qcow2 (with its own cluster size), and back to raw.
			toQcow := filepath.Join(dir, "enc3.qcow2")
			mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", "-O", "qcow2", "--cluster-size", "131072", orig, toQcow)
			if info := sh(t, qi, "info", toQcow); !strings.Contains(info, "cluster_size: 131072") {
				t.Errorf("--cluster-size:\n%s", info)
			}
			sh(t, qi, "check", toQcow)
			back3 := filepath.Join(dir, "back3.img")
			mustRun(t, "decrypt", "-d", key, "--partition", "2", "-O", "raw", toQcow, back3)
			sameDisk(t, orig, back3)
		})
	}
}

// checkOtherPartitions compares partitions 1 and 3 of the raw disk at path
// with those of the original disk orig.
func checkOtherPartitions(t *testing.T, kind, orig, path string) {
	t.Helper()
	for _, n := range []int{1, 3} {
		if !samePartition(t, kind, orig, path, n) {
			t.Errorf("%s: partition %d is not byte-identical", filepath.Base(path), n)
		}
	}
}
