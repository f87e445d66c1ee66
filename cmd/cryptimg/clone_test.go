package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// qcowAllocated is the "N/M = P% allocated" figure of qemu-img check.
func qcowAllocated(t *testing.T, img, key string) string {
	t.Helper()
	out := sh(t, requireTool(t, "qemu-img"), "check", "--object", "secret,id=s,file="+key,
		"--image-opts", "driver=qcow2,encrypt.key-secret=s,file.filename="+img)
	m := regexp.MustCompile(`(\d+/\d+) = [\d.]+% allocated`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("qemu-img check:\n%s", out)
	}
	return m[1]
}

// TestClone: a clone has a new UUID and a new volume key, holds the same
// plaintext, opens with the passphrases it was given (in cryptsetup and
// qemu-img), keeps the source's format unless told, and a qcow2 clone
// stays as sparse as its source.
func TestClone(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "golden passphrase")
	key2 := writeFile(t, filepath.Join(dir, "key2"), "instance passphrase")
	key3 := writeFile(t, filepath.Join(dir, "key3"), "colleague passphrase")
	plain := randomFile(t, dir, "plain.raw", 6<<20)
	golden := filepath.Join(dir, "golden.luks")
	fastEncrypt(t, key, plain, golden)
	mustRun(t, "add-key", "-d", key, "--new-key-file", key3, "--pbkdf-force-iterations", "1000", golden)

	clone := filepath.Join(dir, "vm1.luks")
	r := mustRun(t, "clone", "-d", key, "--new-key-file", key2, "--keep-key-file", key3, "--pbkdf-force-iterations", "1000", "--json", golden, clone)
	var s cloneSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatal(err)
	}
	if s.UUID == s.SourceUUID || s.Cipher != "aes-cbc-essiv:sha256" || s.KeyBits != 256 || len(s.KeySlots) != 2 {
		t.Fatalf("clone summary %+v", s)
	}
	if uuidOf(t, cs, clone) == uuidOf(t, cs, golden) || bytes.Equal(dumpedKey(t, cs, key2, clone), dumpedKey(t, cs, key, golden)) {
		t.Fatal("the clone shares the source's UUID or volume key")
	}
	sh(t, cs, "open", "--test-passphrase", "--key-file", key3, clone)
	if r := cryptimg(t, "", "test-key", "-d", key, clone); r.code != 2 {
		t.Fatalf("the source passphrase opens a clone given --new-key-file: exit %d", r.code)
	}
	out := filepath.Join(dir, "vm1.raw")
	mustRun(t, "decrypt", "-d", key2, clone, out)
	sameContent(t, plain, out)

	// Another cipher and LUKS2; the source's passphrase by default.
	c2 := filepath.Join(dir, "vm2.luks")
	mustRun(t, "clone", "-d", key, "--type", "luks2", "--cipher", "aes-xts-plain64", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", golden, c2)
	if d := sh(t, cs, "luksDump", c2); !strings.Contains(d, "Version:       \t2") || !strings.Contains(d, "cipher: aes-xts-plain64") {
		t.Fatalf("LUKS2 clone:\n%s", d)
	}
	out2 := filepath.Join(dir, "vm2.raw")
	mustRun(t, "decrypt", "-d", key, c2, out2)
	sameContent(t, plain, out2)

	// An integrity clone of the LUKS2 copy keeps the protection.
	ic := filepath.Join(dir, "vm3.luks")
	mustRun(t, "clone", "-d", key, "--integrity", "hmac-sha256", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", c2, ic)
	ic2 := filepath.Join(dir, "vm4.luks")
	mustRun(t, "clone", "-d", key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", ic, ic2)
	mustRun(t, "verify", "-d", key, ic2)
	out4 := filepath.Join(dir, "vm4.raw")
	mustRun(t, "decrypt", "-d", key, ic2, out4)
	sameContent(t, plain, out4)

	// Refusals: the output exists; a keep key that opens nothing.
	if r := cryptimg(t, "", "clone", "-d", key, golden, clone); r.code != 1 {
		t.Fatalf("clone over an existing file: exit %d", r.code)
	}
	bad := writeFile(t, filepath.Join(dir, "bad"), "opens nothing")
	nope := filepath.Join(dir, "nope.luks")
	if r := cryptimg(t, "", "clone", "-d", key, "--keep-key-file", bad, golden, nope); r.code != 2 {
		t.Fatalf("clone with a wrong --keep-key-file: exit %d\n%s", r.code, r.stderr)
	}
	noFile(t, nope)
}

// TestCloneQcow2: a qcow2 golden image cloned stays qcow2, as sparse as it
// was, and qemu-img reads the clone.
func TestCloneQcow2(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "golden passphrase")
	// A sparse plaintext: data at the start and at 40 MiB of a 64 MiB disk.
	plain := filepath.Join(dir, "plain.raw")
	f, _ := os.Create(plain)
	f.Truncate(64 << 20)
	data := bytes.Repeat([]byte("golden image "), 100000)
	f.WriteAt(data, 0)
	f.WriteAt(data, 40<<20)
	f.Close()
	golden := filepath.Join(dir, "golden.qcow2")
	fastEncrypt(t, key, plain, golden, "-O", "qcow2")
	clone := filepath.Join(dir, "vm.qcow2")
	mustRun(t, "clone", "-d", key, "--pbkdf-force-iterations", "1000", golden, clone)
	if a, b := qcowAllocated(t, golden, key), qcowAllocated(t, clone, key); a != b {
		t.Fatalf("allocated clusters: golden %s, clone %s", a, b)
	}
	out := filepath.Join(dir, "vm.raw")
	sh(t, qi, "convert", "--object", "secret,id=s,file="+key, "--image-opts",
		"driver=qcow2,encrypt.key-secret=s,file.filename="+clone, "-O", "raw", out)
	sameContent(t, plain, out)
}

// TestCloneMasterKey: --master-key-file gives the clone the key derived
// from the master and the clone's new UUID.
func TestCloneMasterKey(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "golden passphrase")
	mk := randomFile(t, dir, "master", 32)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	golden := filepath.Join(dir, "golden.luks")
	fastEncrypt(t, key, plain, golden)
	clone := filepath.Join(dir, "vm.luks")
	mustRun(t, "clone", "-d", key, "--master-key-file", mk, "--pbkdf-force-iterations", "1000", golden, clone)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "restored")
	mustRun(t, "add-key", "--master-key-file", mk, "--new-key-file", key2, "--pbkdf-force-iterations", "1000", clone)
	sh(t, cs, "open", "--test-passphrase", "--key-file", key2, clone)
}
