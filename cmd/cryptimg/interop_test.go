package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testPassphrase = "correct horse battery staple"

// qemuSecret is the --object argument that hands qemu-img the passphrase
// in a file, never on the command line.
func qemuSecret(keyFile string) string { return "secret,id=sec0,file=" + keyFile }

const qemuLUKSOpts = "key-secret=sec0,cipher-alg=aes-256,cipher-mode=cbc,ivgen-alg=essiv,ivgen-hash-alg=sha256,hash-alg=sha256,iter-time=10"

// (a) cryptimg's output is a real LUKS1 image: cryptsetup parses it and
// unlocks its key, and qemu-img decrypts it byte-exact.
func TestInteropCryptimgToPeers(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 64<<20)
	enc := filepath.Join(dir, "enc.luks")
	mustRun(t, "encrypt", "--key-file", key, "--pbkdf-force-iterations", "1000", plain, enc)

	dump := sh(t, cs, "luksDump", enc)
	for _, want := range []string{"Version:       \t1", "Cipher name:   \taes", "Cipher mode:   \tcbc-essiv:sha256",
		"Hash spec:     \tsha256", "Payload offset:\t4096", "MK bits:       \t256", "Key Slot 0: ENABLED", "Key Slot 1: DISABLED"} {
		if !strings.Contains(dump, want) {
			t.Errorf("luksDump lacks %q:\n%s", want, dump)
		}
	}
	sh(t, cs, "open", "--test-passphrase", "--key-file", key, enc)

	back := filepath.Join(dir, "back.raw")
	sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts",
		"driver=luks,key-secret=sec0,file.filename="+enc, "-O", "raw", back)
	sameContent(t, plain, back)
}

// (b) images cryptsetup formats, with data qemu-img writes into them,
// decrypt byte-exact with cryptimg.
func TestInteropCryptsetupToCryptimg(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	qi := requireTool(t, "qemu-img")
	for _, c := range []struct {
		bits int
		hash string
	}{{128, "sha1"}, {128, "sha256"}, {256, "sha1"}, {256, "sha256"}} {
		t.Run(fmt.Sprintf("aes%d-%s", c.bits, c.hash), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
			plain := randomFile(t, dir, "plain.raw", 8<<20)
			enc := filepath.Join(dir, "enc.luks")
			payload := map[int]int64{128: 2048, 256: 4096}[c.bits] * 512
			if err := os.WriteFile(enc, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(enc, payload+8<<20); err != nil {
				t.Fatal(err)
			}
			sh(t, cs, "luksFormat", "--type", "luks1", "--batch-mode", "--cipher", "aes-cbc-essiv:sha256",
				"--key-size", fmt.Sprint(c.bits), "--hash", c.hash, "--pbkdf-force-iterations", "1000",
				"--key-file", key, enc)
			sh(t, qi, "convert", "--object", qemuSecret(key), "-n", "-f", "raw", plain, "--target-image-opts",
				"driver=luks,key-secret=sec0,file.filename="+enc)
			out := filepath.Join(dir, "out.raw")
			r := mustRun(t, "decrypt", "--key-file", key, "--json", enc, out)
			if !strings.Contains(r.stdout, fmt.Sprintf(`"key_bits":%d`, c.bits)) || !strings.Contains(r.stdout, `"hash":"`+c.hash+`"`) {
				t.Errorf("summary does not describe the image: %s", r.stdout)
			}
			sameContent(t, plain, out)
		})
	}
}

// (c) images qemu-img creates with its own (unaligned) LUKS layout decrypt
// byte-exact.
func TestInteropQemuToCryptimg(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 8<<20)

	t.Run("convert", func(t *testing.T) {
		enc := filepath.Join(dir, "conv.luks")
		retry(t, qi, "convert", "--object", qemuSecret(key), "-f", "raw", "-O", "luks", "-o", qemuLUKSOpts, plain, enc)
		r := mustRun(t, "dump", "--json", enc)
		if !strings.Contains(r.stdout, `"payload_offset": 2056`) {
			t.Errorf("qemu's layout should put the payload at sector 2056:\n%s", r.stdout)
		}
		out := filepath.Join(dir, "conv.raw")
		mustRun(t, "decrypt", "-d", key, enc, out)
		sameContent(t, plain, out)
	})
	t.Run("create", func(t *testing.T) {
		enc := filepath.Join(dir, "create.luks")
		retry(t, qi, "create", "--object", qemuSecret(key), "-f", "luks", "-o", qemuLUKSOpts, enc, "4M")
		small := randomFile(t, dir, "small.raw", 4<<20)
		sh(t, qi, "convert", "--object", qemuSecret(key), "-n", "-f", "raw", small, "--target-image-opts",
			"driver=luks,key-secret=sec0,file.filename="+enc)
		out := filepath.Join(dir, "create.raw")
		mustRun(t, "decrypt", "-d", key, enc, out)
		sameContent(t, small, out)
	})
}
