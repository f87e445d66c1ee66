package main

// The kernel oracle for authenticated images (LUKS2 --integrity): the real
// dm-integrity and dm-crypt AEAD stack reads what cryptimg writes, writes
// what cryptimg must verify, and names the same tampered sectors.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// aeadErrors lists the distinct sectors in the kernel's "INTEGRITY AEAD
// ERROR, sector N" lines of a check's output, sorted.
func aeadErrors(out string) []uint64 {
	var s []uint64
	for _, m := range regexp.MustCompile(`INTEGRITY AEAD ERROR, sector (\d+)`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		if !slices.Contains(s, n) {
			s = append(s, n)
		}
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

// TestKernelIntegrityReads: the kernel opens cryptimg's authenticated
// images of every mode and sector size, and reencrypted ones, reads the
// plaintext back with no integrity error, in journal mode and in the direct mode the no-journal
// flag asks for; it writes into one, and cryptimg verifies and decrypts
// what it wrote. One flipped byte of data and one of a tag: the kernel's
// reads of those blocks fail, it logs the sectors, and cryptimg's verify
// names the same ones.
func TestKernelIntegrityReads(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "kernel integrity passphrase")
	plain := randomFile(t, dir, "plain.raw", 20<<20) // two areas
	for _, c := range integrityCases {
		img := filepath.Join(dir, c.name+".luks")
		integrityImage(t, key, plain, img, c.args...)
		o.reads("int-read-"+c.name, img, key, fileSHA(t, plain))
	}
	// The README's example: the default aes-xts-plain64 with hmac(sha256)
	// (a 96-byte volume key) and benchmarked KDF costs, pbkdf2 for the VM's
	// memory.
	readme := filepath.Join(dir, "readme.luks")
	mustRun(t, "encrypt", "-d", key, "--type", "luks2", "--integrity", "hmac-sha256", "--pbkdf", "pbkdf2", "--iter-time", "1", plain, readme)
	o.reads("int-read-readme", readme, key, fileSHA(t, plain))
	// Reencrypted by cryptimg: essiv to xts (the same tags), and gcm with a
	// new key.
	for _, c := range []struct {
		name string
		from []string
		to   []string
	}{{"essiv-to-xts", integrityCases[0].args, []string{"--cipher", "aes-xts-plain64"}}, {"gcm", integrityCases[5].args, nil}} {
		img := filepath.Join(dir, "reenc-"+c.name+".luks")
		integrityImage(t, key, plain, img, c.from...)
		args := append([]string{"reencrypt", "--batch-mode", "-d", key, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}, c.to...)
		mustRun(t, append(args, img)...)
		o.reads("int-reencrypted-"+c.name, img, key, fileSHA(t, plain))
	}
	// A detached header: the integrity device starts at 0 of the data file.
	dhdr, ddata := filepath.Join(dir, "detached.hdr"), filepath.Join(dir, "detached.data")
	fastEncrypt(t, key, plain, ddata, append([]string{"--header", dhdr, "--type", "luks2", "--pbkdf", "pbkdf2"}, integrityCases[1].args...)...)
	mustRun(t, "--header", dhdr, "verify", "-d", key, ddata)
	o.reads("int-detached", ddata, key, fileSHA(t, plain), "--header", o.disk(dhdr))
	nj := filepath.Join(dir, "no-journal.luks")
	integrityImage(t, key, plain, nj, append(integrityCases[2].args, "--integrity-no-journal")...)
	m := o.mapper()
	o.check("int-no-journal", fmt.Sprintf("unlock %s %s %s --readonly\ndmsetup table %s_dif\nsha /dev/mapper/%s\nlock %s",
		o.disk(nj), m, o.key(key), m, m, m))

	// The kernel writes a second disk's data into a cryptimg image (journal
	// mode, read-write) and closes it.
	src := randomFile(t, dir, "source.raw", 20<<20)
	zero := filepath.Join(dir, "zero.raw")
	os.WriteFile(zero, make([]byte, 20<<20), 0o600)
	wimg := filepath.Join(dir, "written.luks")
	integrityImage(t, key, zero, wimg, integrityCases[0].args...)
	m = o.mapper()
	o.check("int-write", fmt.Sprintf("unlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 conv=fsync 2>/dev/null\nlock %s",
		o.disk(wimg), m, o.key(key), o.disk(src), m, m))

	// Everything so far read and wrote with no integrity error logged.
	o.check("int-clean-log", `if dmesg | grep -E "AEAD ERROR|integrity: Error|device-mapper: integrity"; then exit 1; fi; echo clean`)

	// Tampering, for a 512-byte and a 4096-byte sector image.
	type tamper struct {
		name      string
		img       string
		data, tag uint64 // sectors
		ss        uint64
	}
	var tampers []tamper
	for _, c := range []integrityCase{integrityCases[0], integrityCases[2]} {
		img := filepath.Join(dir, "tamper-"+c.name+".luks")
		integrityImage(t, key, plain, img, c.args...)
		g := geometryOf(t, img)
		tp := tamper{name: c.name, img: img, data: 33000 / 8 * 8, tag: 1000 / 8 * 8, ss: uint64(c.ss)}
		if c.ss == 512 {
			tp.data, tp.tag = 33001, 1003 // not the first sector of a page
		}
		flipByte(t, img, g.DataOffset(tp.data)+17)
		flipByte(t, img, g.TagOffset(tp.tag)+3)
		m := o.mapper()
		// Each page read fails; a clean page reads; dmesg has the sectors.
		o.check("int-tamper-"+c.name, fmt.Sprintf(`unlock %[1]s %[2]s %[3]s --readonly
dmesg -c >/dev/null
for s in %[4]d %[5]d; do
  if dd if=/dev/mapper/%[2]s of=/dev/null bs=4096 skip=$((s / 8)) count=1 2>/dev/null; then echo "read of sector $s passed"; exit 1; fi
done
dd if=/dev/mapper/%[2]s of=/dev/null bs=4096 skip=100 count=1 2>/dev/null
lock %[2]s
dmesg`, o.disk(img), m, o.key(key), tp.data, tp.tag))
		tampers = append(tampers, tp)
	}

	r := o.run()
	if tbl := r.Want(t, "int-no-journal"); !strings.Contains(tbl, " integrity ") || !strings.Contains(tbl, " D ") ||
		!strings.HasSuffix(tbl, hexSHA(fileSHA(t, plain))) {
		t.Errorf("no-journal image: the integrity table is not in direct mode or the data differs:\n%s", tbl)
	}
	r.Want(t, "int-write")
	if got := r.Want(t, "int-clean-log"); got != "clean" {
		t.Errorf("the kernel logged integrity errors reading cryptimg's images:\n%s", got)
	}
	mustRun(t, "verify", "-d", key, wimg)
	out := filepath.Join(dir, "written.out")
	mustRun(t, "decrypt", "-d", key, wimg, out)
	sameContent(t, src, out)
	for _, tp := range tampers {
		kern := aeadErrors(r.Want(t, "int-tamper-"+tp.name))
		res := cryptimg(t, "", "verify", "--json", "-d", key, tp.img)
		var rep verifyReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != 4 || rep.Corrupt == nil {
			t.Fatalf("verify of %s: exit %d, %v\n%s%s", tp.name, res.code, err, res.stdout, res.stderr)
		}
		want := []uint64{tp.tag, tp.data}
		if fmt.Sprint(kern) != fmt.Sprint(want) || fmt.Sprint(rep.Corrupt.Sectors) != fmt.Sprint(want) {
			t.Errorf("%s: the kernel logged AEAD errors for sectors %v, cryptimg verify names %v; flipped %v",
				tp.name, kern, rep.Corrupt.Sectors, want)
		}
	}
}

func hexSHA(s [32]byte) string { return fmt.Sprintf("%x", s) }

// TestKernelIntegrityFormats: images that cryptsetup formats in the VM,
// with data the kernel writes through dm-crypt, verify and decrypt on the
// host, for each mode; one left with a never-written tail shows cryptimg
// failing exactly the sectors the kernel would; the default wipe reads as
// zeros.
func TestKernelIntegrityFormats(t *testing.T) {
	o := newOracle(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), "kernel integrity passphrase")
	src := randomFile(t, dir, "source.raw", 40<<20)
	format := "cryptsetup luksFormat --batch-mode --type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file %s %s %s"
	cases := []struct {
		name, opts string
		size       int64
		fill       bool // write the whole device, else the first MiB
	}{
		{"essiv-512", "--cipher aes-cbc-essiv:sha256 --key-size 256 --integrity hmac-sha256 --sector-size 512 --integrity-no-wipe", 40 << 20, true},
		{"xts-4096", "--cipher aes-xts-plain64 --key-size 512 --integrity hmac-sha256 --sector-size 4096 --integrity-no-wipe", 36<<20 + 12800, true},
		{"gcm-4096", "--cipher aes-gcm-random --key-size 256 --integrity aead --sector-size 4096 --integrity-no-wipe", 32 << 20, true},
		{"essiv-tail", "--cipher aes-cbc-essiv:sha256 --key-size 128 --integrity hmac-sha256 --sector-size 512 --integrity-no-wipe", 24 << 20, false},
		{"xts-wipe", "--cipher aes-xts-plain64 --key-size 256 --integrity hmac-sha256 --sector-size 4096", 20 << 20, false},
	}
	imgs := map[string]string{}
	for _, c := range cases {
		img := filepath.Join(dir, c.name+".img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		os.Truncate(img, c.size)
		imgs[c.name] = img
		m := o.mapper()
		count := ""
		if !c.fill {
			count = "count=16"
		}
		o.check("fmt-"+c.name, fmt.Sprintf(format+"\nunlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 %s conv=fsync 2>/dev/null || true\nblockdev --getsize64 /dev/mapper/%s\nlock %s",
			o.key(key), c.opts, o.disk(img), o.disk(img), m, o.key(key), o.disk(src), m, count, m, m))
	}
	// A crash image: a raw copy of a cryptimg image taken while the kernel
	// has it open in journal mode, just after a synced write.
	live := filepath.Join(dir, "live.luks")
	zero := filepath.Join(dir, "zero.raw")
	os.WriteFile(zero, make([]byte, 8<<20), 0o600)
	integrityImage(t, key, zero, live, integrityCases[0].args...)
	crash := filepath.Join(dir, "crash.luks")
	st, _ := os.Stat(live)
	os.WriteFile(crash, nil, 0o600)
	os.Truncate(crash, st.Size())
	m := o.mapper()
	o.check("crash-copy", fmt.Sprintf("unlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 count=4 conv=fsync 2>/dev/null\ndd if=%s of=%s bs=1048576 2>/dev/null\nlock %s",
		o.disk(live), m, o.key(key), o.disk(src), m, o.disk(live), o.disk(crash), m))

	r := o.run()
	srcb, _ := os.ReadFile(src)
	r.Want(t, "crash-copy")
	res := cryptimg(t, "", "verify", "-d", key, crash)
	if res.code != 5 || !strings.Contains(res.stderr, "not yet in place") || !strings.Contains(res.stderr, "cryptimg repair") {
		t.Fatalf("verify of an image with a pending integrity journal: exit %d\n%s", res.code, res.stderr)
	}
	if rr := mustRun(t, "repair", crash); !strings.Contains(rr.stderr, "from the integrity journal in place") {
		t.Fatalf("repair: %s", rr.stderr)
	}
	mustRun(t, "verify", "-d", key, crash)
	crashOut := filepath.Join(dir, "crash.out")
	mustRun(t, "decrypt", "-d", key, crash, crashOut)
	if got, _ := os.ReadFile(crashOut); string(got[:256<<10]) != string(srcb[:256<<10]) || strings.Trim(string(got[256<<10:]), "\x00") != "" {
		t.Error("the repaired crash image does not hold what the kernel wrote")
	}
	for _, c := range cases {
		outp := r.Want(t, "fmt-"+c.name)
		lines := strings.Fields(outp)
		size, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
		if err != nil {
			t.Fatalf("%s: no device size in:\n%s", c.name, outp)
		}
		img := imgs[c.name]
		out := filepath.Join(dir, c.name+".out")
		res := cryptimg(t, "", "verify", "--json", "-d", key, img)
		var rep verifyReport
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
			t.Fatalf("%s: verify: exit %d %v\n%s", c.name, res.code, err, res.stderr)
		}
		if int64(rep.Bytes) != size {
			t.Errorf("%s: cryptimg sees %d bytes, the kernel's device has %d", c.name, rep.Bytes, size)
		}
		switch {
		case c.fill:
			if !rep.OK {
				t.Errorf("%s: verify failed on a fully written image: %+v", c.name, rep.Corrupt)
			}
			mustRun(t, "decrypt", "-d", key, img, out)
			got, _ := os.ReadFile(out)
			if string(got) != string(srcb[:size]) {
				t.Errorf("%s: decrypt differs from what the kernel wrote", c.name)
			}
		case strings.HasSuffix(c.name, "-wipe"):
			if !rep.OK {
				t.Errorf("%s: verify failed on a wiped image: %+v", c.name, rep.Corrupt)
			}
			mustRun(t, "decrypt", "-d", key, img, out)
			got, _ := os.ReadFile(out)
			if string(got[:1<<20]) != string(srcb[:1<<20]) || strings.Trim(string(got[1<<20:]), "\x00") != "" {
				t.Errorf("%s: decrypt is not the written MiB followed by the wipe's zeros", c.name)
			}
		default:
			// The first MiB written, the rest never: every later sector
			// fails, as the kernel's reads of them do (no-wipe).
			if rep.OK || rep.Corrupt.Count != uint64(size-1<<20)/512 || rep.Corrupt.Sectors[0] != 1<<20/512 {
				t.Errorf("%s: verify of a partly written no-wipe image: %+v, want every sector from %d", c.name, rep.Corrupt, 1<<20/512)
			}
			res := cryptimg(t, "", "decrypt", "--allow-corrupt", "-d", key, img, out)
			got, _ := os.ReadFile(out)
			if res.code != 0 || string(got[:1<<20]) != string(srcb[:1<<20]) {
				t.Errorf("%s: decrypt --allow-corrupt: exit %d, first MiB equal %v", c.name, res.code, string(got[:1<<20]) == string(srcb[:1<<20]))
			}
		}
	}
}
