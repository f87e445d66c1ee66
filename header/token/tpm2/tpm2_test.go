package tpm2

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/vectors/swtpm"
	tpm "github.com/google/go-tpm/tpm2"
)

var zero32 = strings.Repeat("00", 32)

// The policy digests systemd 252 and 257 wrote for PCR 7 =
// SHA256(0^32 || SHA256("secureboot-db")), without and with a PIN.
func TestPolicyDigest(t *testing.T) {
	pcrs, err := ParsePCRs("secure-boot-policy:sha256=0x93648624d9cb4e2a5052d30f675a775f21b22887e8d1523db3faee99cef92950")
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(policyDigest(nil, tpm.TPMAlgSHA256, pcrs, false)); got != "0fa8c9ad9a4839da43986844204334844277504897723022307ffa51fa66bdb2" {
		t.Errorf("PCR 7: %s", got)
	}
	if got := hex.EncodeToString(policyDigest(nil, tpm.TPMAlgSHA256, pcrs, true)); got != "df5d6a576d83c2a57ee5bd1ca20c477546e9b01e31542beff2de6131bbc8bd47" {
		t.Errorf("PCR 7 and PIN: %s", got)
	}
}

func TestParsePCRs(t *testing.T) {
	v, err := ParsePCRs("11:sha256=" + strings.Repeat("11", 32) + "+7:sha256=" + zero32)
	if err != nil || len(v) != 2 || v[0].Index != 7 || v[1].Index != 11 || v[1].Value[0] != 0x11 {
		t.Fatalf("%+v %v", v, err)
	}
	if v, err := ParsePCRs(""); err != nil || len(v) != 0 {
		t.Fatalf("empty: %v %v", v, err)
	}
	for _, bad := range []string{
		"7",                   // no value: offline needs it
		"7:sha256",            // same
		"24:sha256=" + zero32, // out of range
		"7:md5=" + zero32,     // no such bank
		"7:sha256=00",         // wrong size
		"7:sha1=" + strings.Repeat("00", 20) + ",8:sha256=" + zero32, // two banks
		"7:sha256=" + zero32 + "+7:sha256=" + zero32,                 // twice
	} {
		if _, err := ParsePCRs(bad); !errors.Is(err, ErrPCRs) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// systemd's ECC SRK TPM2B_PUBLIC layout (92 bytes).
func TestParseParent(t *testing.T) {
	tmpl := srkTemplate(tpm.TPMAlgECC)
	tmpl.Unique = tpm.NewTPMUPublicID(tpm.TPMAlgECC, &tpm.TPMSECCPoint{
		X: tpm.TPM2BECCParameter{Buffer: bytes.Repeat([]byte{1}, 32)},
		Y: tpm.TPM2BECCParameter{Buffer: bytes.Repeat([]byte{2}, 32)},
	})
	b := tpm.Marshal(tpm.New2B(tmpl))
	if want := "005a0023000b000304720000000600800043001000030010"; len(b) != 92 || hex.EncodeToString(b[:24]) != want {
		t.Fatalf("SRK template marshals as %x", b)
	}
	// The point is not on the curve: refused.
	if _, err := ParseParent(b); !errors.Is(err, ErrParent) {
		t.Errorf("off-curve point: %v", err)
	}
	if _, err := ParseParent(append(b, 0)); !errors.Is(err, ErrParent) {
		t.Errorf("trailing byte: %v", err)
	}
}

// oracle runs tpm2-tools' import, load, policy session and unseal on a blob,
// as the TPM's owner would, and returns the secret or the error output.
func oracle(t *testing.T, s *swtpm.TPM, js []byte, pcrList string, auth []byte) ([]byte, error) {
	t.Helper()
	var tok tokenJSON
	if err := json.Unmarshal(js, &tok); err != nil {
		t.Fatal(err)
	}
	blob, _ := base64.StdEncoding.DecodeString(tok.Blob)
	var parts [3][]byte
	for i := range parts {
		n := 2 + (int(blob[0])<<8 | int(blob[1]))
		parts[i], blob = blob[:n], blob[n:]
	}
	d := t.TempDir()
	f := func(name string, b []byte) string {
		p := filepath.Join(d, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	priv, pub, seed := f("dup", parts[0]), f("pub", parts[1]), f("seed", parts[2])
	s.Tools(t, "tpm2_import", "-C", "0x81000001", "-u", pub, "-i", priv, "-s", seed, "-r", f("imported", nil))
	s.Tools(t, "tpm2_load", "-C", "0x81000001", "-u", pub, "-r", filepath.Join(d, "imported"), "-c", f("obj.ctx", nil))
	defer s.ToolsErr("tpm2_flushcontext", "-t")
	defer s.ToolsErr("tpm2_flushcontext", "-s")
	sess := f("s.ctx", nil)
	s.Tools(t, "tpm2_startauthsession", "--policy-session", "-S", sess)
	s.Tools(t, "tpm2_policypcr", "-S", sess, "-l", pcrList)
	pass := "session:" + sess
	if auth != nil {
		s.Tools(t, "tpm2_policyauthvalue", "-S", sess)
		pass += "+hex:" + hex.EncodeToString(auth)
	}
	out, err := s.ToolsErr("tpm2_unseal", "-c", filepath.Join(d, "obj.ctx"), "-p", pass)
	if err != nil {
		return nil, errors.New(string(out))
	}
	return out, nil
}

// A token sealed offline to swtpm's SRK: tpm2-tools imports, loads and
// unseals the secret whose base64 is the passphrase, and so does the
// Unsealer; other PCR values, a wrong PIN and another TPM are refused.
func TestSealSWTPM(t *testing.T) {
	s := swtpm.Start(t)
	srk := s.MakeSRK(t)
	raw, err := os.ReadFile(srk)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := ParseParent(raw)
	if err != nil {
		t.Fatal(err)
	}
	// The SRK's PEM form gives the same public area.
	pem2 := pemOf(t, parent)
	if p2, err := ParseParent(pem2); err != nil || !bytes.Equal(tpm.Marshal(tpm.New2B(*p2)), raw) {
		t.Fatalf("SRK from PEM differs: %v", err)
	}
	pcrs, _ := ParsePCRs("15:sha256=" + zero32 + "+7:sha256=" + zero32)
	sealed, err := Seal(nil, &Params{Parent: parent, PCRs: pcrs})
	if err != nil {
		t.Fatal(err)
	}
	js := sealed.JSON(3)
	secret, err := oracle(t, s, js, "sha256:7,15", nil)
	if err != nil {
		t.Fatalf("tpm2-tools: %v", err)
	}
	if got := base64.StdEncoding.EncodeToString(secret); got != string(sealed.Passphrase) || len(secret) != 32 {
		t.Fatalf("tpm2_unseal gave %x, passphrase is %s", secret, sealed.Passphrase)
	}
	u := &Unsealer{Device: s.Device()}
	pass, err := u.Unseal(context.Background(), js)
	if err != nil || !bytes.Equal(pass, sealed.Passphrase) {
		t.Fatalf("Unsealer: %q, %v", pass, err)
	}

	// Sealed to other PCR values: the TPM refuses, and so does the
	// Unsealer before unsealing.
	other, _ := ParsePCRs("7:sha256=" + strings.Repeat("11", 32))
	sealed2, err := Seal(nil, &Params{Parent: parent, PCRs: other})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oracle(t, s, sealed2.JSON(1), "sha256:7", nil); err == nil {
		t.Fatal("tpm2-tools unsealed with other PCR values")
	}
	if _, err := u.Unseal(context.Background(), sealed2.JSON(1)); !errors.Is(err, ErrPolicy) {
		t.Fatalf("other PCR values: %v", err)
	}

	// With a PIN: the right one unseals (tpm2-tools with the derived
	// authValue, the Unsealer from the PIN), a wrong one does not.
	withPIN, err := Seal(nil, &Params{Parent: parent, PCRs: pcrs, PIN: []byte("4711")})
	if err != nil {
		t.Fatal(err)
	}
	js = withPIN.JSON(2)
	var tok tokenJSON
	json.Unmarshal(js, &tok)
	if !tok.PIN || len(tok.Salt) != 32 {
		t.Fatalf("PIN token: %s", js)
	}
	if secret, err := oracle(t, s, js, "sha256:7,15", pinAuth([]byte("4711"), tok.Salt)); err != nil ||
		base64.StdEncoding.EncodeToString(secret) != string(withPIN.Passphrase) {
		t.Fatalf("tpm2-tools with PIN: %v", err)
	}
	pin := func(p string) func() ([]byte, error) { return func() ([]byte, error) { return []byte(p), nil } }
	if pass, err := (&Unsealer{Device: s.Device(), PIN: pin("4711")}).Unseal(context.Background(), js); err != nil || !bytes.Equal(pass, withPIN.Passphrase) {
		t.Fatalf("Unsealer with PIN: %v", err)
	}
	if _, err := (&Unsealer{Device: s.Device(), PIN: pin("4712")}).Unseal(context.Background(), js); err == nil {
		t.Fatal("wrong PIN unsealed")
	}
	if _, err := (&Unsealer{Device: s.Device()}).Unseal(context.Background(), js); !errors.Is(err, token.ErrUnavailable) {
		t.Fatalf("no PIN: %v", err)
	}

	// An RSA-2048 storage key at another handle (--tpm2-seal-key-handle).
	rsaPub, err := os.ReadFile(s.MakeKey(t, "rsa2048:aes128cfb", "0x81000002"))
	if err != nil {
		t.Fatal(err)
	}
	rsaParent, err := ParseParent(rsaPub)
	if err != nil {
		t.Fatal(err)
	}
	rsaSealed, err := Seal(nil, &Params{Parent: rsaParent, Handle: 0x81000002, PCRs: pcrs})
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(rsaSealed.JSON(1), &tok)
	if tok.PrimaryAlg != "rsa" {
		t.Errorf("RSA parent: tpm2-primary-alg %q", tok.PrimaryAlg)
	}
	if pass, err := u.Unseal(context.Background(), rsaSealed.JSON(1)); err != nil || !bytes.Equal(pass, rsaSealed.Passphrase) {
		t.Fatalf("RSA parent: %v", err)
	}

	// Another TPM, with its own SRK: refused.
	s2 := swtpm.Start(t)
	s2.MakeSRK(t)
	if _, err := (&Unsealer{Device: s2.Device()}).Unseal(context.Background(), sealed.JSON(3)); !errors.Is(err, ErrWrongTPM) {
		t.Fatalf("another TPM: %v", err)
	}
	// No TPM given: unavailable, not refused.
	if _, err := (&Unsealer{}).Unseal(context.Background(), sealed.JSON(3)); !errors.Is(err, token.ErrUnavailable) {
		t.Fatalf("no device: %v", err)
	}
}

func pemOf(t *testing.T, p *tpm.TPMTPublic) []byte {
	k, err := tpm.Pub(*p)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(k.(*ecdsa.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Open speaks the simulator protocol on swtpm's Unix socket, named by path
// or as tpm2-tss's swtpm:path=.
func TestOpenSocket(t *testing.T) {
	sock := swtpm.StartSocket(t)
	for _, dev := range []string{sock, "swtpm:path=" + sock} {
		tp, err := Open(context.Background(), dev)
		if err != nil {
			t.Fatalf("%s: %v", dev, err)
		}
		r, err := tpm.GetRandom{BytesRequested: 8}.Execute(tp)
		tp.Close()
		if err != nil || len(r.RandomBytes.Buffer) != 8 {
			t.Fatalf("%s: GetRandom: %v", dev, err)
		}
	}
	if _, err := Open(context.Background(), "tcp:host=x"); err == nil {
		t.Error("unknown driver accepted")
	}
}

// A PIN whose authValue holds a zero byte before its end unseals: the
// HMAC key drops trailing zero bytes only (go-tpm's own policy sessions cut
// it at the first zero, and such PINs, one in eight, failed).
func TestUnsealPINZeroByte(t *testing.T) {
	s := swtpm.Start(t)
	raw, err := os.ReadFile(s.MakeSRK(t))
	if err != nil {
		t.Fatal(err)
	}
	parent, err := ParseParent(raw)
	if err != nil {
		t.Fatal(err)
	}
	pin := []byte("4711")
	salt := make([]byte, 32)
	for i := 0; ; i++ {
		binary.BigEndian.PutUint32(salt, uint32(i))
		a := pinAuth(pin, salt)
		if z := bytes.IndexByte(a, 0); z >= 0 && z < len(a)-1 {
			break
		}
	}
	pcrs, _ := ParsePCRs("15:sha256=" + zero32)
	sealed, err := Seal(io.MultiReader(bytes.NewReader(salt), rand.Reader), &Params{Parent: parent, PCRs: pcrs, PIN: pin})
	if err != nil {
		t.Fatal(err)
	}
	js := sealed.JSON(1)
	var tok tokenJSON
	if json.Unmarshal(js, &tok) != nil || !bytes.Equal(tok.Salt, salt) {
		t.Fatalf("the token's salt is not the one given: %s", js)
	}
	u := &Unsealer{Device: s.Device(), PIN: func() ([]byte, error) { return bytes.Clone(pin), nil }}
	if pass, err := u.Unseal(context.Background(), js); err != nil || !bytes.Equal(pass, sealed.Passphrase) {
		t.Fatalf("authValue %x: %v", pinAuth(pin, salt), err)
	}
}
