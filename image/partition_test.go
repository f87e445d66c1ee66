package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/cryptimg/cryptimg/header"
)

func readTable(t *testing.T, path string) *gpt.Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := gpt.Read(file.New(f, true), 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func partBytes(t *testing.T, path string, p *gpt.Partition) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[p.GetStart() : p.GetStart()+p.GetSize()]
}

func TestEncryptPartitionRoundTrip(t *testing.T) {
	dir := t.TempDir()
	orig := makeGPTDisk(t, dir)
	pass := []byte("partition")
	src, err := os.Open(orig)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	encPath := filepath.Join(dir, "enc.img")
	enc, err := os.Create(encPath)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	name := "cryptroot"
	res, err := EncryptPartition(context.Background(), enc, src, PartitionOptions{
		Partition: 2, Passphrase: pass, Name: &name,
		Header: header.Params{ForceIterations: header.MinIterations},
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := int64(res.Header.(*header.LUKS1).PayloadOffset) * SectorSize
	if res.DiskSize != 100<<20+payload {
		t.Errorf("disk size %d, want %d", res.DiskSize, 100<<20+payload)
	}

	before, after := readTable(t, orig), readTable(t, encPath)
	if after.GUID != before.GUID || len(after.Partitions) != 2 {
		t.Fatalf("table after: %+v", after)
	}
	p1, q1 := before.Partitions[0], after.Partitions[0]
	if *p1 != *q1 || !bytes.Equal(partBytes(t, orig, p1), partBytes(t, encPath, q1)) {
		t.Error("partition 1 changed")
	}
	p2, q2 := before.Partitions[1], after.Partitions[1]
	if q2.Start != p2.Start || q2.GetSize() != p2.GetSize()+payload || q2.Type != p2.Type || q2.Name != name || q2.GUID != p2.GUID {
		t.Errorf("partition 2 after: %+v, before %+v", q2, p2)
	}
	// The backup GPT alone gives the same table.
	b, _ := os.ReadFile(encPath)
	clear(b[512:1024])
	damaged := filepath.Join(dir, "damaged.img")
	os.WriteFile(damaged, b, 0o600)
	if bt := readTable(t, damaged); !bt.RecoveredFromBackup || len(bt.Partitions) != 2 || *bt.Partitions[1] != *q2 {
		t.Errorf("backup GPT: recovered %v, %+v", bt.RecoveredFromBackup, bt.Partitions)
	}

	// The container opens and its plaintext is the old partition.
	e, err := OpenPartition(enc, 2)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(enc, k, true)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, v.Size())
	if _, err := v.ReadAt(plain, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, partBytes(t, orig, p2)) {
		t.Error("the container's plaintext differs from the old partition")
	}
	if _, err := OpenPartition(enc, 1); !errors.Is(err, header.ErrNotLUKS) {
		t.Errorf("OpenPartition of a FAT partition: %v, want ErrNotLUKS", err)
	}
	if _, err := OpenPartition(enc, 5); !errors.Is(err, ErrNoPartition) {
		t.Errorf("OpenPartition(5): %v, want ErrNoPartition", err)
	}

	// Decrypting restores the original disk byte for byte, name included.
	outPath := filepath.Join(dir, "out.img")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	oldName := "root"
	if _, err := DecryptPartition(context.Background(), out, enc, e, k, PartitionOptions{Partition: 2, Name: &oldName}); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(orig)
	got, _ := os.ReadFile(outPath)
	if !bytes.Equal(got, want) {
		t.Fatalf("decrypted disk differs from the original (%d vs %d bytes)", len(got), len(want))
	}
}

func TestEncryptPartitionErrors(t *testing.T) {
	dir := t.TempDir()
	notGPT := filepath.Join(dir, "zeros.img")
	os.WriteFile(notGPT, make([]byte, 1<<20), 0o600)
	orig := makeGPTDisk(t, dir)
	for _, c := range []struct {
		path string
		part int
		want error
	}{
		{notGPT, 1, ErrNoTable},
		{orig, 3, ErrNoPartition},
	} {
		src, _ := os.Open(c.path)
		dst, _ := os.Create(filepath.Join(dir, "out"))
		_, err := EncryptPartition(context.Background(), dst, src, PartitionOptions{
			Partition: c.part, Passphrase: []byte("x"), Header: header.Params{ForceIterations: header.MinIterations},
		})
		if !errors.Is(err, c.want) {
			t.Errorf("%s partition %d: %v, want %v", filepath.Base(c.path), c.part, err, c.want)
		}
		src.Close()
		dst.Close()
	}
}
