package image

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

// sfdiskEntries are the partition records sfdisk 2.38.1 writes for
//
//	label: dos
//	start=2048, size=20480, type=c, bootable
//	start=22528, size=16391, type=83
//	start=40960, size=8192, type=83
//
// and, as mbrAfter, for the same table after partition 2 grew by 4096
// sectors (a LUKS1 header of 2 MiB) and partition 3 moved by as much: the
// CHS fields are sfdisk's, so they check chsOf too.
const (
	sfdiskEntries = "80202100 0c662501 00080000 00500000" +
		"00662601 836b3002 00580000 07400000" +
		"008c0b02 830f0c03 00a00000 00200000"
	mbrAfter = "80202100 0c662501 00080000 00500000" +
		"00662601 83ac3102 00580000 07500000" +
		"00cd0c02 83500d03 00b00000 00200000"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mbrSector is a sector 0 with boot code, a disk signature, the given
// records and the MBR signature.
func mbrSector(t testing.TB, entries []byte) []byte {
	t.Helper()
	s := make([]byte, SectorSize)
	copy(s, bytes.Repeat([]byte("boot code "), 44))
	binary.LittleEndian.PutUint32(s[440:], 0x12345678)
	copy(s[446:], entries)
	s[510], s[511] = 0x55, 0xaa
	return s
}

// mbrRecord encodes one partition record with zero CHS fields.
func mbrRecord(boot, typ byte, start, size uint32) []byte {
	b := make([]byte, 16)
	b[0], b[4] = boot, typ
	binary.LittleEndian.PutUint32(b[8:], start)
	binary.LittleEndian.PutUint32(b[12:], size)
	return b
}

// makeMBRDisk writes a disk of size bytes, random behind sector 0 (gaps
// included, so every byte outside the encrypted partition is checked),
// with sector0 as its MBR.
func makeMBRDisk(t testing.TB, dir string, sector0 []byte, seed byte, size int) (string, []byte) {
	t.Helper()
	b := make([]byte, size)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	copy(b, sector0)
	path := filepath.Join(dir, "mbr.img")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b
}

func encryptPart(t *testing.T, src, dst string, o PartitionOptions) (*PartitionResult, error) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if o.Passphrase == nil {
		o.Passphrase = []byte("partition")
	}
	o.Header.ForceIterations = header.MinIterations
	return EncryptPartition(context.Background(), out, in, o)
}

func decryptPart(t *testing.T, src, dst string, o PartitionOptions) *PartitionResult {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	e, err := OpenPartition(in, o.Partition)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte("partition"), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	res, err := DecryptPartition(context.Background(), out, in, e, k, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// containerPlain opens partition index of the raw disk at path and
// returns its plaintext.
func containerPlain(t *testing.T, path string, index int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	e, err := OpenPartition(f, index)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock([]byte("partition"), -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, v.Size())
	if _, err := v.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return b
}

// TestEncryptPartitionMBR: partition 2 of an MBR disk grows by the LUKS1
// header and partition 3 moves by 2 MiB; the records come out as sfdisk
// writes them for that layout, boot code, disk signature and record 1
// are untouched, every other byte is where it was (or moved with
// partition 3), the container holds the old partition, and decryption
// gives the disk back.
func TestEncryptPartitionMBR(t *testing.T) {
	dir := t.TempDir()
	s0 := mbrSector(t, unhex(t, sfdiskEntries))
	orig, ob := makeMBRDisk(t, dir, s0, 1, 32<<20)
	enc := filepath.Join(dir, "enc.img")
	res, err := encryptPart(t, orig, enc, PartitionOptions{Partition: 2})
	if err != nil {
		t.Fatal(err)
	}
	payload := res.Header.Info().PayloadOffset
	if payload != 2<<20 || res.Table != "mbr" || res.Format != Raw {
		t.Fatalf("payload %d, table %s, format %s", payload, res.Table, res.Format)
	}
	eb, _ := os.ReadFile(enc)
	if int64(len(eb)) != 32<<20+2<<20 {
		t.Fatalf("disk of %d bytes", len(eb))
	}
	if !bytes.Equal(eb[:446], ob[:446]) || !bytes.Equal(eb[510:512], ob[510:512]) {
		t.Error("boot code, disk signature or MBR signature changed")
	}
	if got, want := eb[446:510], unhex(t, mbrAfter+strings.Repeat("00", 16)); !bytes.Equal(got, want) {
		t.Errorf("records\n%x, want sfdisk's\n%x", got, want)
	}
	p2, end := int64(22528*512), int64(22528+16391)*512
	if !bytes.Equal(eb[512:p2], ob[512:p2]) {
		t.Error("bytes before partition 2 changed")
	}
	if !bytes.Equal(eb[end+2<<20:], ob[end:]) {
		t.Error("bytes after partition 2 (partition 3, the gaps) did not move unchanged")
	}
	if !bytes.Equal(containerPlain(t, enc, 2), ob[p2:end]) {
		t.Error("the container's plaintext is not the old partition 2")
	}
	back := filepath.Join(dir, "back.img")
	if r := decryptPart(t, enc, back, PartitionOptions{Partition: 2}); r.DiskSize != 32<<20 || r.Table != "mbr" {
		t.Errorf("decrypt result %+v", r)
	}
	if bb, _ := os.ReadFile(back); !bytes.Equal(bb, ob) {
		t.Error("decrypting does not give the original disk back")
	}

	// A new type byte; names do not exist on an MBR.
	typed := filepath.Join(dir, "typed.img")
	if _, err := encryptPart(t, orig, typed, PartitionOptions{Partition: 3, Type: "0xE8"}); err != nil {
		t.Fatal(err)
	}
	if tb, _ := os.ReadFile(typed); tb[446+32+4] != 0xe8 || !bytes.Equal(tb[446:478], ob[446:478]) {
		t.Errorf("record 3 type %#x, or records 1-2 changed", tb[446+32+4])
	}
	name := "x"
	for _, o := range []PartitionOptions{{Partition: 1, Name: &name}, {Partition: 1, Type: "5"}, {Partition: 1, Type: "ee"}, {Partition: 1, Type: "zz"}} {
		if _, err := encryptPart(t, orig, filepath.Join(dir, "bad.img"), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// ebrDisk is an MBR disk with primary partition 1, extended partition 2
// holding logical partitions 5 and 6 (EBRs as sfdisk lays them out, zero
// CHS), and primary partition 3 after it.
func ebrDisk(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	var rec []byte
	rec = append(rec, mbrRecord(0x80, 0x83, 2048, 20480)...)
	rec = append(rec, mbrRecord(0, 0x05, 22528, 30720)...)
	rec = append(rec, mbrRecord(0, 0x83, 55296, 8192)...)
	path, b := makeMBRDisk(t, dir, mbrSector(t, rec), 2, 32<<20)
	ebr := func(at int64, logical, next []byte) {
		s := b[at*512 : at*512+512]
		clear(s[446:])
		copy(s[446:], logical)
		copy(s[462:], next)
		s[510], s[511] = 0x55, 0xaa
	}
	ebr(22528, mbrRecord(0, 0x83, 2048, 8192), mbrRecord(0, 0x05, 10240, 12288))
	ebr(22528+10240, mbrRecord(0, 0x83, 2048, 8192), nil)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, b
}

// TestEncryptPartitionMBRLogical: encrypting primary partition 1 moves the
// extended partition whole (its EBRs and logical partitions unchanged,
// since their addresses are relative to it) and partition 3; the extended
// and logical partitions themselves are refused, a missing number lists
// sfdisk's numbering.
func TestEncryptPartitionMBRLogical(t *testing.T) {
	dir := t.TempDir()
	orig, ob := ebrDisk(t, dir)
	enc := filepath.Join(dir, "enc.img")
	if _, err := encryptPart(t, orig, enc, PartitionOptions{Partition: 1}); err != nil {
		t.Fatal(err)
	}
	eb, _ := os.ReadFile(enc)
	const move = 2 << 20
	end := int64(2048+20480) * 512
	if !bytes.Equal(eb[end+move:], ob[end:]) {
		t.Error("the extended partition and what follows did not move unchanged")
	}
	for i, want := range [][]byte{mbrRecord(0, 0x05, 22528+4096, 30720), mbrRecord(0, 0x83, 55296+4096, 8192)} {
		if got := eb[462+16*i : 478+16*i]; !bytes.Equal(got, want) {
			t.Errorf("record %d: %x, want %x", i+2, got, want)
		}
	}
	back := filepath.Join(dir, "back.img")
	decryptPart(t, enc, back, PartitionOptions{Partition: 1})
	if bb, _ := os.ReadFile(back); !bytes.Equal(bb, ob) {
		t.Error("decrypting does not give the original disk back")
	}

	for _, c := range []struct {
		part int
		want error
		msg  string
	}{
		{2, ErrUnsupportedPartition, "extended partition"},
		{5, ErrUnsupportedPartition, "logical partition"},
		{6, ErrUnsupportedPartition, "logical partition"},
		{4, ErrNoPartition, "the disk has 1, 2, 3, 5, 6"},
		{7, ErrNoPartition, "the disk has 1, 2, 3, 5, 6"},
	} {
		_, err := encryptPart(t, orig, filepath.Join(dir, "x.img"), PartitionOptions{Partition: c.part})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("partition %d: %v, want %v and %q", c.part, err, c.want, c.msg)
		}
	}
}

// TestPartitionTableDetection: no table, a boot sector that is not an
// MBR, and a protective MBR without a GPT are refused as ErrNoTable.
func TestPartitionTableDetection(t *testing.T) {
	dir := t.TempDir()
	fat := make([]byte, SectorSize)
	copy(fat, "\xeb\x58\x90mkfs.fat")
	fat[446], fat[510], fat[511] = 0x12, 0x55, 0xaa
	pmbr := mbrSector(t, mbrRecord(0, 0xee, 1, 1<<17-1))
	for name, s0 := range map[string][]byte{"zeros": make([]byte, SectorSize), "fat": fat, "pmbr": pmbr} {
		path, _ := makeMBRDisk(t, dir, s0, 3, 1<<20)
		if _, err := encryptPart(t, path, filepath.Join(dir, "x.img"), PartitionOptions{Partition: 1}); !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: %v, want ErrNoTable", name, err)
		}
	}
}

// sparseDisk is a partDisk of any size: sector 0 is s0, the rest zeros.
type sparseDisk []byte

func (s sparseDisk) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(s)) {
		copy(p, s[off:])
	}
	return len(p), nil
}

// TestPartitionMBRLimit: a layout that would put a partition's end past
// sector 2^32-1 is refused, whether the partition grows or moves there.
func TestPartitionMBRLimit(t *testing.T) {
	const near = 1<<32 - 3000
	rec := append(mbrRecord(0, 0x83, 2048, 1000), mbrRecord(0, 0x83, near, 2000)...)
	s0 := mbrSector(t, rec)
	d := &partDisk{plain: &Plain{Format: Raw}, r: sparseDisk(s0), size: (1<<32 + 8192) * SectorSize}
	for _, part := range []int{1, 2} {
		tb, err := d.readTable(part)
		if err != nil {
			t.Fatal(err)
		}
		err = tb.relayout(2<<20, 2<<20, d.size+2<<20, PartitionOptions{})
		if !errors.Is(err, ErrMBRLimit) || !strings.Contains(err.Error(), "partition 2 would end at sector 4294970391") {
			t.Errorf("partition %d: %v, want ErrMBRLimit for partition 2", part, err)
		}
	}
	// The same disk, a header that fits: fine.
	tb, _ := d.readTable(1)
	if err := tb.relayout(512*500, 512*500, d.size+512*500, PartitionOptions{}); err != nil {
		t.Errorf("a layout within 2^32 sectors: %v", err)
	}
}

func TestCHS(t *testing.T) {
	for _, c := range []struct {
		lba  int64
		want string
	}{{2048, "202100"}, {22527, "662501"}, {16064, "fe3f00"}, {16065, "000101"}, {18874368, "feffff"}, {1<<32 - 1, "feffff"}} {
		if got := hex.EncodeToString(chsOf(c.lba)); got != c.want {
			t.Errorf("chsOf(%d) = %s, want %s", c.lba, got, c.want)
		}
	}
}
