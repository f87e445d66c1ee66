package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/image"
	"golang.org/x/sys/unix"
)

// keyArea is a byte range of a file.
type keyArea struct{ off, len int64 }

// luks1Areas are the key material areas of the eight LUKS1 slots, from
// dump --json: what each slot's AF-split key occupies.
func luks1Areas(t *testing.T, args ...string) []keyArea {
	t.Helper()
	d := dumpWith(t, args...)
	n := (int64(d.KeyBits/8)*4000 + 511) / 512 * 512
	var s []keyArea
	for _, k := range d.KeySlots {
		s = append(s, keyArea{d.HeaderOffset + int64(k.KeyMaterialOffset)*512, n})
	}
	return s
}

// dumpWith is dump --json with args (the image, and --header).
func dumpWith(t *testing.T, args ...string) dumpJSON {
	t.Helper()
	var d dumpJSON
	if err := json.Unmarshal([]byte(mustRun(t, append([]string{"dump", "--json"}, args...)...).stdout), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// luks2Meta is what the tests read of cryptsetup's LUKS2 JSON metadata.
type luks2Meta struct {
	Keyslots map[string]struct {
		Area struct {
			Offset string `json:"offset"`
			Size   string `json:"size"`
		} `json:"area"`
	} `json:"keyslots"`
	Digests map[string]struct {
		Keyslots []string `json:"keyslots"`
	} `json:"digests"`
	Tokens map[string]struct {
		Keyslots []string `json:"keyslots"`
	} `json:"tokens"`
}

func luks2MetaOf(t *testing.T, cs, img string, extra ...string) luks2Meta {
	t.Helper()
	var m luks2Meta
	args := append(append([]string{"luksDump", "--dump-json-metadata"}, extra...), img)
	if err := json.Unmarshal([]byte(sh(t, cs, args...)), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m luks2Meta) areas(t *testing.T) []keyArea {
	var s []keyArea
	for _, k := range m.Keyslots {
		off, err1 := strconv.ParseInt(k.Area.Offset, 10, 64)
		n, err2 := strconv.ParseInt(k.Area.Size, 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("keyslot area %+v", k.Area)
		}
		s = append(s, keyArea{off, n})
	}
	return s
}

// wiped fails unless every 512-byte sector of each area differs from what
// it held before.
func wiped(t *testing.T, before, after []byte, areas []keyArea) {
	t.Helper()
	if len(areas) == 0 {
		t.Fatal("no key material areas to compare")
	}
	for _, a := range areas {
		for o := a.off; o < a.off+a.len; o += 512 {
			e := min(o+512, a.off+a.len)
			if bytes.Equal(before[o:e], after[o:e]) {
				t.Fatalf("key material at byte %d is unchanged", o)
			}
		}
	}
}

// sameFrom fails unless a and b agree from byte off to the end.
func sameFrom(t *testing.T, a, b []byte, off int64) {
	t.Helper()
	if len(a) != len(b) || !bytes.Equal(a[off:], b[off:]) {
		t.Fatalf("the data from byte %d changed", off)
	}
}

// refusesKeys checks that cryptsetup opens no slot with any of keys.
func refusesKeys(t *testing.T, cs, img string, keys []string, extra ...string) {
	t.Helper()
	for _, k := range keys {
		args := append(append([]string{"open", "--test-passphrase"}, extra...), "--key-file", k, img)
		if csCode(t, cs, args...) == 0 {
			t.Errorf("cryptsetup opens the erased image with %s", filepath.Base(k))
		}
	}
}

// TestEraseLUKS1: every slot is disabled and its material overwritten, the
// payload stays, nothing opens the image; a header backup brings it back.
func TestEraseLUKS1(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	k := newKeyFixture(t)
	mustRun(t, "add-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[1], "-S", "3", fastIter, k.img)
	mustRun(t, "add-key", "-q", "-d", k.keys[0], "--new-key-file", k.keys[2], "-S", "7", fastIter, k.img)
	backup := filepath.Join(k.dir, "backup")
	mustRun(t, "header-backup", k.img, backup)
	before := mustRead(t, k.img)
	areas := luks1Areas(t, k.img)
	payload := dumpOf(t, k.img).PayloadOffsetBytes

	// Off a terminal without --batch-mode: refused, nothing written.
	r := expectCode(t, exitFailure, "erase", k.img)
	if !strings.Contains(r.stderr, "--batch-mode") {
		t.Errorf("no confirmation: %q", r.stderr)
	}
	if !bytes.Equal(mustRead(t, k.img), before) {
		t.Fatal("the refused erase changed the image")
	}

	r = mustRun(t, "erase", "-q", k.img)
	if !strings.Contains(r.stderr, "3 were active") {
		t.Errorf("status line %q", r.stderr)
	}
	after := mustRead(t, k.img)
	dump := sh(t, cs, "luksDump", k.img)
	if strings.Count(dump, ": DISABLED") != 8 || strings.Contains(dump, "ENABLED") {
		t.Errorf("luksDump after erase:\n%s", dump)
	}
	refusesKeys(t, cs, k.img, k.keys[:3])
	expectCode(t, exitFailure, "test-key", "-d", k.keys[0], k.img) // no active slot
	wiped(t, before, after, areas)
	sameFrom(t, before, after, payload)
	// Only the key slots changed in the header's first sector: cipher,
	// UUID and digest are still there, and the image is still LUKS.
	sh(t, cs, "isLuks", k.img)

	// A second erase of an image without keys succeeds and changes the
	// material again.
	mustRun(t, "erase", "-q", k.img)
	wiped(t, after, mustRead(t, k.img), areas)

	mustRun(t, "header-restore", "-q", k.img, backup)
	k.decryptsTo(t, k.keys[1])
}

// TestEraseLUKS2: every keyslot leaves both metadata copies, digests and
// tokens, its area is overwritten, and the data segment is untouched.
func TestEraseLUKS2(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	keys := []string{writeFile(t, filepath.Join(dir, "k0"), "key zero"), writeFile(t, filepath.Join(dir, "k1"), "key one"),
		writeFile(t, filepath.Join(dir, "k2"), "key two")}
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	img := filepath.Join(dir, "img.luks2")
	fastEncrypt(t, keys[0], plain, img, "--type", "luks2", "--pbkdf", "pbkdf2")
	mustRun(t, "add-key", "-q", "-d", keys[0], "--new-key-file", keys[1], "--pbkdf", "pbkdf2", fastIter, img)
	mustRun(t, "add-key", "-q", "-d", keys[0], "--new-key-file", keys[2], "-S", "20", "--pbkdf", "pbkdf2", fastIter, img)
	tok := writeFile(t, filepath.Join(dir, "tok.json"), `{"type":"x-ci","keyslots":[]}`)
	mustRun(t, "token", "import", "--json-file", tok, "--key-slot", "20", img)
	m := luks2MetaOf(t, cs, img)
	if len(m.Keyslots) != 3 || len(m.Tokens["0"].Keyslots) != 1 {
		t.Fatalf("fixture: %+v", m)
	}
	areas := m.areas(t)
	before := mustRead(t, img)

	mustRun(t, "erase", "-q", img)
	after := mustRead(t, img)
	m = luks2MetaOf(t, cs, img)
	if len(m.Keyslots) != 0 || len(m.Digests["0"].Keyslots) != 0 || len(m.Tokens["0"].Keyslots) != 0 {
		t.Errorf("metadata after erase: %+v", m)
	}
	if !strings.Contains(sh(t, cs, "luksDump", img), "Keyslots:\nTokens:\n  0: x-ci") {
		t.Errorf("luksDump after erase:\n%s", sh(t, cs, "luksDump", img))
	}
	refusesKeys(t, cs, img, keys)
	wiped(t, before, after, areas)
	sameFrom(t, before, after, 16<<20)
	if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
		t.Errorf("dump differs from luksDump:\n%s\nwant\n%s", got, want)
	}

	// The secondary copy holds the erased state too: with the primary
	// destroyed, cryptsetup reads the secondary.
	damaged := filepath.Join(dir, "damaged")
	b := bytes.Clone(after)
	clear(b[:4096])
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if m := luks2MetaOf(t, cs, damaged, "--disable-locks"); len(m.Keyslots) != 0 {
		t.Errorf("secondary copy still has keyslots: %+v", m.Keyslots)
	}
}

// TestEraseIntegrity: an authenticated image loses its keyslots and keeps
// its data and tags.
func TestEraseIntegrity(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "auth.luks2")
	fastCreate(t, key, "4M", img, "--type", "luks2", "--pbkdf", "pbkdf2", "--integrity", "hmac-sha256")
	areas := luks2MetaOf(t, cs, img).areas(t)
	before := mustRead(t, img)
	mustRun(t, "erase", "-q", img)
	after := mustRead(t, img)
	if m := luks2MetaOf(t, cs, img); len(m.Keyslots) != 0 {
		t.Errorf("keyslots after erase: %+v", m.Keyslots)
	}
	refusesKeys(t, cs, img, []string{key})
	wiped(t, before, after, areas)
	sameFrom(t, before, after, 16<<20)
}

// TestEraseQcow2: the LUKS area inside a qcow2 image loses its slots; the
// qcow2 metadata and clusters stay, and qemu can no longer decrypt it.
func TestEraseQcow2(t *testing.T) {
	qi := requireTool(t, "qemu-img")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	q := filepath.Join(dir, "vm.qcow2")
	fastEncrypt(t, key, plain, q, "-O", "qcow2")
	mustRun(t, "add-key", "-q", "-d", key, "--new-key-file", key2, fastIter, q)
	d := dumpOf(t, q)
	areas := luks1Areas(t, q)
	before := mustRead(t, q)
	mustRun(t, "erase", "-q", q)
	after := mustRead(t, q)
	for _, s := range dumpOf(t, q).KeySlots {
		if s.Active {
			t.Errorf("slot %d still active", s.Slot)
		}
	}
	wiped(t, before, after, areas)
	// Everything outside the key material is as it was.
	for _, a := range areas {
		copy(after[a.off:a.off+a.len], before[a.off:a.off+a.len])
	}
	hdr := d.HeaderOffset
	copy(after[hdr:hdr+1024], before[hdr:hdr+1024]) // the phdr with the slots' state
	if !bytes.Equal(before, after) {
		t.Error("erase changed more than the LUKS header and key material")
	}
	if out, err := exec.Command(qi, "convert", "--object", qemuSecret(key), "--image-opts", qcowOpts(q), "-O", "raw", filepath.Join(dir, "back")).CombinedOutput(); err == nil {
		t.Errorf("qemu-img decrypts the erased image:\n%s", out)
	}
}

// TestEraseDetached: with --header only the header file changes.
func TestEraseDetached(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			hdr, data := filepath.Join(dir, typ+".hdr"), filepath.Join(dir, typ+".data")
			fastEncrypt(t, key, plain, data, "--header", hdr, "--type", typ, "--pbkdf", "pbkdf2")
			var areas []keyArea
			if typ == "luks1" {
				areas = luks1Areas(t, "--header", hdr, data)
			} else {
				areas = luks2MetaOf(t, cs, hdr).areas(t)
			}
			beforeHdr, beforeData := mustRead(t, hdr), mustRead(t, data)
			expectCode(t, exitFailure, "erase", "--header", hdr, data)
			if !bytes.Equal(mustRead(t, hdr), beforeHdr) {
				t.Fatal("the refused erase changed the header")
			}
			mustRun(t, "erase", "-q", "--header", hdr, data)
			if !bytes.Equal(mustRead(t, data), beforeData) {
				t.Error("erase --header changed the data file")
			}
			wiped(t, beforeHdr, mustRead(t, hdr), areas)
			refusesKeys(t, cs, data, []string{key}, "--header", hdr)
			expectCode(t, exitFailure, "test-key", "--header", hdr, "-d", key, data) // no active slot
		})
	}
}

// TestEraseRefusesBusy: an image with an unfinished in-place operation, or
// locked by another cryptimg, is refused with exit 5 and not changed.
func TestEraseRefusesBusy(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	plain := randomFile(t, dir, "plain.raw", 8<<20)
	img := filepath.Join(dir, "img.luks")
	fastEncrypt(t, key, plain, img)

	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, img)
	if r := expectCode(t, exitBusy, "erase", "-q", img); !strings.Contains(r.stderr, "is busy: opened read-write by pid") {
		t.Errorf("locked: %q", r.stderr)
	}
	f.Close()
	if !bytes.Equal(mustRead(t, img), before) {
		t.Error("the refused erase changed the locked image")
	}

	interruptOp(t, image.OpReencrypt, img, testPassphrase)
	before = mustRead(t, img)
	journal := mustRead(t, img+image.JournalSuffix)
	if r := expectCode(t, exitBusy, "erase", "-q", img); !strings.Contains(r.stderr, "unfinished") {
		t.Errorf("unfinished operation: %q", r.stderr)
	}
	if !bytes.Equal(mustRead(t, img), before) || !bytes.Equal(mustRead(t, img+image.JournalSuffix), journal) {
		t.Error("the refused erase changed the image or its journal")
	}
	mustRun(t, "reencrypt", "--resume", "--key-file", key, img)
	mustRun(t, "test-key", "-d", key, img)
}

// TestEraseJSON: erase --json reports the image, its type and container,
// the slots that were active and every slot whose key material was
// overwritten, as one object on stdout and nothing on stderr.
func TestEraseJSON(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	key2 := writeFile(t, filepath.Join(dir, "key2"), "second")
	plain := randomFile(t, dir, "plain.raw", 1<<20)
	erase := func(args ...string) eraseJSON {
		t.Helper()
		r := mustRun(t, append([]string{"erase", "-q", "--json"}, args...)...)
		var s eraseJSON
		dec := json.NewDecoder(strings.NewReader(r.stdout))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil || dec.More() || r.stderr != "" {
			t.Fatalf("erase --json: stdout %q (%v), stderr %q", r.stdout, err, r.stderr)
		}
		return s
	}
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	for _, c := range []struct {
		name, typ, format string
		enc               []string
		slot              string // the second key's
		wiped             []int
	}{
		{"luks1", "luks1", "raw", nil, "3", all},
		{"luks2", "luks2", "raw", []string{"--type", "luks2", "--pbkdf", "pbkdf2"}, "9", []int{0, 9}},
		{"qcow2", "luks1", "qcow2", []string{"-O", "qcow2"}, "5", all},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(dir, c.name+".img")
			fastEncrypt(t, key, plain, img, c.enc...)
			mustRun(t, "add-key", "-q", "-d", key, "--new-key-file", key2, "-S", c.slot, "--pbkdf", "pbkdf2", fastIter, img)
			s := erase(img)
			want := eraseJSON{MessageType: "erase", Image: img, Type: c.typ, Format: c.format}
			if got := fmt.Sprint(s.KeySlots, s.WipedSlots); got != fmt.Sprint([]int{0, mustAtoi(t, c.slot)}, c.wiped) {
				t.Errorf("key_slots, wiped_slots = %s", got)
			}
			s.KeySlots, s.WipedSlots = nil, nil
			if fmt.Sprint(s) != fmt.Sprint(want) {
				t.Errorf("erase --json: %+v, want %+v", s, want)
			}
			// Nothing left to remove: [] (not null), and LUKS1 still
			// overwrites every area.
			s = erase(img)
			if s.KeySlots == nil || len(s.KeySlots) != 0 || (c.typ == "luks1") != (len(s.WipedSlots) == 8) {
				t.Errorf("second erase: %+v", s)
			}
		})
	}
	hdr, data := filepath.Join(dir, "d.hdr"), filepath.Join(dir, "d.data")
	fastEncrypt(t, key, plain, data, "--header", hdr, "--type", "luks2", "--pbkdf", "pbkdf2")
	if s := erase("--header", hdr, data); s.Header != hdr || s.Image != data || s.Type != "luks2" || s.Format != "raw" || fmt.Sprint(s.KeySlots) != "[0]" {
		t.Errorf("erase --json --header: %+v", s)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
