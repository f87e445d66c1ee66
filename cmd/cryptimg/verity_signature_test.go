package main

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// signerFiles writes key (PKCS#8 PEM) and a self-signed certificate of it
// (PEM) into dir and returns their paths and the certificate's DER.
func signerFiles(t *testing.T, dir, name string, key crypto.Signer) (string, string, []byte) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "verity " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	k, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	kp := writeFile(t, filepath.Join(dir, name+".key"), string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k})))
	cp := writeFile(t, filepath.Join(dir, name+".crt"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return kp, cp, der
}

// TestVeritySignaturePartition: with --private-key and --certificate (RSA
// and ECDSA) verity format --partition adds a 16 KiB root-x86-64-verity-sig
// partition holding systemd's JSON (rootHash, certificateFingerprint,
// signature; NUL-padded to 4096): openssl cms -verify accepts the PKCS#7
// over the hex root hash and refuses it over the hex with a newline, and
// systemd-dissect reports the root partition as "signed". An Ed25519 key
// and a key that is not the certificate's are refused before any write.
func TestVeritySignaturePartition(t *testing.T) {
	openssl := requireTool(t, "openssl")
	dir := t.TempDir()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var disk string
	for i, c := range []struct {
		name string
		key  crypto.Signer
	}{{"rsa", rsaKey}, {"ecdsa", ecKey}} {
		cdir := filepath.Join(dir, c.name)
		os.Mkdir(cdir, 0o700)
		kp, cp, certDER := signerFiles(t, cdir, c.name, c.key)
		disk = verityGPTDisk(t, cdir, 12, "start=2048, size=16384, type="+typeRootX86+"\n")
		if i == 0 {
			sh(t, requireTool(t, "mkfs.ext4"), "-q", "-F", "-E", "offset=1048576", disk, "8M")
		}
		r := mustRun(t, "verity", "format", "--partition", "1", disk, "--json", "--private-key", kp, "--certificate", cp)
		var j verityPartitionJSON
		if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
			t.Fatal(err)
		}
		sig := sfdiskList(t, disk)["3"]
		if j.SigPartition != 3 || sig.Size != 32 || sig.Name != "root-x86-64-verity-sig" || !strings.EqualFold(sig.Type, "41092b05-9fc8-4523-994f-2def0408b176") {
			t.Fatalf("%s: signature partition %+v, json %+v", c.name, sig, j)
		}
		b, _ := os.ReadFile(disk)
		content := b[sig.Start*512 : (sig.Start+sig.Size)*512]
		text := bytes.TrimRight(content, "\x00")
		if len(text) > 4096 || !bytes.Equal(content[len(text):], make([]byte, len(content)-len(text))) {
			t.Errorf("%s: not JSON then NULs", c.name)
		}
		fp := sha256.Sum256(certDER)
		var sj struct{ RootHash, CertificateFingerprint, Signature string }
		if err := json.Unmarshal(text, &sj); err != nil || !bytes.HasPrefix(text, []byte(`{"rootHash":"`+j.RootHash+`","certificateFingerprint":"`+hex.EncodeToString(fp[:])+`","signature":"`)) {
			t.Fatalf("%s: %v: %s", c.name, err, text)
		}
		der, _ := base64.StdEncoding.DecodeString(sj.Signature)
		sigFile := writeFile(t, filepath.Join(cdir, "sig.der"), string(der))
		for content, ok := range map[string]bool{j.RootHash: true, j.RootHash + "\n": false} {
			cf := writeFile(t, filepath.Join(cdir, "content"), content)
			out, err := exec.Command(openssl, "cms", "-verify", "-binary", "-inform", "DER", "-in", sigFile, "-content", cf, "-CAfile", cp, "-purpose", "any", "-out", os.DevNull).CombinedOutput()
			if (err == nil) != ok {
				t.Errorf("%s: openssl cms -verify over %q: %v\n%s", c.name, content, err, out)
			}
		}
	}

	// Refusals, before anything is written.
	before := fileSHA(t, disk)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ekp, ecp, _ := signerFiles(t, dir, "ed25519", edKey)
	rkp, _, _ := signerFiles(t, dir, "other", rsaKey)
	_, ocp, _ := signerFiles(t, dir, "ec2", ecKey)
	for _, args := range [][]string{
		{"--private-key", ekp, "--certificate", ecp},
		{"--private-key", rkp, "--certificate", ocp},
		{"--private-key", rkp},
	} {
		r := cryptimg(t, "", append([]string{"verity", "format", "--partition", "1", "--hash-partition", "2", disk}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "key") {
			t.Errorf("%v: exit %d, %s", args, r.code, r.stderr)
		}
	}
	if fileSHA(t, disk) != before {
		t.Error("a refused signature changed the disk")
	}

	dissect := requireTool(t, "systemd-dissect")
	if os.Geteuid() != 0 {
		peer.Missing(t, "systemd-dissect needs root (loop devices)")
	}
	rsaDisk := filepath.Join(dir, "rsa", "disk.img")
	out, err := exec.Command(dissect, "--json=short", rsaDisk).Output()
	if err != nil {
		t.Fatalf("systemd-dissect: %v\n%s", err, out)
	}
	var d struct{ Mounts []map[string]any }
	if err := json.Unmarshal(out, &d); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]any{}
	for _, m := range d.Mounts {
		got[m["designator"].(string)] = m["verity"]
	}
	if got["root"] != "signed" {
		t.Errorf("systemd-dissect: %s", out)
	}
	if _, ok := got["root-verity-sig"]; !ok {
		t.Errorf("systemd-dissect: no root-verity-sig: %s", out)
	}
}
