package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// kernelEncryptVerityChecks registers the kernel checks of encrypt
// --verity with o (the caller boots, with o.run): veritysetup open of the
// encrypted image with cryptimg's one-pass tree, then cryptsetup open of
// the verity device (verity then crypt), reads back the plaintext; with one
// ciphertext byte flipped, the LUKS header still opens through verity, the
// blocks before and after read, and the read of that block fails.
func kernelEncryptVerityChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	const blocks = 600
	key := writeFile(t, filepath.Join(dir, "key"), "kernel verity key")
	plain := randomFile(t, dir, "plain", blocks*4096)
	img := filepath.Join(dir, "img")
	hash := filepath.Join(dir, "img.verity")
	r := mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--verity", hash, "--json", plain, img)
	var s summary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Verity == nil {
		t.Fatalf("encrypt --verity --json: %q: %v", r.stdout, err)
	}
	root := s.Verity.RootHash
	want := fileSHA(t, plain)

	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	b[s.PayloadOffset*512+417*4096+99] ^= 1
	bad := writeFile(t, img+".bad", string(b))

	m := o.mapper()
	o.b.Check("encrypt-verity-open", fmt.Sprintf("veritysetup open %s ev1 %s %s\nunlock /dev/mapper/ev1 %s %s --readonly\nsha /dev/mapper/%s\nlock %s\nveritysetup close ev1",
		o.disk(img), o.disk(hash), root, m, o.key(key), m, m))
	o.sums["encrypt-verity-open"] = hex.EncodeToString(want[:])
	m = o.mapper()
	o.check("encrypt-verity-bad-block", fmt.Sprintf(`veritysetup open %s ev2 %s %s
unlock /dev/mapper/ev2 %s %s --readonly
dd if=/dev/mapper/%s of=/dev/null bs=4096 count=417 iflag=direct
if dd if=/dev/mapper/%s of=/dev/null bs=4096 skip=417 count=1 iflag=direct 2>/tmp/dd.err; then echo "block 417 read"; exit 1; fi
grep -q "Input/output error" /tmp/dd.err || { cat /tmp/dd.err; exit 1; }
dd if=/dev/mapper/%s of=/dev/null bs=4096 skip=418 iflag=direct
lock %s
veritysetup close ev2`, o.disk(bad), o.disk(hash), root, m, o.key(key), m, m, m, m))
}
