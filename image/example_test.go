package image_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"
)

// The examples use the lowest PBKDF2 cost cryptsetup accepts, so that they
// run in milliseconds; real images keep the default (2 s of PBKDF2, or
// argon2id for LUKS2).
var fastKDF = header.Params{ForceIterations: header.MinIterations}

// Encrypt a plaintext raw disk image into a LUKS1 image, written under a
// temporary name and renamed when complete, then read the plaintext back
// through a read-only view.
func Example_encrypt() {
	dir, err := os.MkdirTemp("", "cryptimg-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	plain := make([]byte, 1<<20)
	for s := range len(plain) / 512 {
		copy(plain[s*512:], fmt.Sprintf("sector %d of a plaintext disk image", s))
	}
	if err := os.WriteFile(filepath.Join(dir, "disk.raw"), plain, 0o600); err != nil {
		log.Fatal(err)
	}
	passphrase := []byte("correct horse battery staple")

	// Encrypt disk.raw into disk.luks.
	src, err := os.Open(filepath.Join(dir, "disk.raw"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	p, err := image.OpenPlain(src) // raw or qcow2, by magic
	if err != nil {
		log.Fatal(err)
	}
	out, err := image.CreateOutput(filepath.Join(dir, "disk.luks"), false)
	if err != nil {
		log.Fatal(err)
	}
	h, err := image.Encrypt(context.Background(), out.File, p, image.EncryptOptions{Header: fastKDF, Passphrase: passphrase})
	if err != nil {
		out.Abort()
		log.Fatal(err)
	}
	if err := out.Commit(); err != nil {
		log.Fatal(err)
	}
	i := h.Info()
	fmt.Printf("LUKS%d, %s, %d-bit key, payload at %d\n", i.Version, i.Cipher, i.KeyBytes*8, i.PayloadOffset)

	// Open it again and compare the plaintext.
	f, err := os.Open(filepath.Join(dir, "disk.luks"))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	e, err := image.Open(f)
	if err != nil {
		log.Fatal(err)
	}
	k, err := e.Unlock(passphrase, -1) // -1: try every key slot
	if err != nil {
		log.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(f, k, true)
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Println("key slot", k.Slot, "opens it; plaintext unchanged:", bytes.Equal(got, plain))
	// Output:
	// LUKS1, aes-cbc-essiv:sha256, 256-bit key, payload at 2097152
	// key slot 0 opens it; plaintext unchanged: true
}

// Open an encrypted image as an io.ReaderAt of its plaintext (a View) and
// list its partitions with go-diskfs, which reads it through
// image.NewStorage without a byte of plaintext reaching the disk.
func Example_partitions() {
	dir, err := os.MkdirTemp("", "cryptimg-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	passphrase := []byte("correct horse battery staple")

	// A 4 MiB GPT disk with two partitions, made with go-diskfs, then
	// encrypted as a whole into disk.luks.
	b, err := file.CreateFromPath(filepath.Join(dir, "disk.raw"), 4<<20)
	if err != nil {
		log.Fatal(err)
	}
	d, err := diskfs.OpenBackend(b)
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Partition(&gpt.Table{
		LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
		Partitions: []*gpt.Partition{
			{Index: 1, Start: 2048, End: 4095, Type: gpt.EFISystemPartition, Name: "ESP"},
			{Index: 2, Start: 4096, End: 6143, Type: gpt.LinuxFilesystem, Name: "root"},
		},
	}); err != nil {
		log.Fatal(err)
	}
	d.Close()
	src, err := os.Open(filepath.Join(dir, "disk.raw"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, "disk.luks"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	defer dst.Close()
	if _, err := image.EncryptRaw(context.Background(), dst, src, image.EncryptOptions{Header: fastKDF, Passphrase: passphrase}); err != nil {
		log.Fatal(err)
	}

	// Open, unlock and view the plaintext read-only.
	e, err := image.Open(dst)
	if err != nil {
		log.Fatal(err)
	}
	k, err := e.Unlock(passphrase, -1)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(dst, k, true)
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	var plaintext io.ReaderAt = v // for any io.ReaderAt consumer
	mbr := make([]byte, 512)
	if _, err := plaintext.ReadAt(mbr, 0); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sector 0 ends in %x (the protective MBR)\n", mbr[510:])

	// go-diskfs reads the partition table through a Storage over the view.
	pd, err := diskfs.OpenBackend(image.NewStorage(v, "disk.raw", true))
	if err != nil {
		log.Fatal(err)
	}
	table, err := pd.GetPartitionTable()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("table:", table.Type())
	for _, p := range table.GetPartitions() {
		if p.GetSize() == 0 {
			continue
		}
		gp := p.(*gpt.Partition)
		fmt.Printf("%d %-4s start %d size %d\n", gp.Index, gp.Name, p.GetStart(), p.GetSize())
	}
	// Output:
	// sector 0 ends in 55aa (the protective MBR)
	// table: gpt
	// 1 ESP  start 1048576 size 1048576
	// 2 root start 2097152 size 1048576
}
