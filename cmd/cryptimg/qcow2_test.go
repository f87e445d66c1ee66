package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const qemuQcow2LUKSOpts = "encrypt.format=luks,encrypt.key-secret=sec0,encrypt.cipher-alg=aes-256,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha256,encrypt.iter-time=10"

// qcowOpts is an --image-opts string for an encrypted qcow2 file.
func qcowOpts(path string) string {
	return "driver=qcow2,encrypt.key-secret=sec0,file.filename=" + path
}

// qemuCheck runs qemu-img check on an encrypted qcow2 (key given) or a
// plain one, and fails on leaks or corruption.
func qemuCheck(t *testing.T, qi, key, path string, encrypted bool) {
	t.Helper()
	args := []string{"check"}
	if encrypted {
		args = append(args, "--object", qemuSecret(key), "--image-opts", qcowOpts(path))
	} else {
		args = append(args, path)
	}
	out, err := exec.Command(qi, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img check %s: %v\n%s", filepath.Base(path), err, out)
	}
}

// qemuCompare asserts that two images have the same guest content, each
// given as an --image-opts string.
func qemuCompare(t *testing.T, qi, key, a, b string) {
	t.Helper()
	out, err := exec.Command(qi, "compare", "--object", qemuSecret(key), "--image-opts", a, b).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img compare %s %s: %v\n%s", a, b, err, out)
	}
}

func rawOpts(path string) string { return "driver=raw,file.filename=" + path }

// scatteredRaw makes a raw image with data at scattered offsets, a run of
// explicit zeros and holes.
func scatteredRaw(t *testing.T, dir string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, "scattered.raw")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Truncate(size)
	rnd := make([]byte, 300<<10)
	for i := range rnd {
		rnd[i] = byte(i*7 + i>>9)
	}
	for _, off := range []int64{0, 70 << 10, 1 << 20, 5<<20 + 512, size - 300<<10} {
		if off+int64(len(rnd)) <= size {
			f.WriteAt(rnd, off)
		}
	}
	f.WriteAt(make([]byte, 1<<20), 8<<20) // allocated zeros
	return p
}

func TestQcow2EncryptFromRawAndQcow2(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	raw := scatteredRaw(t, dir, 16<<20)

	// raw -> qcow2+LUKS -> raw, byte exact; qemu agrees on the content.
	enc := filepath.Join(dir, "enc.qcow2")
	r := mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "--json", "-O", "qcow2", raw, enc)
	if !strings.Contains(r.stdout, `"format":"qcow2"`) {
		t.Errorf("summary: %s", r.stdout)
	}
	qemuCheck(t, qi, key, enc, true)
	qemuCompare(t, qi, key, qcowOpts(enc), rawOpts(raw))
	back := filepath.Join(dir, "back.raw")
	mustRun(t, "decrypt", "-d", key, "-O", "raw", enc, back)
	sameContent(t, raw, back)
	// Only clusters with non-zero data are stored: 5 runs of 300 KiB.
	st, _ := os.Stat(enc)
	if st.Size() > 6<<20 {
		t.Errorf("encrypted qcow2 is %d bytes; zero clusters were stored", st.Size())
	}

	// Plain qcow2 inputs in several shapes, compressed clusters included.
	for _, c := range []struct{ name, opts string }{
		{"v3-64k", "cluster_size=65536"},
		{"v2-4k", "compat=0.10,cluster_size=4096"},
		{"v3-2m", "cluster_size=2097152"},
		{"extl2", "extended_l2=on,cluster_size=131072"},
		{"compressed-zlib", "compression_type=zlib"},
		{"compressed-zstd", "compression_type=zstd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			plain := filepath.Join(dir, c.name+".qcow2")
			args := []string{"convert", "-f", "raw", "-O", "qcow2", "-o", c.opts}
			if strings.HasPrefix(c.name, "compressed") {
				args = append(args, "-c")
			}
			sh(t, qi, append(args, raw, plain)...)
			enc := filepath.Join(dir, c.name+"-enc.qcow2")
			mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, enc)
			qemuCheck(t, qi, key, enc, true)
			qemuCompare(t, qi, key, qcowOpts(enc), "driver=qcow2,file.filename="+plain)
			// qcow2 -> raw LUKS -> qcow2 round trip on the guest view.
			luks := filepath.Join(dir, c.name+".luks")
			mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", "-O", "raw", plain, luks)
			qemuCompare(t, qi, key, "driver=luks,key-secret=sec0,file.filename="+luks, rawOpts(raw))
			again := filepath.Join(dir, c.name+"-again.qcow2")
			mustRun(t, "decrypt", "-d", key, "-O", "qcow2", luks, again)
			qemuCheck(t, qi, key, again, false)
			qemuCompare(t, qi, key, "driver=qcow2,file.filename="+again, rawOpts(raw))
		})
	}
}

func TestQcow2DecryptQemuImages(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	qio := requireTool(t, "qemu-io")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	for _, c := range []struct{ name, opts string }{
		{"4k", "cluster_size=4096"},
		{"64k", "cluster_size=65536"},
		{"2m", "cluster_size=2097152"},
		{"v2", "compat=0.10"},
		{"extl2", "extended_l2=on"},
	} {
		t.Run(c.name, func(t *testing.T) {
			enc := filepath.Join(dir, c.name+".qcow2")
			retry(t, qi, "create", "--object", qemuSecret(key), "-f", "qcow2", "-o", qemuQcow2LUKSOpts+","+c.opts, enc, "24M")
			sh(t, qio, "--object", qemuSecret(key), "--image-opts", qcowOpts(enc),
				"-c", "write -P 0xab 0 64k", "-c", "write -P 0x11 3M 1536", "-c", "write -P 0x5a 7340544 200k",
				"-c", "write -z 12M 1M", "-c", "write -P 0x77 20M 4M", "-c", "write -z 21M 512k", "-c", "write -P 0x01 512 512")
			want := filepath.Join(dir, c.name+"-qemu.raw")
			sh(t, qi, "convert", "--object", qemuSecret(key), "--image-opts", qcowOpts(enc), "-O", "raw", want)
			got := filepath.Join(dir, c.name+".raw")
			mustRun(t, "decrypt", "-d", key, "-O", "raw", enc, got)
			sameContent(t, want, got)
			// To a plain qcow2, which qemu finds clean and identical.
			plain := filepath.Join(dir, c.name+"-plain.qcow2")
			mustRun(t, "decrypt", "-d", key, enc, plain)
			qemuCheck(t, qi, key, plain, false)
			qemuCompare(t, qi, key, "driver=qcow2,file.filename="+plain, rawOpts(want))
			var d dumpJSON
			if err := json.Unmarshal([]byte(mustRun(t, "dump", "--json", enc).stdout), &d); err != nil {
				t.Fatal(err)
			}
			if d.Format != "qcow2" || d.Qcow2 == nil || d.Qcow2.VirtualSize != 24<<20 || d.HeaderOffset != d.Qcow2.CryptOffset || d.HeaderOffset == 0 {
				t.Errorf("dump: %+v %+v", d, d.Qcow2)
			}
		})
	}
}

// A huge, nearly empty virtual disk: the work follows the data, not the
// virtual size.
func TestQcow2SparseHuge(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	qio := requireTool(t, "qemu-io")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := filepath.Join(dir, "huge.qcow2")
	sh(t, qi, "create", "-f", "qcow2", plain, "1T")
	sh(t, qio, "-c", "write -P 0x42 0 8M", "-c", "write -P 0x43 100G 8M", "-c", "write -P 0x44 1023G 4M", plain)
	enc := filepath.Join(dir, "huge-enc.qcow2")
	start := time.Now()
	mustRun(t, "encrypt", "-d", key, "--pbkdf-force-iterations", "1000", plain, enc)
	took := time.Since(start)
	st, _ := os.Stat(enc)
	if st.Size() > 40<<20 {
		t.Errorf("encrypted 1 TiB image with 20 MiB of data is %d bytes", st.Size())
	}
	t.Logf("1 TiB virtual, 20 MiB data: encrypted in %v, %d bytes", took, st.Size())
	qemuCheck(t, qi, key, enc, true)
	back := filepath.Join(dir, "huge-back.qcow2")
	mustRun(t, "decrypt", "-d", key, enc, back)
	qemuCompare(t, qi, key, "driver=qcow2,file.filename="+back, "driver=qcow2,file.filename="+plain)
}

func TestQcow2BadInput(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := filepath.Join(dir, "plain.qcow2")
	sh(t, qi, "create", "-f", "qcow2", plain, "8M")
	enc := filepath.Join(dir, "enc.qcow2")
	retry(t, qi, "create", "--object", qemuSecret(key), "-f", "qcow2", "-o", qemuQcow2LUKSOpts, enc, "8M")
	b, _ := os.ReadFile(enc)
	corrupt := filepath.Join(dir, "corrupt.qcow2")
	bad := append([]byte(nil), b...)
	copy(bad[40:48], []byte{0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}) // L1 table far beyond EOF
	os.WriteFile(corrupt, bad, 0o600)
	backing := filepath.Join(dir, "overlay.qcow2")
	sh(t, qi, "create", "-f", "qcow2", "-b", plain, "-F", "qcow2", backing)
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"decrypt plain qcow2", []string{"decrypt", "-d", key, plain, filepath.Join(dir, "o1")}, exitBadImage, "not encrypted"},
		{"corrupt l1", []string{"decrypt", "-d", key, corrupt, filepath.Join(dir, "o2")}, exitBadImage, "qcow2"},
		{"encrypt encrypted", []string{"encrypt", "-d", key, enc, filepath.Join(dir, "o3")}, exitFailure, "already encrypted"},
		{"backing file", []string{"encrypt", "-d", key, backing, filepath.Join(dir, "o4")}, exitFailure, "backing"},
		{"wrong key", []string{"decrypt", "-d", writeFile(t, filepath.Join(dir, "bad"), "nope"), enc, filepath.Join(dir, "o5")}, exitNoKey, ""},
		{"format", []string{"encrypt", "-d", key, "-O", "vmdk", plain, filepath.Join(dir, "o6")}, exitFailure, "raw or qcow2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := cryptimg(t, "", c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d: %s", r.code, c.code, r.stderr)
			}
			if !strings.Contains(strings.ToLower(r.stderr), c.msg) || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("want one line mentioning %q, got %q", c.msg, r.stderr)
			}
		})
	}
	for i := 1; i <= 6; i++ {
		noFile(t, filepath.Join(dir, fmt.Sprintf("o%d", i)))
	}
}
