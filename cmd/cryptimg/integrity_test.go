package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cryptimg/cryptimg/image/integrity"
)

// integrityCase is one authenticated mode cryptimg writes.
type integrityCase struct {
	name string
	args []string
	tag  int // bytes per sector's tag
	ss   int // sector size
	key  int // volume key bits
}

var integrityCases = []integrityCase{
	{"essiv-hmac-512", []string{"--cipher", "aes-cbc-essiv:sha256", "--integrity", "hmac-sha256", "--sector-size", "512"}, 32, 512, 512},
	{"essiv-hmac-4096", []string{"--cipher", "aes-cbc-essiv:sha256", "--key-size", "128", "--integrity", "hmac-sha256"}, 32, 4096, 384},
	{"xts-hmac-4096", []string{"--cipher", "aes-xts-plain64", "--integrity", "hmac-sha256"}, 32, 4096, 768},
	{"xts-hmac-512-256", []string{"--cipher", "aes-xts-plain64", "--key-size", "256", "--integrity", "hmac-sha256", "--sector-size", "512"}, 32, 512, 512},
	{"gcm-4096", []string{"--cipher", "aes-gcm-random", "--integrity", "aead"}, 28, 4096, 256},
	{"gcm-512", []string{"--cipher", "aes-gcm-random", "--integrity", "aead", "--sector-size", "512"}, 28, 512, 256},
}

// integrityImage encrypts plain with an authenticated mode at the lowest
// KDF cost.
func integrityImage(t *testing.T, key, plain, out string, args ...string) {
	t.Helper()
	fastEncrypt(t, key, plain, out, append([]string{"--type", "luks2", "--pbkdf", "pbkdf2"}, args...)...)
}

// geometryOf reads the integrity layout of a cryptimg-made image (segment
// at 16 MiB).
func geometryOf(t *testing.T, img string) *integrity.Geometry {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	g, _, err := integrity.Read(f, 32768, uint64(st.Size()/512))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestIntegrityRoundTrip: every authenticated mode encrypts, verifies and
// decrypts back to the input; cryptsetup reads the header as an integrity
// header with the key sizes cryptsetup itself would choose, its keyslot
// opens, and cryptimg's dump says what luksDump says of the segment.
func TestIntegrityRoundTrip(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 5<<20)
	for _, c := range integrityCases {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".luks")
			integrityImage(t, key, plain, img, c.args...)
			g := geometryOf(t, img)
			if g.TagSize() != c.tag || g.SectorSize() != c.ss || g.DataSectors() != 5<<20/512 {
				t.Fatalf("geometry: tag %d, sector %d, %d data sectors", g.TagSize(), g.SectorSize(), g.DataSectors())
			}
			r := mustRun(t, "verify", "--json", "-d", key, img)
			var rep verifyReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatalf("verify --json: %v\n%s", err, r.stdout)
			}
			if !rep.OK || rep.Sectors != 5<<20/512 || rep.Corrupt != nil || rep.KeyBits != c.key {
				t.Fatalf("verify report %+v", rep)
			}
			out := filepath.Join(dir, c.name+".out")
			mustRun(t, "decrypt", "-d", key, img, out)
			sameContent(t, plain, out)

			dump := sh(t, cs, "luksDump", img)
			mode := strings.Fields(strings.Join(c.args, " "))
			want := map[bool]string{true: "integrity: aead", false: "integrity: hmac(sha256)"}[mode[3] == "aead"]
			if !strings.Contains(dump, want) || !strings.Contains(dump, fmt.Sprintf("Key:        %d bits", c.key)) {
				t.Fatalf("luksDump lacks %q or the %d-bit key:\n%s", want, c.key, dump)
			}
			ours := mustRun(t, "dump", img).stdout
			seg := func(s string) string {
				i := strings.Index(s, "Data segments:")
				j := strings.Index(s, "Keyslots:")
				if i < 0 || j < i {
					t.Fatalf("no segment section in:\n%s", s)
				}
				return s[i:j]
			}
			if seg(ours) != seg(dump) {
				t.Fatalf("dump segments:\n%s\nluksDump:\n%s", seg(ours), seg(dump))
			}
			// The keyslot area uses cryptsetup's keyslot cipher for an
			// authenticated segment, aes-xts-plain64 with 512 bits.
			if !strings.Contains(dump, "Cipher:     aes-xts-plain64") || !strings.Contains(dump, "Cipher key: 512 bits") {
				t.Fatalf("keyslot cipher:\n%s", dump)
			}
			sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
		})
	}
}

// TestIntegrityBenchmarkedKDF: the README's --integrity example (the
// default aes-xts-plain64 with hmac(sha256): a 96-byte volume key, over
// the 64 bytes LUKS1 allows) with its KDF costs benchmarked rather than
// forced, through encrypt and create; the digest's benchmark once refused
// the key size. Both verify, and cryptsetup opens both with a 768-bit key.
func TestIntegrityBenchmarkedKDF(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	enc, made := filepath.Join(dir, "int.luks"), filepath.Join(dir, "made.luks")
	cost := []string{"--pbkdf", "pbkdf2", "--iter-time", "1"} // the README's argon2 would take 1 GiB
	mustRun(t, append([]string{"encrypt", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", plain, enc}, cost...)...)
	mustRun(t, append([]string{"create", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", "--size", "1M", made}, cost...)...)
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "-d", key, enc, out)
	sameContent(t, plain, out)
	mustRun(t, "verify", "-d", key, made)
	cs := requireTool(t, "cryptsetup")
	for _, img := range []string{enc, made} {
		if dump := sh(t, cs, "luksDump", img); !strings.Contains(dump, "Key:        768 bits") ||
			!strings.Contains(dump, "integrity: hmac(sha256)") {
			t.Fatalf("luksDump of %s:\n%s", img, dump)
		}
		sh(t, cs, "open", "--test-passphrase", "--key-file", key, img)
	}
}

// TestIntegrityOpenBackground: open --background mounts an authenticated
// image with the default xts and hmac(sha256) key, 96 bytes, which the
// background child once read through a 64-byte limit and so refused as not
// matching the header.
func TestIntegrityOpenBackground(t *testing.T) {
	requireFUSE(t)
	fx := newOpenFixture(t, 4<<20)
	plain := randomFile(t, fx.dir, "random.raw", 4<<20)
	os.Remove(fx.img)
	integrityImage(t, fx.key, plain, fx.img, integrityCases[2].args...)
	fx.openBackground(t)
	if !bytes.Equal(mustRead(t, filepath.Join(fx.mnt, "disk.raw")), mustRead(t, plain)) {
		t.Fatal("the mounted plaintext differs")
	}
	runBin(t, binary(t), "close", fx.mnt)
}

// tamperFixture is the directory, key file and 40 MiB plaintext (three
// areas at 512-byte sectors) of the tamper tests, and the plaintext's bytes.
func tamperFixture(t *testing.T) (dir, key, plain string, pb []byte) {
	dir = t.TempDir()
	key = writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain = randomFile(t, dir, "plain.raw", 40<<20)
	pb, _ = os.ReadFile(plain)
	return dir, key, plain, pb
}

// tamperCases are the modes the tamper tests corrupt: essiv at 512-byte
// sectors, xts and gcm at 4096.
func tamperCases() []integrityCase {
	return []integrityCase{integrityCases[0], integrityCases[2], integrityCases[4]}
}

// TestIntegrityTamper: one flipped byte in a sector's data and one in
// another's tag; verify names exactly those sectors, decrypt refuses with
// the first and leaves no output, and --allow-corrupt writes the rest.
func TestIntegrityTamper(t *testing.T) {
	dir, key, plain, pb := tamperFixture(t)
	for _, c := range tamperCases() {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".luks")
			integrityImage(t, key, plain, img, c.args...)
			g := geometryOf(t, img)
			spb := uint64(c.ss / 512)
			dataSector := uint64(70000) / spb * spb // in the third area at 512 bytes
			tagSector := uint64(24) / spb * spb
			flipByte(t, img, g.DataOffset(dataSector)+100)
			flipByte(t, img, g.TagOffset(tagSector)+int64(c.tag)-1) // the last byte: for gcm, the IV
			want := []uint64{tagSector, dataSector}

			r := cryptimg(t, "", "verify", "--json", "-d", key, img)
			if r.code != 4 {
				t.Fatalf("verify of a tampered image: exit %d, want 4\n%s", r.code, r.stderr)
			}
			var rep verifyReport
			if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.OK || rep.Corrupt == nil || rep.Corrupt.Count != 2 || fmt.Sprint(rep.Corrupt.Sectors) != fmt.Sprint(want) {
				t.Fatalf("verify report %+v, want sectors %v", rep.Corrupt, want)
			}
			// The report is the one JSON object of the failure: it carries
			// the error and the exit code, and no error object follows it.
			if rep.ExitCode != 4 || !strings.Contains(rep.Error, "2 sectors fail the integrity check") {
				t.Fatalf("verify report: error %q, exit_code %d; want the failure and 4", rep.Error, rep.ExitCode)
			}
			// Without --json: one line that lists both, and points on to
			// decrypt rather than back to verify.
			r = cryptimg(t, "", "verify", "-d", key, img)
			line := fmt.Sprintf("2 sectors fail the integrity check: sectors %d, %d (decrypt --allow-corrupt", want[0], want[1])
			if r.code != 4 || !strings.Contains(r.stderr, line) || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("verify of a tampered image: exit %d, want 4 and %q\n%s", r.code, line, r.stderr)
			}

			out := filepath.Join(dir, c.name+".out")
			r = cryptimg(t, "", "decrypt", "-d", key, img, out)
			if r.code != 4 || !strings.Contains(r.stderr, fmt.Sprintf("%s: integrity check failed at sector %d ", img, tagSector)) || strings.Count(r.stderr, "\n") > 2 {
				t.Fatalf("decrypt of a tampered image: exit %d\n%s", r.code, r.stderr)
			}
			noFile(t, out)

			r = cryptimg(t, "", "decrypt", "--allow-corrupt", "--json", "-d", key, img, out)
			warn := fmt.Sprintf("warning: 2 sectors fail the integrity check in %s, written as zeros to %s: sectors %d, %d\n", img, out, want[0], want[1])
			if r.code != 0 || !strings.Contains(r.stderr, warn) {
				t.Fatalf("decrypt --allow-corrupt: exit %d, want 0 and %q\n%s", r.code, warn, r.stderr)
			}
			got, _ := os.ReadFile(out)
			exp := bytes.Clone(pb)
			for _, s := range want {
				clear(exp[s*512 : (s+spb)*512])
			}
			if !bytes.Equal(got, exp) {
				t.Fatalf("decrypt --allow-corrupt: the output is not the plaintext with the bad sectors zeroed (first difference at %d)", firstDiff(got, exp))
			}
			var s summary
			json.Unmarshal([]byte(r.stdout), &s)
			if s.Corrupt == nil || fmt.Sprint(s.Corrupt.Sectors) != fmt.Sprint(want) {
				t.Fatalf("decrypt --allow-corrupt summary: %+v", s.Corrupt)
			}
		})
	}
}

// TestIntegrityRefusals: what does not fit an authenticated image is
// refused with one line and nothing written.
func TestIntegrityRefusals(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	odd := randomFile(t, dir, "odd.raw", 1<<20+512)
	img := filepath.Join(dir, "ok.luks")
	integrityImage(t, key, plain, img, integrityCases[2].args...)
	luks1 := filepath.Join(dir, "luks1.luks")
	fastEncrypt(t, key, plain, luks1)
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"luks1", []string{"encrypt", "-d", key, "--integrity", "hmac-sha256", plain, filepath.Join(dir, "x")}, 1, "need --type luks2"},
		{"unknown", []string{"encrypt", "-d", key, "--type", "luks2", "--integrity", "poly1305", plain, filepath.Join(dir, "x")}, 1, "unsupported --integrity"},
		{"gcm-hmac", []string{"encrypt", "-d", key, "--type", "luks2", "--cipher", "aes-gcm-random", "--integrity", "hmac-sha256", plain, filepath.Join(dir, "x")}, 1, "unsupported --cipher"},
		{"keysize", []string{"encrypt", "-d", key, "--type", "luks2", "--cipher", "aes-xts-plain64", "--key-size", "384", "--integrity", "hmac-sha256", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", plain, filepath.Join(dir, "x")}, 0, ""},
		{"keysize-bad", []string{"encrypt", "-d", key, "--type", "luks2", "--cipher", "aes-xts-plain64", "--key-size", "128", "--integrity", "hmac-sha256", plain, filepath.Join(dir, "y")}, 1, "unsupported --key-size"},
		{"unaligned", []string{"encrypt", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", odd, filepath.Join(dir, "z")}, 1, "4096-byte blocks"},
		{"qcow2", []string{"encrypt", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", "-O", "qcow2", plain, filepath.Join(dir, "q")}, 1, "qcow2"},
		{"no-journal-alone", []string{"encrypt", "-d", key, "--type", "luks2", "--integrity-no-journal", plain, filepath.Join(dir, "n")}, 1, "needs --integrity"},
		{"verify-plain-luks", []string{"verify", "-d", key, luks1}, 1, "no integrity protection"},
		{"reencrypt-tag-size", []string{"reencrypt", "--batch-mode", "-d", key, "--cipher", "aes-gcm-random", img}, 1, "supported with integrity"},
		{"decrypt-in-place", []string{"decrypt", "--in-place", "-d", key, img}, 1, "integrity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := fileSHA(t, img)
			r := cryptimg(t, "", c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.msg) {
				t.Fatalf("exit %d, want %d with %q:\n%s", r.code, c.code, c.msg, r.stderr)
			}
			if fileSHA(t, img) != before {
				t.Fatal("the image changed")
			}
		})
	}
	noFile(t, filepath.Join(dir, "z"))
	noFile(t, filepath.Join(dir, "q"))
}

// TestIntegrityKeyCommands: key slots come and go on an authenticated
// image as on any LUKS2 one; cryptsetup opens the new key, the data and
// tags stay as they were.
func TestIntegrityKeyCommands(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second passphrase")
	plain := randomFile(t, dir, "plain.raw", 2<<20)
	img := filepath.Join(dir, "img.luks")
	integrityImage(t, key, plain, img, integrityCases[0].args...)
	g := geometryOf(t, img)
	payload := func() [32]byte {
		b, _ := os.ReadFile(img)
		return shaOf(b[16<<20 : g.End()])
	}
	before := payload()
	mustRun(t, "add-key", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "-d", key, "--new-key-file", key2, img)
	sh(t, cs, "open", "--test-passphrase", "--key-file", key2, img)
	mustRun(t, "remove-key", "--batch-mode", "-d", key, img)
	if err := exec.Command(cs, "open", "--test-passphrase", "--key-file", key, img).Run(); err == nil {
		t.Fatal("cryptsetup still opens the removed key")
	}
	if payload() != before {
		t.Fatal("the key commands changed the integrity device")
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key2, img, out)
	sameContent(t, plain, out)
	backup := filepath.Join(dir, "hdr.bak")
	mustRun(t, "header-backup", img, backup)
	sh(t, cs, "open", "--test-passphrase", "--header", backup, "--key-file", key2, img)
}

// TestIntegrityView: the plaintext view of an authenticated image (what
// open, ls and cat read) returns the plaintext, fails a tampered sector
// with EIO and nothing else, and writes with tags that verify.
func TestIntegrityView(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 20<<20)
	pb, _ := os.ReadFile(plain)
	img := filepath.Join(dir, "img.luks")
	integrityImage(t, key, plain, img, integrityCases[1].args...)

	f, e, k := unlockedImage(t, img, "integrity passphrase", os.O_RDWR)
	v, err := e.View(f, k, false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Size() != int64(len(pb)) {
		t.Fatalf("view size %d", v.Size())
	}
	// Reads across the area boundary at 16 MiB, unaligned.
	buf := make([]byte, 3<<20+1234)
	if _, err := v.ReadAt(buf, 15<<20+77); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, pb[15<<20+77:][:len(buf)]) {
		t.Fatalf("view read differs from the plaintext at %d", firstDiff(buf, pb[15<<20+77:]))
	}
	// A write across the boundary, then the whole image verifies.
	patch := bytes.Repeat([]byte("cryptimg"), 100000)
	if _, err := v.WriteAt(patch, 16<<20-4000); err != nil {
		t.Fatal(err)
	}
	copy(pb[16<<20-4000:], patch)
	if err := v.Sync(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "verify", "-d", key, img)
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "-d", key, img, out)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, pb) {
		t.Fatal("decrypt after the view's write differs")
	}
	// Tamper with the block at 8 MiB: only reads touching it fail.
	g := geometryOf(t, img)
	flipByte(t, img, g.DataOffset(8<<20/512)+5)
	if _, err := v.ReadAt(buf[:4096], 8<<20); !isEIO(err) {
		t.Fatalf("read of the tampered block: %v, want EIO", err)
	}
	if _, err := v.ReadAt(buf[:100], 8<<20+4000); !isEIO(err) {
		t.Fatalf("read inside the tampered block: %v, want EIO", err)
	}
	if _, err := v.ReadAt(buf[:4096], 8<<20+4096); err != nil {
		t.Fatalf("read of the next block: %v", err)
	}
	if _, err := v.ReadAt(buf[:4096], 8<<20-4096); err != nil {
		t.Fatalf("read of the block before: %v", err)
	}
}

func isEIO(err error) bool { return errors.Is(err, syscall.EIO) }

// firstDiff is the first offset where a and b differ, or the shorter length.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestIntegrityReencrypt: reencrypt gives an authenticated image a new key
// (and, with the same tag size, a new cipher) and rewrites every tag; the
// data verifies and decrypts as before, cryptsetup opens the kept key.
func TestIntegrityReencrypt(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 18<<20)
	for _, c := range []struct {
		name string
		from []string
		to   []string
		want string
	}{
		{"essiv-to-xts-512", integrityCases[0].args, []string{"--cipher", "aes-xts-plain64", "--key-size", "256"}, "aes-xts-plain64"},
		{"gcm-new-key", integrityCases[4].args, nil, "aes-gcm-random"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".luks")
			integrityImage(t, key, plain, img, c.from...)
			before := sh(t, cs, "luksDump", "--dump-volume-key", "--batch-mode", "--key-file", key, img)
			args := append([]string{"reencrypt", "--batch-mode", "-d", key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--hotzone-size", "1048576"}, c.to...)
			mustRun(t, append(args, img)...)
			after := sh(t, cs, "luksDump", "--dump-volume-key", "--batch-mode", "--key-file", key, img)
			vkOf := func(dump string) string {
				_, rest, _ := strings.Cut(dump, "MK dump:")
				return rest
			}
			if vkOf(before) == "" || vkOf(before) == vkOf(after) || !strings.Contains(sh(t, cs, "luksDump", img), "cipher: "+c.want) {
				t.Fatalf("volume key unchanged or cipher not %s:\n%s", c.want, after)
			}
			mustRun(t, "verify", "-d", key, img)
			out := filepath.Join(dir, c.name+".out")
			mustRun(t, "decrypt", "-d", key, img, out)
			sameContent(t, plain, out)
		})
	}
}

// TestIntegrityLsCat: ls and cat read the filesystems of an authenticated
// disk image; a file whose sector was tampered with fails with an I/O
// error naming the sector (exit 4), and the other partition still reads.
func TestIntegrityLsCat(t *testing.T) {
	dir := t.TempDir()
	plain := gptDisk(t, dir)
	key := writeFile(t, filepath.Join(dir, "key"), "ls passphrase")
	img := filepath.Join(dir, "disk.luks")
	integrityImage(t, key, plain, img, integrityCases[1].args...)
	r := mustRun(t, "ls", "-d", key, img, "2:home/user")
	if !strings.Contains(r.stdout, "notes.txt") {
		t.Fatalf("ls 2:home/user:\n%s", r.stdout)
	}
	want := testDisk.rootFiles["home/user/notes.txt"]
	if r := mustRun(t, "cat", "-d", key, img, "2:home/user/notes.txt"); r.stdout != want {
		t.Fatalf("cat: %q", r.stdout)
	}
	pb, _ := os.ReadFile(plain)
	at := bytes.Index(pb, []byte(want))
	if at < 0 || bytes.Contains(pb[at+1:], []byte(want)) {
		t.Fatal("the file's bytes are not in the plaintext exactly once")
	}
	g := geometryOf(t, img)
	sector := uint64(at) / 4096 * 8
	flipByte(t, img, g.DataOffset(sector)+int64(at)%4096)
	r = cryptimg(t, "", "cat", "-d", key, img, "2:home/user/notes.txt")
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("sector %d", sector)) || strings.Count(r.stderr, "\n") > 2 {
		t.Fatalf("cat of a tampered file: exit %d\n%s", r.code, r.stderr)
	}
	if r.code != 4 {
		t.Fatalf("cat of a tampered file: exit %d, want 4", r.code)
	}
	// Another partition's files read on (the ext4 metadata of this one may
	// share the 4096-byte sector, as it would under the kernel).
	if r := mustRun(t, "cat", "-d", key, img, "1:/hello.txt"); r.stdout != testDisk.espFiles["hello.txt"] {
		t.Fatalf("cat of a FAT file: %q", r.stdout)
	}
	// Sector 0 tampered with: ls IMAGE fails as verify does, naming it,
	// rather than listing no partition table (go-diskfs drops the error).
	flipByte(t, img, g.DataOffset(0)+3)
	for _, args := range [][]string{{img}, {"--json", img}} {
		r = cryptimg(t, "", append([]string{"ls", "-d", key}, args...)...)
		// Under --json the failure is the one error object on stdout.
		wantOut := ""
		if args[0] == "--json" {
			wantOut = `"exit_code":4}`
		}
		if r.code != 4 || !strings.Contains(r.stdout, wantOut) || strings.Count(r.stdout, "\n") != strings.Count(wantOut, "}") ||
			!strings.Contains(r.stderr, "integrity check failed at sector 0") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("ls %v of a disk with a tampered sector 0: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// TestIntegrityDecryptToStdout: an authenticated image file decrypts to
// stdout, every sector checked first. Tampered, the stream stops before
// the chunk of the first bad sector (all it holds is the plaintext's
// start), and the command exits 4 naming that sector; --allow-corrupt
// streams everything with the bad sectors zeroed.
func TestIntegrityDecryptToStdout(t *testing.T) {
	dir, key, plain, pb := tamperFixture(t)
	for _, c := range tamperCases() {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".luks")
			integrityImage(t, key, plain, img, c.args...)
			// A chunk size that does not divide an area: chunks cross
			// area boundaries, whose tags are apart.
			r := cryptimg(t, "", "decrypt", "-d", key, "--chunk-size", "3145728", img, "-")
			if r.code != 0 || r.stdout != string(pb) {
				t.Fatalf("decrypt to stdout: exit %d, %d bytes (first difference at %d)\n%s",
					r.code, len(r.stdout), firstDiff([]byte(r.stdout), pb), r.stderr)
			}

			g := geometryOf(t, img)
			spb := uint64(c.ss / 512)
			first := uint64(50000) / spb * spb // in the second area at 512 bytes
			later := uint64(70000) / spb * spb
			flipByte(t, img, g.TagOffset(first)+3)
			flipByte(t, img, g.DataOffset(later)+100)
			r = cryptimg(t, "", "decrypt", "-d", key, img, "-")
			if r.code != 4 || !strings.Contains(r.stderr, fmt.Sprintf("sector %d ", first)) || strings.Count(r.stderr, "\n") > 2 {
				t.Fatalf("decrypt of a tampered image to stdout: exit %d\n%s", r.code, r.stderr)
			}
			chunk := uint64(1 << 20)
			if n := uint64(len(r.stdout)); n > first*512/chunk*chunk || r.stdout != string(pb[:n]) {
				t.Fatalf("tampered: %d bytes out, want at most the %d before the bad sector's chunk, all of them plaintext", n, first*512/chunk*chunk)
			}

			r = cryptimg(t, "", "decrypt", "--allow-corrupt", "-d", key, img, "-")
			warn := fmt.Sprintf("warning: 2 sectors fail the integrity check in %s, written as zeros to stdout: sectors %d, %d\ncryptimg: decrypted %s to stdout", img, first, later, img)
			if r.code != 0 || !strings.Contains(r.stderr, warn) {
				t.Fatalf("decrypt --allow-corrupt to stdout: exit %d, want 0 and %q\n%s", r.code, warn, r.stderr)
			}
			exp := bytes.Clone(pb)
			for _, s := range []uint64{first, later} {
				clear(exp[s*512 : (s+spb)*512])
			}
			if r.stdout != string(exp) {
				t.Fatalf("decrypt --allow-corrupt to stdout: not the plaintext with the bad sectors zeroed (first difference at %d)", firstDiff([]byte(r.stdout), exp))
			}
		})
	}
}
