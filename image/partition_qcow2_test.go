package image

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/cryptimg/cryptimg/image/qcow2"
)

// toQcow2 writes the raw disk b as a plain qcow2 image with clusters of cs
// bytes (zero clusters left unallocated).
func toQcow2(t *testing.T, b []byte, path string, cs int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, err := newQcowOut(f, int64(len(b)), cs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := q.close(); err != nil {
		t.Fatal(err)
	}
}

// guestOf returns the guest disk of a plain qcow2 image, its cluster size
// and the bytes of data it stores.
func guestOf(t *testing.T, path string) (b []byte, cs, stored int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if !qcow2.IsQcow2(f) {
		t.Fatalf("%s is not qcow2", filepath.Base(path))
	}
	p, err := OpenPlain(f)
	if err != nil {
		t.Fatal(err)
	}
	b = make([]byte, p.Size)
	if _, err := p.guest.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	for _, r := range p.dataMap() {
		stored += r.Length
	}
	return b, p.Qcow2.ClusterSize, stored
}

// TestEncryptPartitionQcow2: a GPT disk and an MBR disk in plain qcow2
// images, encrypted qcow2 → qcow2 (the input's format and cluster size),
// qcow2 → raw and raw → qcow2, decrypted likewise. The outputs are plain
// qcow2 disks whose guest view is the raw result; only the data clusters
// and the encrypted partition are stored; every round trip gives the
// original disk.
// smallDisk is a 16 MiB disk with three partitions in a GPT or an MBR
// (zero CHS fields), 256 KiB of random bytes at the start of each and
// zeros elsewhere, as on a real, mostly empty disk. Partition 2 is not
// whole MiB.
func smallDisk(t *testing.T, kind string) []byte {
	t.Helper()
	const size = 16 << 20
	parts := [][2]int64{{2048, 8192}, {10240, 8195}, {20480, 4096}} // sectors
	path := filepath.Join(t.TempDir(), "disk.img")
	if kind == "gpt" {
		b, err := file.CreateFromPath(path, size)
		if err != nil {
			t.Fatal(err)
		}
		d, err := diskfs.OpenBackend(b)
		if err != nil {
			t.Fatal(err)
		}
		table := &gpt.Table{LogicalSectorSize: 512, PhysicalSectorSize: 512, ProtectiveMBR: true,
			GUID: "3B2D4C1A-6E5F-4A7B-8C9D-0E1F2A3B4C5D"}
		for i, p := range parts {
			table.Partitions = append(table.Partitions, &gpt.Partition{Index: i + 1, Start: uint64(p[0]),
				Size: uint64(p[1] * 512), Type: gpt.LinuxFilesystem, Name: fmt.Sprint("part", i+1)})
		}
		if err := d.Partition(table); err != nil {
			t.Fatal(err)
		}
		d.Close()
	} else {
		var rec []byte
		for _, p := range parts {
			rec = append(rec, mbrRecord(0, 0x83, uint32(p[0]), uint32(p[1]))...)
		}
		if err := os.WriteFile(path, append(mbrSector(t, rec), make([]byte, size-512)...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.NewChaCha8([32]byte{byte(len(kind))})
	for _, p := range parts {
		r.Read(disk[p[0]*512 : p[0]*512+256<<10])
	}
	return disk
}

// TestEncryptPartitionQcow2: a GPT disk and an MBR disk in plain qcow2
// images, encrypted qcow2 → qcow2 (the input's format and cluster size)
// and raw → qcow2, decrypted qcow2 → qcow2 and qcow2 → raw. The outputs
// are plain qcow2 disks whose guest view is what a raw output would be;
// only the data clusters and the encrypted partition are stored; every
// round trip gives the original disk.
func TestEncryptPartitionQcow2(t *testing.T) {
	for _, kind := range []string{"gpt", "mbr"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			raw := smallDisk(t, kind)
			const part, start, psize = 2, 10240 * 512, 8195 * 512
			in := filepath.Join(dir, "in.qcow2")
			toQcow2(t, raw, in, 32<<10)
			_, _, inStored := guestOf(t, in)

			enc := filepath.Join(dir, "enc.qcow2")
			res, err := encryptPart(t, in, enc, PartitionOptions{Partition: part})
			if err != nil {
				t.Fatal(err)
			}
			if res.Format != Qcow2 || res.Table != kind || res.Start != start {
				t.Errorf("result %+v", res)
			}
			guest, cs, stored := guestOf(t, enc)
			if cs != 32<<10 {
				t.Errorf("cluster size %d, want the input's", cs)
			}
			if max := inStored + psize + res.Header.Info().PayloadOffset + 2*cs; stored > max {
				t.Errorf("the encrypted qcow2 stores %d bytes, more than the %d the data and the container need", stored, max)
			}
			// Its guest view is a disk with the container, as a raw
			// output would be.
			encRaw := filepath.Join(dir, "enc.raw")
			os.WriteFile(encRaw, guest, 0o600)
			if !bytes.Equal(containerPlain(t, encRaw, part), raw[start:start+psize]) {
				t.Error("the container in the qcow2 output does not hold the old partition")
			}
			if !bytes.Equal(guest[1<<20:start], raw[1<<20:start]) {
				t.Error("the bytes between the table and the partition changed")
			}

			back := filepath.Join(dir, "back.qcow2")
			if r := decryptPart(t, enc, back, PartitionOptions{Partition: part}); r.Format != Qcow2 {
				t.Errorf("decrypt format %s", r.Format)
			}
			got, _, backStored := guestOf(t, back)
			if !bytes.Equal(got, raw) {
				t.Error("qcow2 round trip: the disk differs")
			}
			if backStored > inStored+2*cs {
				t.Errorf("the decrypted qcow2 stores %d bytes, the input %d", backStored, inStored)
			}
			backRaw := filepath.Join(dir, "back.raw")
			decryptPart(t, enc, backRaw, PartitionOptions{Partition: part, Format: Raw})
			if got, _ := os.ReadFile(backRaw); !bytes.Equal(got, raw) {
				t.Error("qcow2 → raw: the disk differs")
			}

			rawIn := filepath.Join(dir, "in.raw")
			os.WriteFile(rawIn, raw, 0o600)
			enc2 := filepath.Join(dir, "enc2.qcow2")
			if _, err := encryptPart(t, rawIn, enc2, PartitionOptions{Partition: part, Format: Qcow2}); err != nil {
				t.Fatal(err)
			}
			if _, cs, _ := guestOf(t, enc2); cs != qcow2.DefaultClusterSize {
				t.Errorf("raw → qcow2 cluster size %d", cs)
			}
			back2 := filepath.Join(dir, "back2.qcow2")
			decryptPart(t, enc2, back2, PartitionOptions{Partition: part})
			if got, _, _ := guestOf(t, back2); !bytes.Equal(got, raw) {
				t.Error("raw → qcow2 → qcow2: the disk differs")
			}
		})
	}
}
