package main

import (
	"bytes"
	"crypto/sha256"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setLUKS2JSON rewrites the metadata of both LUKS2 header copies of the
// image at path with edit's result, checksummed again (sha256).
func setLUKS2JSON(t *testing.T, path string, edit func(js string) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hdr := int(be.BigEndian.Uint64(b[8:16]))
	js := edit(string(b[4096 : 4096+bytes.IndexByte(b[4096:hdr], 0)]))
	for _, off := range []int{0, hdr} {
		c := b[off : off+hdr]
		clear(c[4096:])
		copy(c[4096:], js)
		clear(c[448 : 448+64])
		sum := sha256.Sum256(c)
		copy(c[448:], sum[:])
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// keyslotText is the JSON text of keyslot n in metadata js.
func keyslotText(t *testing.T, js, n string) string {
	t.Helper()
	var top struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
	}
	if err := json.Unmarshal([]byte(js), &top); err != nil || top.Keyslots[n] == nil {
		t.Fatalf("keyslot %s in %s: %v", n, js, err)
	}
	return string(top.Keyslots[n])
}

// unknownPartCase is a LUKS2 image (k0 in keyslot 0, k1 in keyslot 1) with
// its metadata edited, and what cryptimg does with it.
type unknownPartCase struct {
	name    string
	edit    func(t *testing.T, js string) string
	warning string // on dump's stderr
	shown   string // on dump's stdout (cryptsetup luksDump's text)
	// dataErr is in decrypt's error when the data segment is the unknown
	// part; "" when decrypt with k1 works.
	dataErr string
	// slot0Err is in the error of test-key -S 0 with k0, which exits 1.
	slot0Err string
}

func unknownPartCases() []unknownPartCase {
	slot0 := func(old, new string) func(*testing.T, string) string {
		return func(t *testing.T, js string) string {
			ks := keyslotText(t, js, "0")
			if !strings.Contains(ks, old) {
				t.Fatalf("%q not in keyslot 0: %s", old, ks)
			}
			return strings.Replace(js, ks, strings.Replace(ks, old, new, 1), 1)
		}
	}
	edit := func(old, new string) func(*testing.T, string) string {
		return func(t *testing.T, js string) string {
			if !strings.Contains(js, old) {
				t.Fatalf("%q not in %s", old, js)
			}
			return strings.Replace(js, old, new, 1)
		}
	}
	const segCipher = `"encryption":"aes-xts-plain64","sector_size"`
	return []unknownPartCase{
		{name: "kdf argon2", edit: slot0(`"type":"pbkdf2"`, `"type":"argon2"`), warning: `keyslot 0: kdf "argon2" is not one cryptimg knows`,
			shown: "PBKDF:      argon2\n", slot0Err: `keyslot 0: kdf "argon2"`},
		{name: "keyslot type unknown", edit: slot0(`"type":"luks2"`, `"type":"luks3"`), warning: `keyslot 0: type "luks3"`,
			shown: "  0: luks3\n", slot0Err: `keyslot 0: type "luks3"`},
		{name: "token type unknown", edit: edit(`"tokens":{}`, `"tokens":{"0":{"type":"x-future","keyslots":["1"],"blob":{"a":[1]}}}`), shown: "  0: x-future\n\tKeyslot:    1\n"},
		{name: "segment type unknown", edit: func(t *testing.T, js string) string {
			i := strings.Index(js, `"segments":{"0":`)
			j := strings.Index(js[i:], "}}") + i + 2
			return js[:i] + `"segments":{"0":{"type":"some_type","offset":"16777216","size":"dynamic","a_field":0}}` + js[j:]
		}, warning: `segment 0: type "some_type" is not one cryptimg can read`, shown: "  0: some_type\n", dataErr: `segment 0: type "some_type"`, slot0Err: `segment 0: type "some_type"`},
		{name: "segment size 2^64-512", edit: edit(`"size":"dynamic"`, `"size":"18446744073709551104"`), warning: "reach beyond 2^63 bytes",
			shown: "length: 18446744073709551104 [bytes]", dataErr: "segment 0: offset 16777216 and size 18446744073709551104 reach beyond 2^63 bytes", slot0Err: "reach beyond 2^63"},
		{name: "digest type unknown", edit: edit(`"segments":["0"],"type":"pbkdf2"`, `"segments":["0"],"type":"pbkdf3"`), warning: `digest 0: type "pbkdf3"`,
			shown: "  0: pbkdf3\n", dataErr: `digest 0: type "pbkdf3"`, slot0Err: `digest 0: type "pbkdf3"`},
		{name: "keyslot cipher_null", edit: slot0(`"aes-xts-plain64"`, `"cipher_null-ecb"`), warning: `keyslot 0 is not encrypted (cipher "cipher_null-ecb"): refused`,
			shown: "Cipher:     cipher_null-ecb\n", slot0Err: "keyslot 0 is not encrypted"},
		{name: "segment cipher_null", edit: edit(segCipher, `"encryption":"cipher_null-ecb","sector_size"`), warning: "segment 0 is not encrypted",
			shown: "cipher: cipher_null-ecb\n", dataErr: "segment 0 is not encrypted", slot0Err: "segment 0 is not encrypted"},
		{name: "keyslot capi", edit: slot0(`"aes-xts-plain64"`, `"capi:xts(aes)-plain64"`), warning: `keyslot 0: cipher "capi:xts(aes)-plain64" is a kernel crypto API name`,
			shown: "Cipher:     capi:xts(aes)-plain64\n", slot0Err: "kernel crypto API name"},
		{name: "segment capi", edit: edit(segCipher, `"encryption":"capi:xts(aes)-plain64","sector_size"`), warning: `segment 0: cipher "capi:xts(aes)-plain64" is a kernel crypto API name`,
			shown: "cipher: capi:xts(aes)-plain64\n", dataErr: "kernel crypto API name", slot0Err: "kernel crypto API name"},
	}
}

// unknownPartImage makes the base image: 1 MiB of plaintext under LUKS2
// (aes-xts-plain64, pbkdf2), k0 in keyslot 0 and k1 in keyslot 1.
func unknownPartImage(t *testing.T, dir string) (img, plain, k0, k1 string) {
	t.Helper()
	k0 = writeFile(t, filepath.Join(dir, "k0"), "key zero")
	k1 = writeFile(t, filepath.Join(dir, "k1"), "key one")
	plain = randomFile(t, dir, "plain.raw", 1<<20)
	img = filepath.Join(dir, "base.luks2")
	mustRun(t, "encrypt", "-d", k0, "--type", "luks2", "--cipher", "aes-xts-plain64", "--sector-size", "512", "--pbkdf", "pbkdf2", fastIter, plain, img)
	mustRun(t, "add-key", "-q", "-d", k0, "--new-key-file", k1, "--pbkdf", "pbkdf2", fastIter, img)
	return img, plain, k0, k1
}

// TestLUKS2UnknownParts: headers cryptsetup loads with a part cryptimg does
// not know or will not use (an unknown KDF, keyslot, token or segment
// type, a segment size of 2^64-512, the null cipher, a capi: name) load:
// dump exits 0, shows the part and warns about it on stderr; the other
// keyslot still unlocks and decrypts; what needs the part fails with exit 1
// and a message naming it, a null cipher with the --allow-null-cipher
// hint; add-key to another slot keeps the unknown keyslot byte for byte.
func TestLUKS2UnknownParts(t *testing.T) {
	dir := t.TempDir()
	base, plain, k0, k1 := unknownPartImage(t, dir)
	for _, c := range unknownPartCases() {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img.luks2")
			copyFile(t, base, img)
			setLUKS2JSON(t, img, func(js string) string { return c.edit(t, js) })
			d := mustRun(t, "dump", img)
			if !strings.Contains(d.stdout, c.shown) {
				t.Errorf("dump does not show %q:\n%s", c.shown, d.stdout)
			}
			if c.warning == "" && d.stderr != "" || !strings.Contains(d.stderr, c.warning) {
				t.Errorf("dump's stderr %q, want a warning with %q", d.stderr, c.warning)
			}
			var dj luks2JSON
			if err := json.Unmarshal([]byte(mustRun(t, "dump", "--json", img).stdout), &dj); err != nil || (c.warning != "") != (len(dj.Unusable) > 0) {
				t.Errorf("dump --json unusable %q, %v", dj.Unusable, err)
			}
			out := filepath.Join(t.TempDir(), "out.raw")
			r := cryptimg(t, "", "decrypt", "-d", k1, img, out)
			switch {
			case c.dataErr == "" && r.code != 0:
				t.Errorf("decrypt with keyslot 1: exit %d, %s", r.code, r.stderr)
			case c.dataErr == "":
				sameContent(t, plain, out)
			case r.code != exitFailure || !strings.Contains(r.stderr, c.dataErr):
				t.Errorf("decrypt: exit %d, %q; want %d naming %q", r.code, r.stderr, exitFailure, c.dataErr)
			}
			r = cryptimg(t, "", "test-key", "-d", k0, "-S", "0", img)
			if c.slot0Err == "" && r.code != 0 || c.slot0Err != "" && (r.code != exitFailure || !strings.Contains(r.stderr, c.slot0Err)) {
				t.Errorf("test-key -S 0: exit %d, %q; want %d naming %q", r.code, r.stderr, exitFailure, c.slot0Err)
			}
			if strings.Contains(c.name, "cipher_null") != strings.Contains(r.stderr, "--allow-null-cipher") {
				t.Errorf("test-key -S 0: hint %q", r.stderr)
			}
			if c.dataErr != "" {
				return
			}
			// add-key to slot 2 keeps keyslot 0 as it was, byte for byte.
			js := mustRun(t, "dump", "--dump-json-metadata", img).stdout
			before, _ := json.Marshal(json.RawMessage(keyslotText(t, js, "0")))
			k2 := writeFile(t, filepath.Join(t.TempDir(), "k2"), "key two")
			mustRun(t, "add-key", "-q", "-d", k1, "--new-key-file", k2, "-S", "2", "--pbkdf", "pbkdf2", fastIter, img)
			b, _ := os.ReadFile(img)
			if !bytes.Contains(b[4096:16384], before) {
				t.Errorf("keyslot 0 changed by add-key: %s", before)
			}
			mustRun(t, "test-key", "-d", k2, "-S", "2", img)
		})
	}
}

// TestLUKS2UnknownPartsCryptsetup: cryptsetup 2.6.1 luksDump loads the
// same headers, and dump prints what it prints.
func TestLUKS2UnknownPartsCryptsetup(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	dir := t.TempDir()
	base, _, _, _ := unknownPartImage(t, dir)
	for _, c := range unknownPartCases() {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "img.luks2")
			copyFile(t, base, img)
			setLUKS2JSON(t, img, func(js string) string { return c.edit(t, js) })
			if got, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); got != want {
				t.Errorf("dump differs from cryptsetup luksDump:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestLUKS2AllowNullCipher: a null-cipher data segment decrypts only with
// --allow-null-cipher, to the payload as it lies in the file; a
// null-cipher keyslot is passed over (and named, with the flag) when no
// other keyslot takes the passphrase, and with the flag it takes no
// non-empty passphrase (cryptsetup 2.8.1).
func TestLUKS2AllowNullCipher(t *testing.T) {
	dir := t.TempDir()
	base, _, k0, k1 := unknownPartImage(t, dir)
	cases := unknownPartCases()
	find := func(name string) unknownPartCase {
		for _, c := range cases {
			if c.name == name {
				return c
			}
		}
		t.Fatalf("no case %q", name)
		return unknownPartCase{}
	}

	seg := filepath.Join(dir, "seg.luks2")
	copyFile(t, base, seg)
	setLUKS2JSON(t, seg, func(js string) string { return find("segment cipher_null").edit(t, js) })
	out := filepath.Join(dir, "out.raw")
	mustRun(t, "decrypt", "--allow-null-cipher", "-d", k1, seg, out)
	b, _ := os.ReadFile(seg)
	if got, _ := os.ReadFile(out); !bytes.Equal(got, b[16<<20:]) {
		t.Error("decrypt --allow-null-cipher of a null segment is not the payload as stored")
	}

	slot := filepath.Join(dir, "slot.luks2")
	copyFile(t, base, slot)
	setLUKS2JSON(t, slot, func(js string) string { return find("keyslot cipher_null").edit(t, js) })
	wrong := writeFile(t, filepath.Join(dir, "wrong"), "wrong")
	r := cryptimg(t, "", "test-key", "-d", wrong, slot)
	if r.code != exitNoKey || !strings.Contains(r.stderr, "not tried: keyslot 0 is not encrypted") || !strings.Contains(r.stderr, "--allow-null-cipher") {
		t.Errorf("wrong passphrase: exit %d, %q", r.code, r.stderr)
	}
	if r := cryptimg(t, "", "test-key", "--allow-null-cipher", "-d", k0, "-S", "0", slot); r.code != exitNoKey {
		t.Errorf("allowed null keyslot with a passphrase: exit %d, %q", r.code, r.stderr)
	}
	mustRun(t, "test-key", "--allow-null-cipher", "-d", k1, slot)
}

// TestLUKS2TokenImportNesting: a token nested deeper than LUKS2 metadata
// may be (json-c's depth, counting the two objects around a token) is an
// input error, exit 1, and the image is left as it was; one level less is
// imported.
func TestLUKS2TokenImportNesting(t *testing.T) {
	dir := t.TempDir()
	img, _, _, _ := unknownPartImage(t, dir)
	token := func(n int) string {
		return writeFile(t, filepath.Join(dir, fmt.Sprint("tok", n)),
			`{"type":"x","keyslots":[],"d":`+strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n)+"}")
	}
	before := fileSHA(t, img)
	r := cryptimg(t, "", "token", "import", "--json-file", token(29), img)
	if r.code != exitFailure || !strings.Contains(r.stderr, "too deeply nested") || strings.Contains(r.stderr, "internal error") {
		t.Errorf("29 levels: exit %d, %q", r.code, r.stderr)
	}
	if fileSHA(t, img) != before {
		t.Error("the refused import wrote to the image")
	}
	mustRun(t, "token", "import", "--json-file", token(28), img)
	mustRun(t, "dump", img)
}
