package main

// The kernel oracle: the real Linux dm-crypt, booted under qemu, opens what
// cryptimg writes and writes what cryptimg must read. This file is the
// oracle of record: every cipher, key size, sector size and format cryptimg
// writes adds its cases here. Each test batches its checks into one boot
// (see vectors/kernel). "Matches" always means the sha256 of the plaintext
// is equal, end to end.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/vectors/kernel"
)

// oracle is one boot's worth of kernel checks with the host-side answers
// they must give.
type oracle struct {
	t     *testing.T
	m     *kernel.Machine
	b     *kernel.Batch
	devs  map[string]string // host path -> guest device
	keys  map[string]string // host key file -> guest path
	sums  map[string]string // check -> wanted sha256 output
	fails map[string]int    // check -> wanted exit code
	n     int
}

func newOracle(t *testing.T) *oracle {
	t.Helper()
	return &oracle{t: t, m: kernel.Require(t), b: kernel.NewBatch(), devs: map[string]string{},
		keys: map[string]string{}, sums: map[string]string{}, fails: map[string]int{}}
}

// disk attaches an image (once) and returns its guest device.
func (o *oracle) disk(path string) string {
	if d, ok := o.devs[path]; ok {
		return d
	}
	d := o.b.Disk(path)
	o.devs[path] = d
	return d
}

// key copies a key file into the guest (once) and returns its guest path.
func (o *oracle) key(path string) string {
	if k, ok := o.keys[path]; ok {
		return k
	}
	b, err := os.ReadFile(path)
	if err != nil {
		o.t.Fatal(err)
	}
	k := o.b.File(fmt.Sprintf("key%d", len(o.keys)), b)
	o.keys[path] = k
	return k
}

func (o *oracle) mapper() string { o.n++; return "c" + strconv.Itoa(o.n) }

// reads checks that dm-crypt opens img read-only with key and that the
// plaintext's sha256 is want. extra are cryptsetup open options.
func (o *oracle) reads(name, img, key string, want [32]byte, extra ...string) {
	o.readsDev(name, o.disk(img), key, want, extra...)
}

// readsDev is reads for a guest device, such as a partition.
func (o *oracle) readsDev(name, dev, key string, want [32]byte, extra ...string) {
	m := o.mapper()
	o.b.Check(name, fmt.Sprintf("unlock %s %s %s --readonly %s\nsha /dev/mapper/%s\nlock %s",
		dev, m, o.key(key), strings.Join(extra, " "), m, m))
	o.sums[name] = hex.EncodeToString(want[:])
}

// refuses checks that cryptsetup will not open img with key: exit 2, no
// key slot matched.
func (o *oracle) refuses(name, img, key string) {
	m := o.mapper()
	o.b.Check(name, fmt.Sprintf("unlock %s %s %s --readonly", o.disk(img), m, o.key(key)))
	o.fails[name] = 2
}

// raw checks that the sha256 of a whole device (say, a partition) is want.
func (o *oracle) raw(name, dev string, want [32]byte) {
	o.b.Check(name, "sha "+dev)
	o.sums[name] = hex.EncodeToString(want[:])
}

// check adds a free-form check, which must exit 0 (run asserts it); its
// output is the test's to inspect.
func (o *oracle) check(name, script string) {
	o.b.Check(name, script)
	o.fails[name] = 0
}

// run boots and checks every expectation; it returns the results for
// free-form checks.
func (o *oracle) run() kernel.Results {
	o.t.Helper()
	r := o.m.RunBatch(o.t, o.b)
	for name, want := range o.sums {
		if got := r.Want(o.t, name); got != want {
			o.t.Errorf("kernel check %s: plaintext sha256 %s, want %s", name, got, want)
		}
	}
	for name, code := range o.fails {
		r.WantFail(o.t, name, code)
	}
	return r
}

func shaOf(b []byte) [32]byte { return sha256.Sum256(b) }

// TestKernelReadsAndWrites: dm-crypt reads cryptimg encrypt output for every
// key size and hash and reports the cipher cryptimg wrote; dm-crypt writes
// into cryptimg images and cryptimg decrypts the same bytes; one wrong byte
// of key material makes the kernel refuse the key.
func TestKernelReadsAndWrites(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "kernel oracle passphrase")
	for _, bits := range []string{"128", "192", "256"} {
		for _, hash := range []string{"sha1", "sha256", "sha512"} {
			name := "read-" + bits + "-" + hash
			plain := randomFile(t, dir, name+".raw", 3<<20+4096)
			enc := filepath.Join(dir, name+".luks")
			fastEncrypt(t, key, plain, enc, "--key-size", bits, "--hash", hash)
			o.reads(name, enc, key, fileSHA(t, plain))
			m := o.mapper()
			o.check("status-"+bits+"-"+hash, fmt.Sprintf("unlock %s %s %s --readonly\ncryptsetup status %s\nlock %s",
				o.disk(enc), m, o.key(key), m, m))
		}
	}

	// The guest copies a second disk's plaintext into each opened image.
	src := randomFile(t, dir, "source.raw", 4<<20)
	var writes []string
	for _, bits := range []string{"128", "192", "256"} {
		zero := filepath.Join(dir, "zero-"+bits+".raw")
		os.WriteFile(zero, make([]byte, 4<<20), 0o600)
		enc := filepath.Join(dir, "write-"+bits+".luks")
		fastEncrypt(t, key, zero, enc, "--key-size", bits)
		m := o.mapper()
		o.check("write-"+bits, fmt.Sprintf("unlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 conv=fsync 2>/dev/null\nlock %s",
			o.disk(enc), m, o.key(key), o.disk(src), m, m))
		writes = append(writes, enc)
	}

	// Control: one byte of slot 0's key material (sector 8 on, cryptsetup's
	// LUKS1 layout) changed.
	good := filepath.Join(dir, "read-256-sha256.luks")
	bad := filepath.Join(dir, "badslot.luks")
	copyImage(t, good, bad)
	flipByte(t, bad, 8*512+100)
	o.refuses("bad-key-material", bad, key)

	r := o.run()
	for _, bits := range []string{"128", "192", "256"} {
		for _, hash := range []string{"sha1", "sha256", "sha512"} {
			st := r.Want(t, "status-"+bits+"-"+hash)
			if !strings.Contains(st, "cipher:  aes-cbc-essiv:sha256") || !strings.Contains(st, "keysize: "+bits+" bits") {
				t.Errorf("cryptsetup status of the %s-bit %s image:\n%s", bits, hash, st)
			}
		}
	}
	for i, enc := range writes {
		r.Want(t, "write-"+[]string{"128", "192", "256"}[i])
		out := enc + ".out"
		mustRun(t, "decrypt", "-d", key, enc, out)
		sameContent(t, src, out)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, off)
	b[0] ^= 0x01
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestKernelKeyCommands: after add-key, change-key, remove-key, kill-slot
// and header-restore, the kernel opens each image with exactly the keys that
// should work, and reads the right plaintext with them.
func TestKernelKeyCommands(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	var keys []string
	for i := range 4 {
		keys = append(keys, writeFile(t, filepath.Join(dir, "key"+strconv.Itoa(i)), "kernel key "+strconv.Itoa(i)))
	}
	plain := randomFile(t, dir, "plain.raw", 2<<20)
	want := fileSHA(t, plain)
	base := filepath.Join(dir, "base.luks")
	fastEncrypt(t, keys[0], plain, base)
	img := func(name string) string {
		p := filepath.Join(dir, name+".luks")
		copyImage(t, base, p)
		return p
	}

	added := img("add-key")
	mustRun(t, "add-key", "-d", keys[0], "--new-key-file", keys[1], fastIter, added)

	changed := img("change-key")
	mustRun(t, "change-key", "-d", keys[0], "--new-key-file", keys[2], fastIter, changed)

	removed := img("remove-key")
	mustRun(t, "add-key", "-d", keys[0], "--new-key-file", keys[1], fastIter, removed)
	mustRun(t, "remove-key", "-q", "-d", keys[1], removed)

	killed := img("kill-slot")
	mustRun(t, "add-key", "-d", keys[0], "--new-key-file", keys[3], fastIter, "-S", "5", killed)
	mustRun(t, "kill-slot", "-q", "-d", keys[3], killed, "0")

	// Back up with key0, move to key3 only, then restore: key0 again.
	restored := img("header-restore")
	backup := filepath.Join(dir, "backup.hdr")
	mustRun(t, "header-backup", restored, backup)
	mustRun(t, "change-key", "-d", keys[0], "--new-key-file", keys[3], fastIter, restored)
	mustRun(t, "header-restore", "-q", restored, backup)

	opens := map[string][]int{added: {0, 1}, changed: {2}, removed: {0}, killed: {3}, restored: {0}}
	names := map[string]string{added: "add-key", changed: "change-key", removed: "remove-key", killed: "kill-slot", restored: "header-restore"}
	for path, good := range opens {
		for k := range keys {
			name := fmt.Sprintf("%s/key%d", names[path], k)
			if contains(good, k) {
				o.reads(name, path, keys[k], want)
			} else {
				o.refuses(name, path, keys[k])
			}
		}
	}
	o.run()
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestKernelReencryptAndInPlace: after reencrypt, encrypt --in-place and
// decrypt --in-place, each run once straight through, once interrupted
// in-process and resumed, and once killed with SIGKILL and run again, the
// kernel reads the right plaintext (or, after decrypt, sees it on the raw
// disk and no LUKS header).
func TestKernelReencryptAndInPlace(t *testing.T) {
	o := newOracle(t)
	bin := binary(t)
	dir := fastDir(t)
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 24<<20)
	want := fileSHA(t, plain)
	luks := filepath.Join(dir, "plain.luks")
	fastEncrypt(t, key, plain, luks)
	common := []string{"--key-file", key, "--hotzone-size", "1048576", "--progress", "none", "-q"}

	type op struct {
		name     string
		template string
		args     []string
		kind     image.Op
	}
	ops := []op{
		{"reencrypt", luks, []string{"reencrypt", fastIter}, image.OpReencrypt},
		{"encrypt-in-place", plain, []string{"encrypt", "--in-place", fastIter}, image.OpEncrypt},
		{"decrypt-in-place", luks, []string{"decrypt", "--in-place"}, image.OpDecrypt},
	}
	for _, c := range ops {
		args := append(append([]string{}, c.args...), common...)
		// Straight through.
		straight := filepath.Join(dir, c.name+".img")
		copyImage(t, c.template, straight)
		runBin(t, bin, append(args, straight)...)
		// Interrupted after its first window, then --resume.
		resumed := filepath.Join(dir, c.name+"-resumed.img")
		copyImage(t, c.template, resumed)
		interruptOp(t, c.kind, resumed, testPassphrase)
		runBin(t, bin, append(append([]string{args[0], "--resume"}, args[1:]...), resumed)...)
		// SIGKILLed mid-run once the journal exists, then run again.
		killed := filepath.Join(dir, c.name+"-killed.img")
		copyImage(t, c.template, killed)
		if killMidway(t, bin, append(args, killed)...) {
			runBin(t, bin, append(args, killed)...)
		} else {
			// Running it again would be a second operation (a second
			// decrypt of a plain image fails): check what it left.
			t.Logf("%s: finished before the kill; checking the finished image", c.name)
		}

		for _, p := range []string{straight, resumed, killed} {
			if _, err := os.Stat(p + image.JournalSuffix); err == nil {
				t.Fatalf("%s: journal left behind", filepath.Base(p))
			}
			name := strings.TrimSuffix(filepath.Base(p), ".img")
			if c.kind == image.OpDecrypt {
				o.raw(name, o.disk(p), want)
				o.check(name+"/not-luks", "! cryptsetup isLuks "+o.disk(p))
			} else {
				o.reads(name, p, key, want)
			}
		}
	}
	o.run()
}

func runBin(t *testing.T, bin string, args ...string) {
	t.Helper()
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("cryptimg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// killMidway starts cryptimg and sends SIGKILL once its journal exists
// (the operation has begun); it reports whether the kill came first.
func killMidway(t *testing.T, bin string, args ...string) bool {
	t.Helper()
	img := args[len(args)-1]
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		default:
		}
		if _, err := os.Stat(img + image.JournalSuffix); err == nil {
			// At once: a 24 MiB run on a fast machine can finish within
			// 20 ms of its journal appearing, and then nothing was killed.
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			_, err := os.Stat(img + image.JournalSuffix)
			return err == nil
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Kill()
	<-done
	t.Fatal("no journal appeared within 30s")
	return false
}

// TestKernelPartition: after encrypt --partition 2 of a GPT disk, LUKS1 and
// LUKS2, the kernel scans the table, opens /dev/vda2 and reads partition 2's
// old contents; partitions 1 and 3 are the old bytes. In the same boot,
// encrypt --verity's image and tree open stacked verity then crypt
// (kernelEncryptVerityChecks).
func TestKernelPartition(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	orig := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "partition passphrase")
	enc := filepath.Join(dir, "enc.img")
	mustRun(t, "encrypt", "-d", key, fastIter, "--partition", "2", orig, enc)
	before := gptOf(t, orig)
	disk, _ := os.ReadFile(orig)
	dev := o.disk(enc)
	o.raw("partition-1", dev+"1", shaOf(bytesOf(t, disk, before.Partitions[0])))
	o.readsDev("partition-2", dev+"2", key, shaOf(bytesOf(t, disk, before.Partitions[1])))
	o.raw("partition-3", dev+"3", shaOf(bytesOf(t, disk, before.Partitions[2])))
	o.check("partition-2-is-luks", "cryptsetup isLuks "+dev+"2")
	// The same with LUKS2 (4096-byte sectors, a 16 MiB header).
	enc2 := filepath.Join(dir, "enc2.img")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--pbkdf", "pbkdf2", fastIter, "--partition", "2", orig, enc2)
	dev2 := o.disk(enc2)
	o.raw("luks2-partition-1", dev2+"1", shaOf(bytesOf(t, disk, before.Partitions[0])))
	o.readsDev("luks2-partition-2", dev2+"2", key, shaOf(bytesOf(t, disk, before.Partitions[1])))
	o.raw("luks2-partition-3", dev2+"3", shaOf(bytesOf(t, disk, before.Partitions[2])))
	o.check("luks2-partition-2-is-luks2", "cryptsetup isLuks --type luks2 "+dev2+"2")
	kernelEncryptVerityChecks(t, o, t.TempDir())
	o.run()
}

// TestKernelReadsFUSEWrites: data written through cryptimg open (the FUSE
// view on the host) is read by the kernel from the image file.
func TestKernelReadsFUSEWrites(t *testing.T) {
	requireFUSE(t)
	o := newOracle(t)
	fx := newOpenFixture(t, 8<<20)
	fx.openBackground(t)
	want := make([]byte, fx.size)
	f, err := os.OpenFile(filepath.Join(fx.mnt, "disk.raw"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Aligned and unaligned writes, one across many sectors.
	for _, w := range []struct{ off, n int }{{0, 4096}, {1 << 20, 3<<20 + 77}, {5<<20 + 311, 1000}, {8<<20 - 512, 512}} {
		b := make([]byte, w.n)
		rand.Read(b)
		if _, err := f.WriteAt(b, int64(w.off)); err != nil {
			t.Fatal(err)
		}
		copy(want[w.off:], b)
	}
	f.Close()
	runBin(t, binary(t), "close", fx.mnt)
	o.reads("fuse-written", fx.img, fx.key, shaOf(want))
	o.run()
}

// TestKernelCiphers: for every cipher and key size cryptimg writes, dm-crypt
// reads cryptimg's image and reports that cipher, then writes new plaintext
// into it that cryptimg decrypts; a reencrypt --cipher from essiv to xts
// opens in the kernel with the new cipher.
func TestKernelCiphers(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "cipher oracle passphrase")
	src := randomFile(t, dir, "source.raw", 2<<20)
	var written []string
	for _, c := range cipherCases {
		name := strings.ReplaceAll(c.spec, ":", "_") + "-" + strconv.Itoa(c.bits)
		plain := randomFile(t, dir, name+".raw", 2<<20)
		enc := filepath.Join(dir, name+".luks")
		fastEncrypt(t, key, plain, enc, "--cipher", c.spec, "--key-size", strconv.Itoa(c.bits))
		o.reads("read/"+name, enc, key, fileSHA(t, plain))
		m := o.mapper()
		o.check("status/"+name, fmt.Sprintf("unlock %s %s %s\ncryptsetup status %s\ndd if=%s of=/dev/mapper/%s bs=65536 conv=fsync 2>/dev/null\nlock %s",
			o.disk(enc), m, o.key(key), m, o.disk(src), m, m))
		written = append(written, enc)
	}
	plain := randomFile(t, dir, "reenc.raw", 2<<20)
	re := filepath.Join(dir, "reenc.luks")
	fastEncrypt(t, key, plain, re)
	mustRun(t, "reencrypt", "-d", key, "--cipher", "aes-xts-plain64", fastIter, "-q", re)
	if d := dumpOf(t, re); d.Cipher != "aes-xts-plain64" || d.KeyBits != 512 {
		t.Fatalf("after reencrypt --cipher: %s %d bits", d.Cipher, d.KeyBits)
	}
	o.reads("reencrypt-to-xts", re, key, fileSHA(t, plain))

	r := o.run()
	for i, c := range cipherCases {
		name := strings.ReplaceAll(c.spec, ":", "_") + "-" + strconv.Itoa(c.bits)
		st := r.Want(t, "status/"+name)
		if !strings.Contains(st, "cipher:  "+c.spec) || !strings.Contains(st, fmt.Sprintf("keysize: %d bits", c.bits)) {
			t.Errorf("cryptsetup status of %s:\n%s", name, st)
		}
		out := written[i] + ".out"
		mustRun(t, "decrypt", "-d", key, written[i], out)
		sameContent(t, src, out)
	}
}
