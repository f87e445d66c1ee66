package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

// testDiskFiles are the files makeGPTDisk puts in each partition.
var testDiskFiles = map[int]map[string]string{
	1: {"/EFI/BOOT/BOOTX64.EFI": "not really a boot loader\n", "/hello.txt": "hello from the ESP\n"},
	2: {"/data/notes.txt": "hello from inside an encrypted image\n", "/top.txt": "top level\n"},
}

// makeGPTDisk builds a 100 MiB GPT disk with go-diskfs: partition 1 a
// FAT32 ESP, partition 2 a FAT32 data partition, each holding
// testDiskFiles. It returns the disk's path.
func makeGPTDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "disk.img")
	const size = 100 << 20
	b, err := file.CreateFromPath(path, size)
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
			{Index: 1, Start: 2048, Size: 40 << 20, Type: gpt.EFISystemPartition, Name: "ESP",
				GUID: "11111111-2222-4333-8444-555555555555"},
			{Index: 2, Start: 2048 + 40<<20/512, Size: 50 << 20, Type: gpt.LinuxFilesystem, Name: "root",
				GUID: "66666666-7777-4888-9999-AAAAAAAAAAAA"},
		},
	}
	if err := d.Partition(table); err != nil {
		t.Fatal(err)
	}
	for part, files := range testDiskFiles {
		fsys, err := d.CreateFilesystem(disk.FilesystemSpec{Partition: part, FSType: filesystem.TypeFat32, VolumeLabel: "PART" + string(rune('0'+part))})
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if err := fsys.Mkdir(filepath.Dir(name)); err != nil {
				t.Fatal(err)
			}
			f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write([]byte(content)); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	return path
}

// encryptFile encrypts the plaintext image at src into a raw LUKS image
// and returns it opened read-write.
func encryptFile(t testing.TB, src string, pass []byte) *os.File {
	t.Helper()
	sf, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	f, err := os.OpenFile(src+".luks", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := EncryptRaw(context.Background(), f, sf, EncryptOptions{
		Header: header.Params{ForceIterations: header.MinIterations}, Passphrase: pass,
	}); err != nil {
		t.Fatal(err)
	}
	return f
}

func openStorage(t *testing.T, f *os.File, pass []byte, readOnly bool) *Storage {
	t.Helper()
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Clear)
	v, err := e.View(f, k, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	return NewStorage(v, "disk.raw", readOnly)
}

func TestStorageGoDiskfs(t *testing.T) {
	dir := t.TempDir()
	plainPath := makeGPTDisk(t, dir)
	pass := []byte("storage")
	f := encryptFile(t, plainPath, pass)

	s := openStorage(t, f, pass, true)
	d, err := diskfs.OpenBackend(s)
	if err != nil {
		t.Fatal(err)
	}
	if d.Size != 100<<20 {
		t.Errorf("disk size %d, want %d", d.Size, 100<<20)
	}
	table, ok := d.Table.(*gpt.Table)
	if !ok {
		t.Fatalf("partition table %T, want *gpt.Table", d.Table)
	}
	if len(table.Partitions) != 2 || table.Partitions[0].Name != "ESP" || table.Partitions[1].Name != "root" ||
		table.Partitions[1].GetStart() != (2048+40<<20/512)*512 || table.Partitions[1].GetSize() != 50<<20 {
		t.Fatalf("partitions read through the view: %+v %+v", table.Partitions[0], table.Partitions[1])
	}
	for part, files := range testDiskFiles {
		fsys, err := d.GetFilesystem(part)
		if err != nil {
			t.Fatalf("partition %d: %v", part, err)
		}
		if fsys.Type() != filesystem.TypeFat32 {
			t.Errorf("partition %d: filesystem type %v, want FAT32", part, fsys.Type())
		}
		for name, want := range files {
			got, err := fsys.ReadFile(name)
			if err != nil {
				t.Fatalf("partition %d: %s: %v", part, name, err)
			}
			if string(got) != want {
				t.Errorf("partition %d: %s = %q, want %q", part, name, got, want)
			}
		}
	}
	// A read-only view fails at the first write.
	fsys, _ := d.GetFilesystem(2)
	if _, err := fsys.OpenFile("/new.txt", os.O_CREATE|os.O_RDWR); err == nil {
		t.Error("creating a file on a read-only view succeeded")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// Read-write: add a file through go-diskfs, then find it through a
	// fresh view.
	s = openStorage(t, f, pass, false)
	d, err = diskfs.OpenBackend(s)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err = d.GetFilesystem(2)
	if err != nil {
		t.Fatal(err)
	}
	nf, err := fsys.OpenFile("/added.txt", os.O_CREATE|os.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	added := bytes.Repeat([]byte("written through the view\n"), 1000)
	if _, err := nf.Write(added); err != nil {
		t.Fatal(err)
	}
	nf.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStorage(t, f, pass, true)
	d, err = diskfs.OpenBackend(s)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fsys, err = d.GetFilesystem(2)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fsys.ReadFile("/added.txt"); err != nil || !bytes.Equal(got, added) {
		t.Fatalf("file added through a read-write view: %d bytes, %v", len(got), err)
	}
	if got, err := fsys.ReadFile("/top.txt"); err != nil || string(got) != testDiskFiles[2]["/top.txt"] {
		t.Fatalf("existing file after the write: %q, %v", got, err)
	}
}

func TestStorageMethods(t *testing.T) {
	plain := []byte("0123456789abcdef")
	plain = bytes.Repeat(plain, 2*SectorSize/len(plain))
	f, e, k := newTestImage(t, plain)
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStorage(v, "x.raw", true)
	defer s.Close()
	st, err := s.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() != int64(len(plain)) || st.Name() != "x.raw" {
		t.Fatalf("Stat() = %v mode %v size %d, %v", st.Name(), st.Mode(), st.Size(), err)
	}
	if _, err := s.Sys(); !errors.Is(err, backend.ErrNotSuitable) {
		t.Errorf("Sys() error %v, want ErrNotSuitable", err)
	}
	if _, err := s.Writable(); !errors.Is(err, backend.ErrIncorrectOpenMode) {
		t.Errorf("Writable() on read-only: %v, want ErrIncorrectOpenMode", err)
	}
	if s.Path() != "" {
		t.Errorf("Path() = %q", s.Path())
	}
	if pos, err := s.Seek(-10, io.SeekEnd); err != nil || pos != int64(len(plain))-10 {
		t.Fatalf("Seek(-10, End) = %d, %v", pos, err)
	}
	b := make([]byte, 32)
	if n, err := s.Read(b); n != 10 || err != nil || !bytes.Equal(b[:10], plain[len(plain)-10:]) {
		t.Fatalf("Read at end-10 = %d, %v", n, err)
	}
	if n, err := s.Read(b); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want 0, EOF", n, err)
	}
	s.Seek(3, io.SeekStart)
	s.Seek(4, io.SeekCurrent)
	if n, err := s.Read(b[:5]); n != 5 || err != nil || string(b[:5]) != string(plain[7:12]) {
		t.Fatalf("Read after seeks = %q, %v", b[:n], err)
	}
	if _, err := s.Seek(-1, io.SeekStart); err == nil {
		t.Error("Seek to -1 succeeded")
	}
	w := NewStorage(v, "", false)
	if wf, err := w.Writable(); err != nil || wf == nil {
		t.Errorf("Writable() on read-write: %v", err)
	}
}
