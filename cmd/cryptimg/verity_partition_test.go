package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	bin "encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/image/filelock"
	"github.com/cryptimg/cryptimg/vectors/peer"
)

const (
	typeRootX86    = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709"
	typeRootVerity = "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5"
	typeUsrArm64   = "b0e01050-ee5f-4390-949a-9101b17104e9"
	typeUsrVerityA = "6e11a4e7-fbca-4ded-b9e9-e1a512bb664e"
	typeLinux      = "0fc63daf-8483-4772-8e79-3d47d8e4477d"
)

// sfdiskPart is one partition of sfdisk --json.
type sfdiskPart struct {
	Start, Size uint64
	Type, UUID  string
	Name, Attrs string
}

// verityGPTDisk makes a raw GPT disk of size MiB with sfdisk from script
// (sfdisk's input) and fills every partition with random bytes.
func verityGPTDisk(t *testing.T, dir string, mib int, script string) string {
	t.Helper()
	sfdisk := requireTool(t, "sfdisk")
	disk := randomFile(t, dir, "disk.img", mib<<20)
	cmd := exec.Command(sfdisk, "-q", disk)
	cmd.Stdin = strings.NewReader("label: gpt\n" + script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sfdisk: %v\n%s", err, out)
	}
	return disk
}

func sfdiskList(t *testing.T, disk string) map[string]sfdiskPart {
	t.Helper()
	out, err := exec.Command(requireTool(t, "sfdisk"), "--json", disk).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var j struct {
		PartitionTable struct {
			Partitions []struct {
				Node string
				sfdiskPart
			}
		}
	}
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatal(err)
	}
	m := map[string]sfdiskPart{}
	for _, p := range j.PartitionTable.Partitions {
		m[p.Node[len(disk):]] = p.sfdiskPart
	}
	if out, err := exec.Command(requireTool(t, "sfdisk"), "--verify", disk).CombinedOutput(); err != nil || !strings.Contains(string(out), "No errors detected") {
		t.Errorf("sfdisk --verify: %v\n%s", err, out)
	}
	return m
}

// cut copies the sectors of p out of disk into dir/name.
func cut(t *testing.T, disk, dir, name string, p sfdiskPart) string {
	t.Helper()
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, filepath.Join(dir, name), string(b[p.Start*512:(p.Start+p.Size)*512]))
}

// TestVerityPartition builds the tree of a root-x86-64 partition into a new
// partition: sfdisk lists the root-verity type, the read-only flag and the
// UUIDs taken from the root hash (first and last 128 bits), both GPT
// copies agree (sfdisk --verify), the hash partition holds what veritysetup
// format writes for the same data, salt and UUID, veritysetup verify
// accepts the two partitions' bytes and rejects them with a data byte
// flipped, systemd-dissect (as root) finds the root partition by the root
// hash, and verity verify --partition finds the pair by the root hash and
// exits 4 on wrong UUIDs and on a flipped byte.
func TestVerityPartition(t *testing.T) {
	dir := t.TempDir()
	disk := verityGPTDisk(t, dir, 12, "start=2048, size=16384, type="+typeRootX86+"\n")
	// An ext4 in the root partition: systemd-dissect reads its metadata.
	sh(t, requireTool(t, "mkfs.ext4"), "-q", "-F", "-E", "offset=1048576", disk, "8M")
	r := mustRun(t, "verity", "format", "--partition", "1", disk, "--json", "--salt", veritySalt, "--uuid", verityUUID)
	var j verityPartitionJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	root := j.RootHash
	if len(root) != 64 || j.HashPartition != 2 || !j.NewPartition {
		t.Fatalf("json: %+v", j)
	}
	u := func(h string) string {
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
	}
	parts := sfdiskList(t, disk)
	data, hash := parts["1"], parts["2"]
	if !strings.EqualFold(data.Type, typeRootX86) || !strings.EqualFold(data.UUID, u(root[:32])) {
		t.Errorf("data partition %+v, want type %s, UUID %s", data, typeRootX86, u(root[:32]))
	}
	if !strings.EqualFold(hash.Type, typeRootVerity) || !strings.EqualFold(hash.UUID, u(root[32:])) || hash.Attrs != "GUID:60" || hash.Name != "root-x86-64-verity" {
		t.Errorf("hash partition %+v, want type %s, UUID %s, GUID:60", hash, typeRootVerity, u(root[32:]))
	}
	if hash.Start%2048 != 0 || hash.Start < data.Start+data.Size || hash.Size != 2048 {
		t.Errorf("hash partition at sector %d, %d sectors", hash.Start, hash.Size)
	}
	dataFile := cut(t, disk, dir, "data", data)
	hashFile := cut(t, disk, dir, "hash", hash)
	if out, code := veritysetup(t, "verify", dataFile, hashFile, root); code != 0 {
		t.Fatalf("veritysetup verify: exit %d\n%s", code, out)
	}
	out, _ := veritysetup(t, "dump", hashFile)
	if !strings.Contains(out, verityUUID) || !strings.Contains(out, "Data blocks:     \t2048") {
		t.Errorf("veritysetup dump:\n%s", out)
	}
	// veritysetup format of the same data, salt and UUID writes the
	// partition's superblock and tree byte for byte.
	ref := filepath.Join(dir, "ref")
	if out, code := veritysetup(t, "format", dataFile, ref, "--salt", veritySalt, "--uuid", verityUUID); code != 0 {
		t.Fatalf("veritysetup format: exit %d\n%s", code, out)
	}
	rb, _ := os.ReadFile(ref)
	hb, _ := os.ReadFile(hashFile)
	if len(rb) > len(hb) || string(hb[:len(rb)]) != string(rb) {
		t.Error("the hash partition differs from veritysetup format's hash file")
	}
	mustRun(t, "verity", "verify", "--partition", "1", disk, root)

	b, _ := os.ReadFile(dataFile)
	b[5000] ^= 1
	writeFile(t, dataFile, string(b))
	if _, code := veritysetup(t, "verify", dataFile, hashFile, root); code == 0 {
		t.Error("veritysetup verify accepted a flipped data byte")
	}
	// cryptimg's verify --partition: the hash partition found by the
	// root hash's last 128 bits, the data partition's UUID checked.
	other := strings.Repeat("0", 32) + root[32:]
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--partition", "1", disk, other}, "not 00000000-0000-0000-0000-000000000000 (the root hash's first 128 bits)"},
		{[]string{"--partition", "1", disk, root[:32] + strings.Repeat("0", 32)}, "no partition has the UUID 00000000"},
		{[]string{"--partition", "1", "--hash-partition", "2", disk, other}, "partition 2: hash block 0 of level 1"},
	} {
		r := cryptimg(t, "", append([]string{"verity", "verify"}, c.args...)...)
		if r.code != 4 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("verify %v: exit %d, %s", c.args, r.code, r.stderr)
		}
	}

	dissect := requireTool(t, "systemd-dissect")
	if os.Geteuid() != 0 {
		peer.Missing(t, "systemd-dissect needs root (loop devices)")
	}
	defer func() {
		// Last: a flipped byte in the disk's data partition.
		db, _ := os.ReadFile(disk)
		db[1<<20+9*4096+1] ^= 1
		writeFile(t, disk, string(db))
		r := cryptimg(t, "", "verity", "verify", "--partition", "1", disk, root)
		if r.code != 4 || !strings.Contains(r.stderr, "partition 1: data block 9 ") {
			t.Errorf("verify of a flipped data byte: exit %d, %s", r.code, r.stderr)
		}
	}()
	dout, err := exec.Command(dissect, "--json=short", "--root-hash="+root, disk).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("systemd-dissect --root-hash: %v\n%s%s", err, dout, stderr)
	}
	var d struct{ Mounts []map[string]any }
	if err := json.Unmarshal(dout, &d); err != nil {
		t.Fatalf("%v\n%s", err, dout)
	}
	got := map[string]any{}
	for _, m := range d.Mounts {
		got[m["designator"].(string)] = m["verity"]
	}
	if got["root"] != "yes" || len(d.Mounts) != 2 {
		t.Errorf("systemd-dissect: %s", dout)
	}
	if _, ok := got["root-verity"]; !ok {
		t.Errorf("systemd-dissect: no root-verity partition: %s", dout)
	}
}

// TestVerityPartitionExisting writes the tree of a usr-arm64 partition into
// an existing partition (--hash-partition): it gets usr-arm64-verity and
// the UUID, keeps its place and name; cryptimg's own verify accepts it.
func TestVerityPartitionExisting(t *testing.T) {
	dir := t.TempDir()
	disk := verityGPTDisk(t, dir, 8, "start=2048, size=4096, type="+typeUsrArm64+"\nstart=8192, size=2048, type="+typeLinux+", name=mine\n")
	r := mustRun(t, "verity", "format", "--partition", "1", "--hash-partition", "2", "--data-block-size", "512", "--hash-block-size", "512", disk, "--root-hash-file", filepath.Join(dir, "root"))
	root, _ := os.ReadFile(filepath.Join(dir, "root"))
	if !strings.Contains(r.stdout, "Root hash:      \t"+string(root)) {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	parts := sfdiskList(t, disk)
	hash := parts["2"]
	if len(parts) != 2 || hash.Start != 8192 || hash.Size != 2048 || hash.Name != "mine" || !strings.EqualFold(hash.Type, typeUsrVerityA) {
		t.Errorf("partitions %+v", parts)
	}
	if !strings.EqualFold(strings.ReplaceAll(hash.UUID, "-", ""), string(root[32:])) {
		t.Errorf("hash UUID %s, root %s", hash.UUID, root)
	}
	mustRun(t, "verity", "verify", cut(t, disk, dir, "data", parts["1"]), cut(t, disk, dir, "hash", hash), string(root))
}

// TestVerityPartitionRefusals: a data partition of a type without a verity
// type needs --hash-type; a full disk, a too small hash partition and
// --hash-offset are refused, and a refused run changes no byte; --grow
// adds the partition after the end of a grown image; a disk without a GPT
// and a qcow2 image are refused by name.
func TestVerityPartitionRefusals(t *testing.T) {
	dir := t.TempDir()
	disk := verityGPTDisk(t, dir, 4, "start=2048, size=4096, type="+typeLinux+"\nstart=6144, size=16, type="+typeLinux+"\n")
	before := fileSHA(t, disk)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--partition", "1"}, 1, "give the hash partition's type"},
		{[]string{"--partition", "1", "--hash-type", typeRootVerity}, 1, "no free space on the disk: no gap of 1048576 bytes for the hash partition (--grow adds it"},
		{[]string{"--partition", "1", "--hash-partition", "2", "--hash-type", typeRootVerity}, 1, "too small"},
		{[]string{"--partition", "1", "--hash-partition", "1", "--hash-type", typeRootVerity}, 1, "its own tree"},
		{[]string{"--partition", "3", "--hash-type", typeRootVerity}, 1, "no such partition"},
		{[]string{"--partition", "1", "--hash-offset", "4096"}, 1, "--hash-offset does not go with --partition"},
	} {
		r := cryptimg(t, "", append([]string{"verity", "format", disk}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d, %q", c.args, r.code, r.stderr, c.code, c.msg)
		}
	}
	if fileSHA(t, disk) != before {
		t.Error("a refused run changed the disk")
	}
	// --grow: the hash partition after the old end, the image grown to the
	// next MiB after it and the backup GPT (sfdisk --verify; last-lba), the
	// protective MBR sized to it.
	grown := filepath.Join(dir, "grown.img")
	b, _ := os.ReadFile(disk)
	writeFile(t, grown, string(b))
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	kp, cp, _ := signerFiles(t, dir, "grow", ecKey)
	// A linux-generic data partition has no signature partition type: the
	// image is refused before it grows.
	r := cryptimg(t, "", "verity", "format", "--partition", "1", "--hash-type", typeRootVerity, "--grow", grown, "--private-key", kp, "--certificate", cp)
	if r.code != 1 || !strings.Contains(r.stderr, "no signature partition type") {
		t.Errorf("signature of a linux-generic partition: exit %d, %s", r.code, r.stderr)
	}
	if st, _ := os.Stat(grown); st.Size() != 4<<20 {
		t.Errorf("refused run grew the image to %d", st.Size())
	}
	r = mustRun(t, "verity", "format", "--partition", "1", "--hash-type", typeRootVerity, "--grow", grown, "--json")
	var j verityPartitionJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	gp := sfdiskList(t, grown)
	if st, _ := os.Stat(grown); st.Size() != 6<<20 || j.DiskSize != 6<<20 || gp["3"].Start != 8192 || gp["3"].Size != 2048 {
		t.Errorf("grown to %d bytes (json %d), partition 3 %+v", st.Size(), j.DiskSize, gp["3"])
	}
	mustRun(t, "verity", "verify", "--partition", "1", grown, j.RootHash)
	if out := sh(t, requireTool(t, "sfdisk"), "--dump", grown); !strings.Contains(out, "last-lba: 12254") {
		t.Errorf("sfdisk --dump:\n%s", out)
	}
	mbr, _ := os.ReadFile(grown)
	if got := bin.LittleEndian.Uint32(mbr[446+12:]); got != 6<<11-1 {
		t.Errorf("protective MBR size %d sectors", got)
	}
	// Not a GPT disk; a qcow2 image.
	plain := randomFile(t, dir, "plain.img", 1<<20)
	q := filepath.Join(dir, "disk.qcow2")
	sh(t, requireTool(t, "qemu-img"), "convert", "-O", "qcow2", disk, q)
	for img, msg := range map[string]string{plain: "not a GPT disk", q: "a qcow2 image"} {
		r := cryptimg(t, "", "verity", "format", "--partition", "1", img)
		if r.code != 1 || !strings.Contains(r.stderr, msg) {
			t.Errorf("%s: exit %d, %q; want %q", filepath.Base(img), r.code, r.stderr, msg)
		}
	}
	// With a type given, the tree goes into a gap between partitions.
	disk2 := verityGPTDisk(t, t.TempDir(), 8, "start=2048, size=4096, type="+typeLinux+"\nstart=14336, size=1024, type="+typeLinux+"\n")
	mustRun(t, "verity", "format", disk2, "--partition", "1", "--hash-type", typeRootVerity)
	p := sfdiskList(t, disk2)["3"]
	if p.Start != 6144 || p.Name != "verity" {
		t.Errorf("new partition %+v, want it at sector 6144", p)
	}
}

// TestVerityPartitionLocks: format --partition holds the image
// exclusively (exit 5 while another reads it, nothing written), verify
// --partition shares it with readers and waits for no writer.
func TestVerityPartitionLocks(t *testing.T) {
	dir := t.TempDir()
	disk := verityGPTDisk(t, dir, 4, "start=2048, size=2048, type="+typeRootX86+"\n")
	before := fileSHA(t, disk)
	release := holdLock(t, disk, filelock.Shared)
	r := cryptimg(t, "", "verity", "format", "--partition", "1", disk)
	release()
	wantBusy(t, r, disk, "read-only", os.Getpid(), "cryptimg.test)")
	if fileSHA(t, disk) != before {
		t.Error("a locked image changed")
	}
	root := filepath.Join(dir, "root")
	mustRun(t, "verity", "format", "--partition", "1", disk, "--root-hash-file", root)
	release = holdLock(t, disk, filelock.Exclusive)
	r = cryptimg(t, "", "verity", "verify", "--partition", "1", disk, "--root-hash-file", root)
	release()
	wantBusy(t, r, disk, "read-write", os.Getpid(), "cryptimg.test)")
	release = holdLock(t, disk, filelock.Shared)
	defer release()
	mustRun(t, "verity", "verify", "--partition", "1", disk, "--root-hash-file", root)
}
