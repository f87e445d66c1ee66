package image

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// TestRootHashUUIDs: the UUIDs systemd-repart 252 gave the data and hash
// partitions of a root hash it made.
func TestRootHashUUIDs(t *testing.T) {
	root := []byte{0xa7, 0xbc, 0x33, 0x69, 0x86, 0x3a, 0x45, 0xaa, 0x48, 0x08, 0x41, 0x7a, 0xc3, 0xfd, 0xde, 0x78,
		0x25, 0x6f, 0x2b, 0x96, 0xa2, 0xcf, 0x14, 0x89, 0xa6, 0xb6, 0xd3, 0xfc, 0x95, 0x09, 0x4e, 0x4a}
	d, h := RootHashUUIDs(root)
	if d != "a7bc3369-863a-45aa-4808-417ac3fdde78" || h != "256f2b96-a2cf-1489-a6b6-d3fc95094e4a" {
		t.Errorf("got %s, %s", d, h)
	}
}

// TestVerityTypes checks the table against systemd-id128 show: every
// root and usr type systemd knows, with its verity and signature types
// (not the host-dependent aliases "native" and "secondary").
func TestVerityTypes(t *testing.T) {
	id128 := peer.Path(t, "systemd-id128")
	out, err := exec.Command(id128, "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && len(f[1]) == 32 {
			g := f[1]
			known[f[0]] = g[0:8] + "-" + g[8:12] + "-" + g[12:16] + "-" + g[16:20] + "-" + g[20:]
		}
	}
	n := 0
	for name, g := range known {
		if !strings.HasPrefix(name, "root-") && !strings.HasPrefix(name, "usr-") || strings.Contains(name, "-verity") || strings.Contains(name, "-secondary") || strings.Contains(name, "-native") {
			continue
		}
		n++
		got, v, s, ok := VerityTypes(strings.ToUpper(g))
		if !ok || got != name || v != known[name+"-verity"] || s != known[name+"-verity-sig"] {
			t.Errorf("%s (%s): got %q %s %s %v", name, g, got, v, s, ok)
		}
	}
	if n != len(discoverableTypes) || n < 40 {
		t.Errorf("systemd knows %d root/usr types, the table has %d", n, len(discoverableTypes))
	}
	if _, _, _, ok := VerityTypes("0fc63daf-8483-4772-8e79-3d47d8e4477d"); ok {
		t.Error("linux-generic has verity types")
	}
}

// failingSigner signs nothing: the step after the tree fails.
type failingSigner struct{ crypto.Signer }

func (failingSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return nil, errors.New("no signature today")
}

// TestFormatVerityPartitionOrder: the tree (and the signature) are
// written before the partition table, so a failure in between (here the
// signature) leaves both GPT copies as they were, with the tree already
// in the free space the new partition would take.
func TestFormatVerityPartitionOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 8 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	tab := &gpt.Table{LogicalSectorSize: SectorSize, PhysicalSectorSize: SectorSize, ProtectiveMBR: true, Partitions: []*gpt.Partition{
		{Index: 1, Start: 2048, End: 6143, Type: gpt.Type(strings.ToUpper("4f68bce3-e8cd-4db1-96e7-fbcaf984b709"))},
	}}
	if err := tab.Write(f, size); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 2<<20)
	rand.Read(data)
	f.WriteAt(data, 1<<20)
	gptBytes := func() []byte {
		b := make([]byte, 34*SectorSize)
		f.ReadAt(b, 0)
		e := make([]byte, 33*SectorSize)
		f.ReadAt(e, size-33*SectorSize)
		return append(b, e...)
	}
	before := gptBytes()

	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	cert, _ := x509.ParseCertificate(der)
	p, _ := verity.NewParams(0)
	_, err = FormatVerityPartition(context.Background(), f, VerityPartitionOptions{Data: 1, Params: p, Signer: failingSigner{key}, Certificate: cert})
	if err == nil || !strings.Contains(err.Error(), "no signature today") {
		t.Fatalf("err %v", err)
	}
	if !bytes.Equal(gptBytes(), before) {
		t.Error("the GPT changed although the signature failed")
	}
	if sb, err := verity.ReadSuperblock(f, 3<<20); err != nil || sb.DataBlocks != 512 {
		t.Errorf("no tree in the free space before the table: %+v, %v", sb, err)
	}

	// With Grow on a disk without a gap big enough: the failure takes
	// the growth back.
	gpath := filepath.Join(t.TempDir(), "full.img")
	gf, err := os.Create(gpath)
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	gf.Truncate(4 << 20)
	full := &gpt.Table{LogicalSectorSize: SectorSize, PhysicalSectorSize: SectorSize, ProtectiveMBR: true, Partitions: []*gpt.Partition{
		{Index: 1, Start: 2048, End: 8190, Type: gpt.Type(strings.ToUpper("4f68bce3-e8cd-4db1-96e7-fbcaf984b709"))},
	}}
	if err := full.Write(gf, 4<<20); err != nil {
		t.Fatal(err)
	}
	_, err = FormatVerityPartition(context.Background(), gf, VerityPartitionOptions{Data: 1, Params: p, Grow: true, Signer: failingSigner{key}, Certificate: cert})
	if st, _ := gf.Stat(); err == nil || st.Size() != 4<<20 {
		t.Errorf("failed grow: %v, size %d", err, st.Size())
	}
	if r, err := FormatVerityPartition(context.Background(), gf, VerityPartitionOptions{Data: 1, Params: p, Grow: true}); err != nil || r.DiskSize != 6<<20 || r.HashStart != 4<<20 {
		t.Errorf("grow: %v %+v", err, r)
	}

	res, err := FormatVerityPartition(context.Background(), f, VerityPartitionOptions{Data: 1, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpt.Read(f, SectorSize, SectorSize)
	if err != nil || got.RecoveredFromBackup || len(got.Partitions) != 2 {
		t.Fatalf("%v %+v", err, got)
	}
	h := got.Partitions[1]
	d, hu := RootHashUUIDs(res.RootHash)
	if h.Index != 2 || h.Start != 6144 || !strings.EqualFold(h.GUID, hu) || !strings.EqualFold(got.Partitions[0].GUID, d) || h.Attributes != 1<<60 {
		t.Errorf("partitions %+v %+v", got.Partitions[0], h)
	}
	if err := verity.Verify(context.Background(), &window{f: f, off: 1 << 20, size: 2 << 20}, &window{f: f, off: 3 << 20, size: 1 << 20}, res.Params, res.RootHash, verity.Options{}); err != nil {
		t.Error(err)
	}
}
