package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header/token/tpm2"
	"github.com/cryptimg/cryptimg/vectors/swtpm"
)

// tpm2Token returns token id of img as a map and as JSON.
func tpm2Token(t *testing.T, img string, id int) (map[string]any, []byte) {
	t.Helper()
	js, ok := readLUKS2(t, img).TokenJSON(id)
	var tok map[string]any
	if !ok || json.Unmarshal(js, &tok) != nil {
		t.Fatalf("%s: no token %d", img, id)
	}
	return tok, js
}

// TestEnrollTPM2Interop: enroll --tpm2-device-key seals to swtpm's SRK
// (made by tpm2-tools, as systemd makes it) without contacting the TPM: one
// header update adds key slot 1 with systemd's minimal KDF and the
// systemd-tpm2 token, which dump shows as luksDump does; the token unseals through the swtpm to a passphrase
// cryptsetup accepts for slot 1. systemd-cryptenroll 257 (Debian 13) seals
// the same image offline to the same SRK and gets a token with the same
// fields, policy hash and tpm2_srk; and it unlocks cryptimg's image through
// cryptimg's token alone (--unlock-tpm2-device, after the password slot is
// wiped) to add a recovery key cryptsetup accepts. A token sealed to other PCR
// values, and the right token under another swtpm, are refused by systemd.
func TestEnrollTPM2Interop(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	tp := swtpm.Start(t)
	srk := tp.MakeSRK(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	ref := img + ".systemd"
	copyFile(t, img, ref)
	copyFile(t, img, ref+".orig")
	zero := strings.Repeat("00", 32)
	pcrs := "7:sha256=" + zero + "+15:sha256=" + zero

	seq := readLUKS2(t, img).SeqID()
	r := mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", pcrs, "--json", img)
	var out map[string]any
	if json.Unmarshal([]byte(r.stdout), &out) != nil || out["key_slot"] != 1.0 || out["token_id"] != 0.0 || out["token_type"] != "systemd-tpm2" {
		t.Fatalf("--json: %s", r.stdout)
	}
	h := readLUKS2(t, img)
	if h.SeqID() != seq+1 {
		t.Errorf("seqid %d after %d: the slot and the token are not one update", h.SeqID(), seq)
	}
	if k := h.Keyslots[1]; k == nil || k.KDF.Type != "pbkdf2" || k.KDF.Hash != "sha512" || k.KDF.Iterations != 1000 {
		t.Fatalf("key slot 1: %+v; want systemd's pbkdf2 sha512 1000", k)
	}
	tok, js := tpm2Token(t, img, 0)
	pass, err := (&tpm2.Unsealer{Device: tp.Device()}).Unseal(context.Background(), js)
	if err != nil {
		t.Fatalf("unseal: %v", err)
	}
	pf := filepath.Join(dir, "tpm2.pass")
	if err := os.WriteFile(pf, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	sh(t, cs, "open", "--test-passphrase", "--key-slot", "1", "--key-file", pf, img)
	if len(pass) != 44 {
		t.Errorf("passphrase of %d bytes, want base64 of 32", len(pass))
	}
	if d, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); d != want {
		t.Errorf("dump differs from luksDump:\n%s\nwant:\n%s", d, want)
	}

	// A token sealed to other PCR values, in its own copy.
	other := img + ".other"
	copyFile(t, ref, other)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", "7:sha256="+strings.Repeat("11", 32), other)

	root := swtpm.Systemd257(t)
	sd := func(env []string, args ...string) (string, error) {
		c := swtpm.Command(root, "systemd-cryptenroll", args...)
		c.Env = append(os.Environ(), env...)
		o, err := c.CombinedOutput()
		return string(o), err
	}
	// systemd-cryptenroll 257's own offline enrollment of the same image.
	if o, err := sd(nil, "--unlock-key-file="+key, "--tpm2-device-key="+srk, "--tpm2-pcrs="+pcrs, ref); err != nil {
		t.Fatalf("systemd-cryptenroll --tpm2-device-key: %v\n%s", err, o)
	}
	sdtok, sdjs := tpm2Token(t, ref, 0)
	for k := range sdtok {
		if _, ok := tok[k]; !ok {
			t.Errorf("field %s missing: ours %s\nsystemd's %s", k, js, sdjs)
		}
	}
	for _, k := range []string{"type", "keyslots", "tpm2-pcrs", "tpm2-pcr-bank", "tpm2-primary-alg", "tpm2-policy-hash", "tpm2_srk"} {
		if !reflectEqual(tok[k], sdtok[k]) {
			t.Errorf("%s: %v, systemd's %v", k, tok[k], sdtok[k])
		}
	}
	if len(tok) != len(sdtok) || len(tok["tpm2-blob"].(string)) != len(sdtok["tpm2-blob"].(string)) {
		t.Errorf("token %s\nsystemd's %s", js, sdjs)
	}
	a, b := *readLUKS2(t, ref).Keyslots[1], *h.Keyslots[1]
	a.KDF.Salt, b.KDF.Salt = nil, nil
	if !reflectEqual(a.KDF, b.KDF) || !reflectEqual(a.AF, b.AF) {
		t.Errorf("key slot 1 %+v, systemd's %+v", b, a)
	}

	// With a PIN and a signed PCR policy (an ECC key): the same fields and
	// policy hash as systemd's, and dump still matches luksDump.
	pin := writeFile(t, filepath.Join(dir, "pin"), "4711")
	pk := filepath.Join(dir, "pcr.pem")
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(&ek.PublicKey)
	os.WriteFile(pk, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644)
	signed, sdSigned := img+".signed", img+".sdsigned"
	copyFile(t, ref+".orig", signed)
	copyFile(t, ref+".orig", sdSigned)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", pcrs, "--tpm2-with-pin", "--tpm2-pin-file", pin, "--tpm2-public-key", pk, signed)
	if o, err := sd([]string{"NEWPIN=4711"}, "--unlock-key-file="+key, "--tpm2-device-key="+srk, "--tpm2-pcrs="+pcrs, "--tpm2-with-pin=yes", "--tpm2-public-key="+pk, sdSigned); err != nil {
		t.Fatalf("systemd-cryptenroll --tpm2-public-key: %v\n%s", err, o)
	}
	tok2, js2 := tpm2Token(t, signed, 0)
	sdtok2, sdjs2 := tpm2Token(t, sdSigned, 0)
	for _, k := range []string{"tpm2-pcrs", "tpm2-pcr-bank", "tpm2-primary-alg", "tpm2-policy-hash", "tpm2-pin", "tpm2_pubkey", "tpm2_pubkey_pcrs", "tpm2_srk"} {
		if !reflectEqual(tok2[k], sdtok2[k]) {
			t.Errorf("%s: %v, systemd's %v", k, tok2[k], sdtok2[k])
		}
	}
	if len(tok2) != len(sdtok2) {
		t.Errorf("token %s\nsystemd's %s", js2, sdjs2)
	}
	if d, want := mustRun(t, "dump", signed).stdout, sh(t, cs, "luksDump", signed); d != want {
		t.Errorf("dump differs from luksDump:\n%s\nwant:\n%s", d, want)
	}

	// systemd 257 unseals cryptimg's token with the swtpm and adds a
	// recovery key (its KDF is cheap, a password's would be benchmarked).
	mustRun(t, "enroll", "--wipe-slot", "password", img)
	o, err := sd(nil, "--unlock-tpm2-device="+tp.Device(), "--recovery-key", img)
	if err != nil {
		t.Fatalf("systemd-cryptenroll --unlock-tpm2-device: %v\n%s", err, o)
	}
	rk := regexp.MustCompile(`[cbdefghijklnrtuv]{8}(-[cbdefghijklnrtuv]{8}){7}`).FindString(o)
	sh(t, cs, "open", "--test-passphrase", "--key-file", writeFile(t, filepath.Join(dir, "rk"), rk), img)
	if o, err := sd(nil, "--unlock-tpm2-device="+tp.Device(), "--recovery-key", other); err == nil || !strings.Contains(o, "Failed to unseal secret using TPM2: Operation not permitted") {
		t.Errorf("systemd and a token sealed to other PCR values: %v\n%s", err, o)
	}
	tp2 := swtpm.Start(t)
	tp2.MakeSRK(t)
	// TPM2_Import under another SRK: TPM_RC_INTEGRITY.
	if o, err := sd(nil, "--unlock-tpm2-device="+tp2.Device(), "--recovery-key", img); err == nil || !strings.Contains(o, "0x000003df") {
		t.Errorf("systemd and the token under another TPM: %v\n%s", err, o)
	}
}

// TestTPM2TokenUnlock: the commands that unlock take the key from a
// systemd-tpm2 token through the TPM --tpm2-device names (swtpm here),
// with the PIN from --tpm2-pin-file; without --tpm2-device, with the
// wrong PIN, or with other PCR values sealed to, --token-only exits 2 and
// says why.
func TestTPM2TokenUnlock(t *testing.T) {
	tp := swtpm.Start(t)
	srk := tp.MakeSRK(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	pin := writeFile(t, filepath.Join(dir, "pin"), "1234")
	bad := writeFile(t, filepath.Join(dir, "bad"), "4321")
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	other := img + ".other"
	copyFile(t, img, other)
	zero := "15:sha256=" + strings.Repeat("00", 32)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", zero, "--tpm2-with-pin", "--tpm2-pin-file", pin, img)
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", "15:sha256="+strings.Repeat("11", 32), other)

	dev := tp.Device()
	mustRun(t, "test-key", "--token-only", "--tpm2-device", dev, "--tpm2-pin-file", pin, img)
	want := mustRun(t, "decrypt", "-d", key, img, "-").stdout
	if got := mustRun(t, "decrypt", "--token-only", "--tpm2-device", dev, "--tpm2-pin-file", pin, img, "-").stdout; got != want {
		t.Errorf("decrypt --token-only gave %d bytes unlike decrypt -d", len(got))
	}
	for _, c := range []struct {
		img  string
		args []string
		why  string
	}{
		{img, nil, "TPM"},
		{img, []string{"--tpm2-device", dev, "--tpm2-pin-file", bad}, "PIN"},
		{other, []string{"--tpm2-device", dev}, "PCR"},
	} {
		r := cryptimg(t, "", append(append([]string{"test-key", "--token-only"}, c.args...), c.img)...)
		if r.code != 2 || !strings.Contains(r.stderr, c.why) {
			t.Errorf("test-key --token-only %v: exit %d, %q; want 2 naming the %s", c.args, r.code, r.stderr, c.why)
		}
	}
	// Without --token-only the key file still unlocks when the token cannot.
	mustRun(t, "test-key", "-d", key, other)
}

// TestTPM2TokenOpen: open --token-only mounts an image whose key comes
// from its systemd-tpm2 token alone, through --tpm2-device; the mounted
// plaintext is decrypt's.
func TestTPM2TokenOpen(t *testing.T) {
	requireFUSE(t)
	tp := swtpm.Start(t)
	srk := tp.MakeSRK(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	mustRun(t, "enroll", "-d", key, "--tpm2-device-key", srk, "--tpm2-pcrs", "15:sha256="+strings.Repeat("00", 32), img)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, ok := findMount(mnt); ok {
			lazyUnmount(mnt)
		}
	})
	out, err := exec.Command(binary(t), "open", "--background", "--read-only", "--token-only", "--tpm2-device", tp.Device(), img, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("open --token-only: %v\n%s", err, out)
	}
	ents, _ := os.ReadDir(mnt)
	if len(ents) != 1 {
		t.Fatalf("the mount holds %d files, want the one image", len(ents))
	}
	got, err := os.ReadFile(filepath.Join(mnt, ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	mustRun(t, "close", mnt)
	if want := mustRun(t, "decrypt", "-d", key, img, "-").stdout; string(got) != want {
		t.Errorf("the mount shows %d bytes unlike decrypt's %d", len(got), len(want))
	}
}
