package main

import (
	be "encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
	"github.com/diskfs/go-diskfs/filesystem/squashfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/diskfs/go-diskfs/partition/mbr"
)

// testDisk describes the GPT disk gptDisk builds.
var testDisk = struct {
	size              int64
	espStart, espSize int64
	rootStart         int64
	rootSize          int64
	espFiles          map[string]string
	rootFiles         map[string]string
}{
	size:     96 << 20,
	espStart: 1 << 20, espSize: 40 << 20,
	rootStart: 42 << 20, rootSize: 36<<20 + 7*512, // not a MiB multiple on purpose
	espFiles:  map[string]string{"EFI/BOOT/BOOTX64.EFI": "not really a boot loader\n", "hello.txt": "hello from the ESP\n"},
	rootFiles: map[string]string{"etc/hostname": "encrypted-host\n", "home/user/notes.txt": "hello from inside an encrypted image\n"},
}

// gptDisk builds a GPT disk with go-diskfs: partition 1 a FAT32 ESP
// written by go-diskfs, partition 2 ext4 made by mkfs.ext4 -d, and a third
// small partition after a gap so shifting is visible. ext4 needs
// mkfs.ext4 (e2fsprogs).
func gptDisk(t *testing.T, dir string) string {
	t.Helper()
	mkfs := requireTool(t, "mkfs.ext4")
	td := testDisk
	// The ext4 filesystem, populated from a directory.
	tree := filepath.Join(dir, "tree")
	for name, content := range td.rootFiles {
		p := filepath.Join(tree, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		writeFile(t, p, content)
	}
	ext4 := filepath.Join(dir, "root.ext4")
	f, _ := os.Create(ext4)
	f.Truncate(td.rootSize)
	f.Close()
	sh(t, mkfs, "-q", "-F", "-E", "root_owner=0:0", "-d", tree, ext4)

	path := filepath.Join(dir, "disk.img")
	b, err := file.CreateFromPath(path, td.size)
	if err != nil {
		t.Fatal(err)
	}
	d, err := diskfs.OpenBackend(b)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	table := &gpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		GUID: "3B2D4C1A-6E5F-4A7B-8C9D-0E1F2A3B4C5D",
		Partitions: []*gpt.Partition{
			{Index: 1, Start: uint64(td.espStart / 512), Size: uint64(td.espSize), Type: gpt.EFISystemPartition,
				Name: "ESP", GUID: "11111111-2222-4333-8444-555555555555"},
			{Index: 2, Start: uint64(td.rootStart / 512), Size: uint64(td.rootSize), Type: gpt.LinuxRootX86_64,
				Name: "root", GUID: "66666666-7777-4888-9999-AAAAAAAAAAAA", Attributes: 1 << 59},
			{Index: 3, Start: uint64((td.rootStart + td.rootSize + 2<<20) &^ (1<<20 - 1) / 512), Size: 4 << 20,
				Type: gpt.LinuxFilesystem, Name: "extra", GUID: "77777777-7777-4888-9999-AAAAAAAAAAAA"},
		},
	}
	if err := d.Partition(table); err != nil {
		t.Fatal(err)
	}
	fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 1, FSType: filesystem.TypeFat32, VolumeLabel: "ESP"})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range td.espFiles {
		if err := fsys.Mkdir(filepath.Dir(name)); err != nil {
			t.Fatal(err)
		}
		w, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	root, err := os.ReadFile(ext4)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Writable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(root, td.rootStart); err != nil {
		t.Fatal(err)
	}
	// Recognisable bytes in partition 3 and in the gap before it.
	w.WriteAt([]byte(strings.Repeat("partition three ", 1000)), int64(table.Partitions[2].Start)*512)
	w.WriteAt([]byte("bytes in the gap"), td.rootStart+td.rootSize+4096)
	return path
}

// encryptedDisk builds gptDisk and encrypts it whole with cryptimg encrypt.
func encryptedDisk(t *testing.T) (dir, img, key string) {
	t.Helper()
	dir = t.TempDir()
	plain := gptDisk(t, dir)
	key = writeFile(t, filepath.Join(dir, "key"), "ls passphrase")
	img = filepath.Join(dir, "disk.luks")
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, img)
	return dir, img, key
}

func TestLsPartitions(t *testing.T) {
	_, img, key := encryptedDisk(t)
	r := mustRun(t, "ls", "-d", key, img)
	for _, want := range []string{"table: gpt", "INDEX", "EFI System", "ESP", "Linux root (x86-64)", "root", "extra"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("ls output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, "ls", "-d", key, "--json", img)
	var tj tableJSON
	if err := json.Unmarshal([]byte(r.stdout), &tj); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if tj.Table != "gpt" || tj.Size != testDisk.size || len(tj.Partitions) != 3 {
		t.Fatalf("ls --json: %+v", tj)
	}
	p := tj.Partitions[1]
	if p.Index != 2 || p.Start != testDisk.rootStart || p.Size != testDisk.rootSize || p.Name != "root" ||
		p.Type != string(gpt.LinuxRootX86_64) || p.UUID != "66666666-7777-4888-9999-AAAAAAAAAAAA" {
		t.Errorf("partition 2: %+v", p)
	}
}

func TestLsAndCatFiles(t *testing.T) {
	dir, img, key := encryptedDisk(t)
	// FAT32 root and a subdirectory.
	r := mustRun(t, "ls", "-d", key, "--json", img, "1")
	var dj dirJSON
	if err := json.Unmarshal([]byte(r.stdout), &dj); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if dj.Filesystem != "fat32" || dj.Path != "/" || !hasEntry(dj, "hello.txt", "file", 19) || !hasEntry(dj, "EFI", "dir", 0) {
		t.Errorf("ls 1: %+v", dj)
	}
	r = mustRun(t, "ls", "-d", key, img, "1:/EFI/BOOT")
	if !strings.Contains(r.stdout, "BOOTX64.EFI") {
		t.Errorf("ls 1:/EFI/BOOT:\n%s", r.stdout)
	}
	// ext4.
	r = mustRun(t, "ls", "-d", key, "--json", img, "2:/")
	dj = dirJSON{}
	if err := json.Unmarshal([]byte(r.stdout), &dj); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if dj.Filesystem != "ext4" || !hasEntry(dj, "etc", "dir", 0) || !hasEntry(dj, "home", "dir", 0) {
		t.Errorf("ls 2:/: %+v", dj)
	}
	r = mustRun(t, "ls", "-d", key, img, "2:home/user")
	if !strings.Contains(r.stdout, "notes.txt") {
		t.Errorf("ls 2:home/user:\n%s", r.stdout)
	}
	// ext4 entries have the permissions of the tree mkfs.ext4 copied
	// (they once listed as ---------- and d---------), in both outputs.
	for _, c := range []struct{ spec, name, local string }{{"2:/", "etc", "etc"}, {"2:home/user", "notes.txt", "home/user/notes.txt"}} {
		st, err := os.Stat(filepath.Join(dir, "tree", c.local))
		if err != nil || st.Mode().Perm() == 0 {
			t.Fatalf("tree %s: %v, %v", c.local, st, err)
		}
		want := st.Mode().String()
		var dj dirJSON
		json.Unmarshal([]byte(mustRun(t, "ls", "-d", key, "--json", img, c.spec).stdout), &dj)
		got := ""
		for _, e := range dj.Entries {
			if e.Name == c.name {
				got = e.Mode
			}
		}
		if got != want {
			t.Errorf("ls --json %s: %s has mode %q, want %q", c.spec, c.name, got, want)
		}
		if out := mustRun(t, "ls", "-d", key, img, c.spec).stdout; !strings.Contains(out, want+" ") {
			t.Errorf("ls %s: no %q for %s:\n%s", c.spec, want, c.name, out)
		}
	}
	// A file path lists the file itself.
	r = mustRun(t, "ls", "-d", key, "--json", img, "2:/etc/hostname")
	dj = dirJSON{}
	json.Unmarshal([]byte(r.stdout), &dj)
	if !hasEntry(dj, "hostname", "file", int64(len(testDisk.rootFiles["etc/hostname"]))) || len(dj.Entries) != 1 {
		t.Errorf("ls of a file: %+v", dj)
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
	r = mustRun(t, "cat", "-d", key, "--json", img, "2:/home/user/notes.txt")
	var cj catJSON
	if err := json.Unmarshal([]byte(r.stdout), &cj); err != nil {
		t.Fatal(err)
	}
	if string(cj.Content) != testDisk.rootFiles["home/user/notes.txt"] || cj.Size != int64(len(cj.Content)) || cj.Path != "/home/user/notes.txt" {
		t.Errorf("cat --json: %+v", cj)
	}
}

func TestLsErrors(t *testing.T) {
	dir, img, key := encryptedDisk(t)
	before, _ := os.ReadDir(dir)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"ls", "-d", key, img, "7"}, exitFailure, "partition 7: not found: the disk has partitions 1, 2, 3"},
		{[]string{"cat", "-d", key, img, "9:/x"}, exitFailure, "partition 9: not found"},
		{[]string{"ls", "-d", key, img, "2:/nope"}, exitFailure, "2:/nope: not found: no such file or directory"},
		{[]string{"cat", "-d", key, img, "1:/EFI/nope.efi"}, exitFailure, "1:/EFI/nope.efi: not found"},
		{[]string{"cat", "-d", key, img, "2:/etc"}, exitFailure, "is a directory"},
		{[]string{"cat", "-d", key, img, "2"}, exitFailure, "want PART:PATH"},
		{[]string{"ls", "-d", key, img, "x:/"}, exitFailure, "PART must be a partition number"},
		{[]string{"ls", "-d", writeFile(t, filepath.Join(t.TempDir(), "bad"), "wrong"), img}, exitNoKey, ""},
		{[]string{"ls", "-d", key, key}, exitBadImage, ""},
	} {
		r := cryptimg(t, "", c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
		if r.stdout != "" {
			t.Errorf("%v: stdout %q on error", c.args, r.stdout)
		}
	}
	after, _ := os.ReadDir(dir)
	if len(after) != len(before) {
		t.Errorf("ls/cat created files: %d entries before, %d after", len(before), len(after))
	}
}

func hasEntry(d dirJSON, name, typ string, size int64) bool {
	for _, e := range d.Entries {
		if e.Name == name && e.Type == typ && (typ == "dir" || e.Size == size) {
			return true
		}
	}
	return false
}

// TestLsOtherFormats lists and reads ISO9660 and squashfs filesystems
// (whole-disk, no partition table) and an MBR disk, all made by go-diskfs
// and then encrypted.
func TestLsOtherFormats(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "formats")
	build := func(name string, fill func(d *disk.Disk)) string {
		p := filepath.Join(dir, name)
		d, err := diskfs.Create(p, 16<<20, diskfs.SectorSizeDefault)
		if err != nil {
			t.Fatal(err)
		}
		fill(d)
		d.Close()
		mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", p, p+".luks")
		return p + ".luks"
	}
	put := func(fsys filesystem.FileSystem, name, content string) {
		fsys.Mkdir(filepath.Dir(name))
		w, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
	iso := build("cd.iso", func(d *disk.Disk) {
		d.LogicalBlocksize = 2048
		fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeISO9660, VolumeLabel: "CD", WorkDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		put(fsys, "docs/readme.txt", "iso content\n")
		if err := fsys.(*iso9660.FileSystem).Finalize(iso9660.FinalizeOptions{RockRidge: true}); err != nil {
			t.Fatal(err)
		}
	})
	sqfs := build("root.sqfs", func(d *disk.Disk) {
		d.LogicalBlocksize = 4096 // squashfs blocks; reading takes them from the superblock
		fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 0, FSType: filesystem.TypeSquashfs, WorkDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		put(fsys, "etc/os-release", "ID=squash\n")
		if err := fsys.(*squashfs.FileSystem).Finalize(squashfs.FinalizeOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	mbrDisk := build("mbr.img", func(d *disk.Disk) {
		table := &mbr.Table{LogicalSectorSize: 512, PhysicalSectorSize: 512, Partitions: []*mbr.Partition{
			{Index: 1, Bootable: true, Type: mbr.Fat32LBA, Start: 2048, Size: 14 << 20 / 512},
		}}
		if err := d.Partition(table); err != nil {
			t.Fatal(err)
		}
		fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: 1, FSType: filesystem.TypeFat32})
		if err != nil {
			t.Fatal(err)
		}
		put(fsys, "boot.cfg", "mbr fat\n")
	})

	for _, c := range []struct {
		img, fs, dir, entry, file, content string
	}{
		{iso, "iso9660", "0:/docs", "readme.txt", "0:/docs/readme.txt", "iso content\n"},
		{sqfs, "squashfs", "0:/etc", "os-release", "0:/etc/os-release", "ID=squash\n"},
		{mbrDisk, "fat32", "1", "boot.cfg", "1:/boot.cfg", "mbr fat\n"},
	} {
		r := mustRun(t, "ls", "-d", key, "--json", c.img, c.dir)
		var dj dirJSON
		if err := json.Unmarshal([]byte(r.stdout), &dj); err != nil {
			t.Fatalf("%s: %v\n%s", c.dir, err, r.stdout)
		}
		if dj.Filesystem != c.fs || !hasEntry(dj, c.entry, "file", int64(len(c.content))) {
			t.Errorf("%s %s: %+v", filepath.Base(c.img), c.dir, dj)
		}
		if r := mustRun(t, "cat", "-d", key, c.img, c.file); r.stdout != c.content {
			t.Errorf("%s cat %s = %q", filepath.Base(c.img), c.file, r.stdout)
		}
	}
	r := mustRun(t, "ls", "-d", key, "--json", mbrDisk)
	var tj tableJSON
	json.Unmarshal([]byte(r.stdout), &tj)
	if tj.Table != "mbr" || len(tj.Partitions) != 1 || tj.Partitions[0].Type != "0x0c" || !tj.Partitions[0].Bootable ||
		tj.Partitions[0].Start != 1<<20 || tj.Partitions[0].Size != 14<<20 {
		t.Errorf("ls of the MBR disk: %+v", tj)
	}
	r = mustRun(t, "ls", "-d", key, "--json", iso)
	tj = tableJSON{}
	json.Unmarshal([]byte(r.stdout), &tj)
	if tj.Table != "none" || len(tj.Partitions) != 0 {
		t.Errorf("ls of the ISO: %+v", tj)
	}
}

// TestLsQcow2BadL2: a qcow2 image whose first L2 entry is corrupt (a
// reserved bit set) fails ls IMAGE with exit 4, as decrypt does, rather
// than listing no partition table (go-diskfs dropped the read error).
func TestLsQcow2BadL2(t *testing.T) {
	dir := t.TempDir()
	plain := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "qcow2 passphrase")
	img := filepath.Join(dir, "disk.qcow2")
	fastEncrypt(t, key, plain, img, "-O", "qcow2")
	mustRun(t, "ls", "-d", key, img)
	b := mustRead(t, img)
	l1 := be.BigEndian.Uint64(b[40:])
	l2 := be.BigEndian.Uint64(b[l1:]) & 0x00fffffffffffe00
	e := be.BigEndian.Uint64(b[l2:])
	if e == 0 {
		t.Fatal("the first cluster is not allocated")
	}
	be.BigEndian.PutUint64(b[l2:], e|0x100)
	if err := os.WriteFile(img, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cryptimg(t, "", "decrypt", "-d", key, img, filepath.Join(dir, "out.raw")); r.code != 4 {
		t.Fatalf("decrypt: exit %d\n%s", r.code, r.stderr)
	}
	r := cryptimg(t, "", "ls", "-d", key, img)
	if r.code != 4 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("ls: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
