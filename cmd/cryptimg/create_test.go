package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cryptimg/cryptimg/image"
)

// fastCreate runs create with the minimum PBKDF2 cost.
func fastCreate(t *testing.T, key, size, out string, extra ...string) result {
	t.Helper()
	args := append([]string{"create", "--key-file", key, "--size", size}, extra...)
	if !strings.Contains(strings.Join(extra, " "), "--pbkdf-force-iterations") {
		args = append(args, fastIter)
	}
	return mustRun(t, append(args, out)...)
}

// allocated is the number of bytes the file system holds for path.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

var hexLine = regexp.MustCompile(`^([0-9a-f]{2} )+$`)

// luks1Layout is cryptsetup luksDump of a LUKS1 image without what is
// random or measured: UUID, salts and digests.
func luks1Layout(t *testing.T, cs, img string) string {
	t.Helper()
	var keep []string
	for _, line := range strings.Split(sh(t, cs, "luksDump", img), "\n") {
		f := strings.TrimSpace(line)
		if strings.HasPrefix(f, "LUKS header information") || strings.HasPrefix(f, "UUID:") || strings.HasPrefix(f, "MK digest:") ||
			strings.HasPrefix(f, "MK salt:") || strings.HasPrefix(f, "Salt:") || hexLine.MatchString(f+" ") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// csLUKS1File makes what the README compares create with: a file of
// payload+size bytes, luksFormatted by cryptsetup with opts.
func csLUKS1File(t *testing.T, cs, path, key string, payload, size int64, opts ...string) {
	t.Helper()
	writeFile(t, path, "")
	if err := os.Truncate(path, payload+size); err != nil {
		t.Fatal(err)
	}
	sh(t, cs, append(append([]string{"luksFormat", "--type", "luks1", "--batch-mode", "--pbkdf-force-iterations", "1000", "--key-file", key}, opts...), path)...)
}

// TestCreateRawLUKS1: create makes the header cryptsetup luksFormat makes on
// a file of the same size, with the payload as a hole; cryptsetup opens its
// key slot.
func TestCreateRawLUKS1(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	const size = 64 << 20
	for _, c := range []struct {
		name string
		opts []string
	}{
		{"defaults", nil},
		{"xts-512-sha512", []string{"--cipher", "aes-xts-plain64", "--key-size", "512", "--hash", "sha512"}},
		{"cbc-plain64-128-sha1", []string{"--cipher", "aes-cbc-plain64", "--key-size", "128", "--hash", "sha1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours := filepath.Join(dir, c.name+".luks")
			fastCreate(t, key, "64M", ours, c.opts...)
			d := dumpOf(t, ours)
			payload := d.PayloadOffsetBytes
			if st, _ := os.Stat(ours); st.Size() != payload+size || st.Mode().Perm() != 0o600 {
				t.Errorf("file size %d mode %v, want %d and 0600", st.Size(), st.Mode().Perm(), payload+size)
			}
			if d.PayloadSize != size {
				t.Errorf("payload size %d, want %d", d.PayloadSize, size)
			}
			if a := allocated(t, ours); a > payload+64<<10 {
				t.Errorf("%d bytes allocated: the payload is not a hole (header area %d)", a, payload)
			}
			opts := c.opts
			if len(opts) == 0 {
				opts = []string{"--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--hash", "sha256"}
			}
			theirs := filepath.Join(dir, c.name+".cs")
			csLUKS1File(t, cs, theirs, key, payload, size, opts...)
			if a, b := luks1Layout(t, cs, ours), luks1Layout(t, cs, theirs); a != b {
				t.Errorf("luksDump differs from cryptsetup's:\n%s\nwant\n%s", a, b)
			}
			sameSize(t, ours, theirs)
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, ours)
		})
	}
}

func sameSize(t *testing.T, a, b string) {
	t.Helper()
	sa, _ := os.Stat(a)
	sb, _ := os.Stat(b)
	if sa == nil || sb == nil || sa.Size() != sb.Size() {
		t.Errorf("%s and %s differ in size", filepath.Base(a), filepath.Base(b))
	}
}

// TestCreateRawLUKS2: --type luks2 gives cryptsetup's metadata for a file
// of 16 MiB plus the size, at 4096 and 512-byte sectors.
func TestCreateRawLUKS2(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, c := range []struct {
		name string
		size int64
		opts []string
	}{
		{"defaults", 8 << 20, []string{"--pbkdf-memory", "32768", "--pbkdf-force-iterations", "4"}},
		{"essiv-512-pbkdf2", 8<<20 + 512, []string{"--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--sector-size", "512",
			"--pbkdf", "pbkdf2", "--hash", "sha512", "--pbkdf-force-iterations", "1000", "--label", "data"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ours := filepath.Join(dir, c.name+".luks2")
			fastCreate(t, key, strconv.FormatInt(c.size, 10), ours, append([]string{"--type", "luks2"}, c.opts...)...)
			theirs := csFormatLUKS2(t, cs, filepath.Join(dir, c.name+".cs"), key, 16<<20+c.size, c.opts...)
			if a, b := luks2Shape(t, cs, ours), luks2Shape(t, cs, theirs); a != b {
				t.Errorf("metadata differs from cryptsetup's:\n%s\nwant\n%s", a, b)
			}
			sameSize(t, ours, theirs)
			if a := allocated(t, ours); a > 16<<20+64<<10 {
				t.Errorf("%d bytes allocated: the payload is not a hole", a)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, ours)
			if d := dumpOf(t, ours); d.PayloadSize != c.size {
				t.Errorf("payload size %d, want %d", d.PayloadSize, c.size)
			}
		})
	}
}

// TestCreateThenWrite: data written into a created raw image through the
// library's view decrypts back with cryptimg decrypt, and cryptsetup's
// offline tools agree on the header.
func TestCreateThenWrite(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			img := filepath.Join(dir, typ+".img")
			extra := []string{"--type", typ}
			if typ == "luks2" {
				extra = append(extra, "--pbkdf", "pbkdf2")
			}
			fastCreate(t, key, "4M", img, extra...)
			plain := make([]byte, 4<<20)
			rand.Read(plain)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			e, err := image.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			k, err := e.Unlock([]byte(testPassphrase), -1)
			if err != nil {
				t.Fatal(err)
			}
			v, err := e.View(f, k, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.WriteAt(plain, 0); err != nil {
				t.Fatal(err)
			}
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			k.Clear()
			f.Close()
			out := filepath.Join(dir, typ+".out")
			mustRun(t, "decrypt", "-d", key, img, out)
			if got, _ := os.ReadFile(out); !bytes.Equal(got, plain) {
				t.Error("decrypt does not give back what was written")
			}
		})
	}
}

// TestCreateQcow2: a created qcow2+LUKS image has no data cluster, is clean
// for qemu-img check, reads as zeros through qemu's luks driver, and data
// qemu-io writes into it decrypts with cryptimg.
func TestCreateQcow2(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	qio := requireTool(t, "qemu-io")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	q := filepath.Join(dir, "vm.qcow2")
	r := fastCreate(t, key, "1G", q, "-O", "qcow2", "--json")
	var s createSummary
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("stdout is not one JSON object: %v: %q", err, r.stdout)
	}
	if s.Op != "create" || s.Format != "qcow2" || s.Size != 1<<30 || s.Output != q || s.KeySlot != 0 || s.Cipher != "aes-cbc-essiv:sha256" {
		t.Errorf("summary %+v", s)
	}
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
		Encrypted   bool  `json:"encrypted"`
	}
	if err := json.Unmarshal([]byte(sh(t, qi, "info", "--output=json", q)), &info); err != nil {
		t.Fatal(err)
	}
	if info.VirtualSize != 1<<30 || !info.Encrypted {
		t.Errorf("qemu-img info: %+v", info)
	}
	if a := allocated(t, q); a > 4<<20 {
		t.Errorf("%d bytes allocated for an empty qcow2", a)
	}
	qemuCheck(t, qi, key, q, true)
	if d := dumpOf(t, q); d.Qcow2 == nil || d.PayloadSize != 1<<30 {
		t.Errorf("dump: %+v", d)
	}

	// qemu reads it as zeros.
	small := filepath.Join(dir, "small.qcow2")
	fastCreate(t, key, "8M", small, "-O", "qcow2")
	back := filepath.Join(dir, "back.raw")
	sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts", qcowOpts(small), "-O", "raw", back)
	if b, _ := os.ReadFile(back); len(b) != 8<<20 || !bytes.Equal(b, make([]byte, 8<<20)) {
		t.Errorf("qemu-img convert gives %d bytes, not 8 MiB of zeros", len(b))
	}

	// qemu-io writes through the luks driver; cryptimg decrypts it.
	sh(t, qio, "--object", qemuSecret(key), "--image-opts", qcowOpts(small), "-c", "write -P 0xab 1M 1M")
	qemuCheck(t, qi, key, small, true)
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, "-O", "raw", small, out)
	want := make([]byte, 8<<20)
	copy(want[1<<20:2<<20], bytes.Repeat([]byte{0xab}, 1<<20))
	if got, _ := os.ReadFile(out); !bytes.Equal(got, want) {
		t.Error("decrypt does not show what qemu-io wrote")
	}
}

// TestCreateIntegrity: with --integrity every tag is written: the image
// verifies, decrypts to zeros, and cryptsetup opens its key slot.
func TestCreateIntegrity(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, c := range []struct{ name, cipher, integrity, sector string }{
		{"xts-hmac-4096", "aes-xts-plain64", "hmac-sha256", "4096"},
		{"gcm-aead-512", "aes-gcm-random", "aead", "512"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name)
			fastCreate(t, key, "8M", img, "--type", "luks2", "--pbkdf", "pbkdf2", "--cipher", c.cipher,
				"--integrity", c.integrity, "--sector-size", c.sector)
			r := mustRun(t, "verify", "-d", key, "--json", img)
			var v verifyReport
			if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || !v.OK || v.Bytes != 8<<20 {
				t.Errorf("verify: %v %+v", err, v)
			}
			out := img + ".out"
			mustRun(t, "decrypt", "-d", key, img, out)
			if b, _ := os.ReadFile(out); !bytes.Equal(b, make([]byte, 8<<20)) {
				t.Errorf("decrypt gives %d bytes, not 8 MiB of zeros", len(b))
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
		})
	}
}

// TestCreateDetached: --header makes a header file cryptsetup reads and a
// data file of exactly the size.
func TestCreateDetached(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			hdr, data := filepath.Join(dir, typ+".hdr"), filepath.Join(dir, typ+".data")
			fastCreate(t, key, "2M", data, "--header", hdr, "--type", typ, "--pbkdf", "pbkdf2")
			if st, _ := os.Stat(data); st.Size() != 2<<20 {
				t.Errorf("data file of %d bytes", st.Size())
			}
			if st, _ := os.Stat(hdr); st.Mode().Perm() != 0o600 {
				t.Errorf("header file mode %v", st.Mode().Perm())
			}
			sh(t, cs, "open", "--test-passphrase", "--header", hdr, "--key-file", key, data)
			mustRun(t, "test-key", "--header", hdr, "-d", key, data)
			// Refused again without --force, for either file.
			expectCode(t, exitFailure, "create", "-d", key, "--size", "2M", "--header", hdr, fastIter, filepath.Join(dir, typ+".new"))
			noFile(t, filepath.Join(dir, typ+".new"))
		})
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512": 512, "1K": 1024, "1k": 1024, "3M": 3 << 20, "2G": 2 << 30, "1T": 1 << 40, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "K", "abc", "-512", "1.5G", "1P", "1KB", " 1", "9223372036854775807K"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

// TestCreateRefuses: bad sizes, an existing output without --force and
// impossible combinations exit 1 with one line and leave no file.
func TestCreateRefuses(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	existing := writeFile(t, filepath.Join(dir, "existing"), "keep me")
	out := filepath.Join(dir, "out")
	for _, args := range [][]string{
		{"--size", "0"},
		{"--size", "1000"},
		{"--size", "garbage"},
		{"--size", "-4096"},
		{"--size", "1Q"},
		{},
		{"--size", "4608", "--type", "luks2", "--sector-size", "4096"},
		{"--size", "1536", "--type", "luks2", "--integrity", "hmac-sha256"},
		{"--size", "1M", "--type", "luks2", "-O", "qcow2"},
		{"--size", "1M", "-O", "vmdk"},
		{"--size", "1M", "--cipher", "serpent-xts-plain64"},
	} {
		args := append(append([]string{"create", "-d", key, fastIter}, args...), out)
		r := cryptimg(t, "", args...)
		if r.code != exitFailure {
			t.Errorf("%v: exit %d, want 1: %s", args, r.code, r.stderr)
		}
		if line := strings.TrimSuffix(r.stderr, "\n"); strings.Contains(line, "\n") || !strings.HasPrefix(line, "cryptimg: error: ") {
			t.Errorf("%v: want one error line, got %q", args, r.stderr)
		}
		noFile(t, out)
	}
	r := expectCode(t, exitFailure, "create", "-d", key, "--size", "1M", fastIter, existing)
	if !strings.Contains(r.stderr, "--force") {
		t.Errorf("existing output: %q", r.stderr)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Error("existing output was modified")
	}
	mustRun(t, "create", "-d", key, "--size", "1M", fastIter, "--force", existing)
	if d := dumpOf(t, existing); d.PayloadSize != 1<<20 {
		t.Errorf("--force: payload %d", d.PayloadSize)
	}
	// Without a key and off a terminal: refused, nothing made.
	expectCode(t, exitFailure, "create", "--size", "1M", out)
	noFile(t, out)
}

// TestCreateInterop checks the text summary and that qemu-img reads a raw
// LUKS1 image made by create.
func TestCreateInterop(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "disk.luks")
	r := fastCreate(t, key, "2M", img)
	if !strings.Contains(r.stderr, "created "+img) || r.stdout != "" {
		t.Errorf("summary: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if out, err := exec.Command(qi, "info", "--object", qemuSecret(key), "--image-opts", "driver=luks,key-secret=sec0,file.filename="+img).CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "2 MiB") {
		t.Errorf("qemu-img info: %v\n%s", err, out)
	}
}
