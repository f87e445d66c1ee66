package main

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kernelVerityChecks registers the kernel checks of verity format with o
// (the caller boots, with o.run): veritysetup open of cryptimg's tree,
// separate and at a hash offset in the data's own file, maps the data and
// reads it back; with one data byte flipped the mapping reads the blocks
// before it and fails the read of that block, as dm-verity does.
func kernelVerityChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	const blocks = 600 // 5 hash blocks: two levels
	data := randomFile(t, dir, "verity-data", blocks*4096)
	hash := filepath.Join(dir, "verity-hash")
	rootFile := filepath.Join(dir, "verity-root")
	mustRun(t, "verity", "format", data, hash, "--root-hash-file", rootFile)
	root, _ := os.ReadFile(rootFile)
	want := fileSHA(t, data)

	// The same data with a tree after it in one file.
	shared := filepath.Join(dir, "verity-shared")
	b, _ := os.ReadFile(data)
	writeFile(t, shared, string(b)+strings.Repeat("\x00", 64<<10))
	off := fmt.Sprint(blocks * 4096)
	mustRun(t, "verity", "format", shared, shared, "--data-blocks", fmt.Sprint(blocks), "--hash-offset", off, "--root-hash-file", rootFile)
	sharedRoot, _ := os.ReadFile(rootFile)

	b[417*4096+99] ^= 1
	bad := writeFile(t, filepath.Join(dir, "verity-bad"), string(b))

	o.b.Check("verity-open", fmt.Sprintf("veritysetup open %s v1 %s %s\nsha /dev/mapper/v1\nveritysetup close v1",
		o.disk(data), o.disk(hash), root))
	o.sums["verity-open"] = hex.EncodeToString(want[:])
	o.b.Check("verity-open-shared", fmt.Sprintf("veritysetup open %s v2 %s %s --hash-offset %s\nsha /dev/mapper/v2\nveritysetup close v2",
		o.disk(shared), o.disk(shared), sharedRoot, off))
	o.sums["verity-open-shared"] = hex.EncodeToString(want[:])
	o.check("verity-bad-block", fmt.Sprintf(`veritysetup open %s v3 %s %s
dd if=/dev/mapper/v3 of=/dev/null bs=4096 count=417
if dd if=/dev/mapper/v3 of=/dev/null bs=4096 skip=417 count=1; then echo "block 417 read"; exit 1; fi
dd if=/dev/mapper/v3 of=/dev/null bs=4096 skip=418
veritysetup close v3`, o.disk(bad), o.disk(hash), root))
}
