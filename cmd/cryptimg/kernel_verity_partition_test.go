package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"testing"
)

// kernelVerityPartitionChecks registers the kernel checks of verity format
// --partition with o (the caller boots): the kernel reads the GPT that
// cryptimg rewrote, and veritysetup open of its partitions 1 (data) and 2
// (the new hash partition) with the root hash maps the data partition's
// bytes; a copy with one data byte flipped reads up to that block and fails
// its read.
func kernelVerityPartitionChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	disk := verityGPTDisk(t, dir, 4, "start=2048, size=2048, type="+typeRootX86+"\n")
	r := mustRun(t, "verity", "format", "--partition", "1", disk, "--json")
	var j verityPartitionJSON
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	want := shaOf(b[1<<20 : 2<<20])
	b[1<<20+77*4096+5] ^= 1
	bad := writeFile(t, disk+".bad", string(b))

	dev := o.disk(disk)
	o.b.Check("verity-partition-open", fmt.Sprintf("veritysetup open %s1 vp1 %s2 %s\nsha /dev/mapper/vp1\nveritysetup close vp1",
		dev, dev, j.RootHash))
	o.sums["verity-partition-open"] = hex.EncodeToString(want[:])
	bdev := o.disk(bad)
	o.check("verity-partition-bad-block", fmt.Sprintf(`veritysetup open %s1 vp2 %s2 %s
dd if=/dev/mapper/vp2 of=/dev/null bs=4096 count=77
if dd if=/dev/mapper/vp2 of=/dev/null bs=4096 skip=77 count=1; then echo "block 77 read"; exit 1; fi
veritysetup close vp2`, bdev, bdev, j.RootHash))
}
