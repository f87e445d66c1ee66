//go:build unix

package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// clevisLuksPass runs clevis luks pass for a slot and returns the
// passphrase it prints, or the error.
func clevisLuksPass(t *testing.T, img string, slot string) (string, error) {
	t.Helper()
	out, err := exec.Command(requireTool(t, "clevis"), "luks", "pass", "-d", img, "-s", slot).Output()
	return string(out), err
}

// TestEnrollTang: enroll --tang-adv/--tang-url from a saved advertisement
// adds key slot 1 with clevis's KDF (pbkdf2, the first slot's hash sha256,
// 1000 iterations) and the token {"type":"clevis","keyslots":["1"],
// "jwe":{flattened}} in one update; the real clevis luks pass gets the
// passphrase from it through the tang server, and cryptsetup opens slot 1
// with it; dump prints what luksDump prints. test-key and decrypt
// --token-only unlock through the server; with the server stopped
// --token-only exits 2 and says why, and without it the key file still
// unlocks.
func TestEnrollTang(t *testing.T) {
	cs := requireTool(t, "cryptsetup")
	requireTool(t, "clevis")
	s := peer.Tang(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	adv := writeFile(t, filepath.Join(dir, "adv.jws"), string(s.Adv))
	seq := readLUKS2(t, img).SeqID()
	r := mustRun(t, "enroll", "-d", key, "--tang-adv", adv, "--tang-url", s.URL, img)
	if !strings.Contains(r.stderr, "clevis tang binding enrolled in key slot 1, token 0") {
		t.Errorf("stderr: %s", r.stderr)
	}
	h := readLUKS2(t, img)
	if h.SeqID() != seq+1 {
		t.Errorf("seqid %d after %d: the slot and the token are not one update", h.SeqID(), seq)
	}
	k := h.Keyslots[1]
	if k == nil || k.KDF.Type != "pbkdf2" || k.KDF.Hash != "sha256" || k.KDF.Iterations != 1000 || k.AF.Hash != "sha256" {
		t.Fatalf("key slot 1: %+v; want clevis's pbkdf2 sha256 1000", k)
	}
	js, _ := h.TokenJSON(0)
	var tok struct {
		Type     string                     `json:"type"`
		Keyslots []string                   `json:"keyslots"`
		JWE      map[string]json.RawMessage `json:"jwe"`
	}
	if err := json.Unmarshal(js, &tok); err != nil || tok.Type != "clevis" || !slices.Equal(tok.Keyslots, []string{"1"}) ||
		!slices.Equal(slices.Sorted(mapKeys(tok.JWE)), []string{"ciphertext", "encrypted_key", "iv", "protected", "tag"}) ||
		string(tok.JWE["encrypted_key"]) != `""` {
		t.Fatalf("token 0: %s", js)
	}
	pass, err := clevisLuksPass(t, img, "1")
	if err != nil || len(pass) != 54 {
		t.Fatalf("clevis luks pass: %q, %v", pass, err)
	}
	pf := writeFile(t, filepath.Join(dir, "pass"), pass)
	sh(t, cs, "open", "--test-passphrase", "--key-slot", "1", "--key-file", pf, img)
	if list := sh(t, requireTool(t, "clevis"), "luks", "list", "-d", img); !strings.Contains(list, `1: tang '{"url":"`+s.URL+`"}'`) {
		t.Errorf("clevis luks list: %s", list)
	}
	if d, want := mustRun(t, "dump", img).stdout, sh(t, cs, "luksDump", img); d != want {
		t.Errorf("dump differs from luksDump:\n%s\nwant:\n%s", d, want)
	}

	if got := mustRun(t, "test-key", "--token-only", img).stderr; !strings.Contains(got, "key slot 1") {
		t.Errorf("test-key --token-only: %s", got)
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "--token-only", img, out)
	sameContent(t, out, img+".plain")
	inPlace := filepath.Join(dir, "inplace")
	copyFile(t, img, inPlace)
	mustRun(t, "decrypt", "--in-place", "--token-only", inPlace)
	sameContent(t, inPlace, img+".plain")

	s.Stop()
	r = cryptimg(t, "", "test-key", "--token-only", img)
	if r.code != exitNoKey || !strings.Contains(r.stderr, "token 0 (clevis): token unlocker not available: tang server "+s.URL) {
		t.Errorf("server stopped: test-key --token-only exit %d, stderr %s", r.code, r.stderr)
	}
	if got := mustRun(t, "test-key", "-d", key, img).stderr; !strings.Contains(got, "key slot 0") {
		t.Errorf("server stopped, key file: %s", got)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestClevisBindUnlocks: an image bound by the real clevis luks bind to a
// tang server opens with test-key and decrypt --token-only, and add-key,
// clone and reencrypt --token-only take the key from the token.
func TestClevisBindUnlocks(t *testing.T) {
	clevis := requireTool(t, "clevis")
	s := peer.Tang(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	sh(t, clevis, "luks", "bind", "-y", "-d", img, "-k", key, "tang", `{"url":"`+s.URL+`"}`)
	// clevis's own slot and token have the form enroll writes
	// (TestEnrollTang checks enroll's against the same values).
	h := readLUKS2(t, img)
	if k := h.Keyslots[1]; k == nil || k.KDF.Type != "pbkdf2" || k.KDF.Hash != "sha256" || k.KDF.Iterations != 1000 || k.AF.Hash != "sha256" {
		t.Errorf("clevis's key slot 1: %+v", k)
	}
	js, _ := h.TokenJSON(0)
	var tok struct {
		Type     string                     `json:"type"`
		Keyslots []string                   `json:"keyslots"`
		JWE      map[string]json.RawMessage `json:"jwe"`
	}
	if err := json.Unmarshal(js, &tok); err != nil || tok.Type != "clevis" || !slices.Equal(tok.Keyslots, []string{"1"}) ||
		!slices.Equal(slices.Sorted(mapKeys(tok.JWE)), []string{"ciphertext", "encrypted_key", "iv", "protected", "tag"}) {
		t.Errorf("clevis's token: %s", js)
	}
	if got := mustRun(t, "test-key", "--token-only", img).stderr; !strings.Contains(got, "key slot 1") {
		t.Errorf("test-key --token-only: %s", got)
	}
	out := filepath.Join(dir, "out")
	mustRun(t, "decrypt", "--token-only", "--token-id", "0", img, out)
	sameContent(t, out, img+".plain")
	// Without a key file or a terminal, the token is tried first, as
	// cryptsetup tries tokens before asking.
	if got := mustRun(t, "test-key", img).stderr; !strings.Contains(got, "key slot 1") {
		t.Errorf("test-key without flags: %s", got)
	}
	// add-key and reencrypt take the existing key from the token; the
	// reencrypted image keeps slot 1 and its token, which clevis still
	// opens.
	k2 := writeFile(t, filepath.Join(dir, "k2"), "second")
	mustRun(t, "add-key", "--token-only", "--pbkdf", "pbkdf2", fastIter, "--new-key-file", k2, img)
	mustRun(t, "test-key", "-d", k2, "-S", "2", img)
	cl := filepath.Join(dir, "clone")
	mustRun(t, "clone", "--token-only", "--new-key-file", k2, "--pbkdf", "pbkdf2", fastIter, img, cl)
	mustRun(t, "test-key", "-d", k2, "-S", "0", cl)
	mustRun(t, "reencrypt", "--token-only", "-q", "--pbkdf", "pbkdf2", fastIter, img)
	if h := readLUKS2(t, img); !h.SlotActive(1) || h.SlotActive(0) || h.Tokens[0] == nil || h.Tokens[0].Type != "clevis" {
		t.Fatalf("after reencrypt: slot 1 %v, slot 0 %v, tokens %v", h.SlotActive(1), h.SlotActive(0), h.Tokens)
	}
	if _, err := clevisLuksPass(t, img, "1"); err != nil {
		t.Errorf("clevis luks pass after reencrypt: %v", err)
	}
	mustRun(t, "decrypt", "--token-only", img, out+"2")
	sameContent(t, out+"2", img+".plain")
}

// TestEnrollSSS: --clevis-config with sss over two tang servers, t=1 in
// slot 1 and t=2 in slot 2: clevis luks pass opens both while both servers
// run (--json names the slot and token); with one stopped, the t=1 token still unlocks (cryptimg and clevis)
// and the t=2 token does not: --token-only exits 2.
func TestEnrollSSS(t *testing.T) {
	s1, s2 := peer.Tang(t), peer.Tang(t)
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := luks2Small(t, dir, "img.luks2", key, "", "luks2")
	a1 := writeFile(t, filepath.Join(dir, "a1.jws"), string(s1.Adv))
	a2 := writeFile(t, filepath.Join(dir, "a2.jws"), string(s2.Adv))
	cfg := func(th string) string {
		return `{"t":` + th + `,"pins":{"tang":[{"url":"` + s1.URL + `","adv":"` + a1 + `"},{"url":"` + s2.URL + `","adv":"` + a2 + `"}]}}`
	}
	mustRun(t, "enroll", "-d", key, "--clevis-config", cfg("1"), img)
	var js map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "enroll", "-d", key, "--clevis-config", cfg("2"), "--json", img).stdout), &js); err != nil ||
		js["key_slot"] != 2.0 || js["token_id"] != 1.0 || js["token_type"] != "clevis" {
		t.Errorf("enroll --json: %v, %v", js, err)
	}
	for _, slot := range []string{"1", "2"} {
		if pass, err := clevisLuksPass(t, img, slot); err != nil || len(pass) != 54 {
			t.Fatalf("clevis luks pass -s %s: %q, %v", slot, pass, err)
		}
	}
	s2.Stop()
	if got := mustRun(t, "test-key", "--token-only", "--token-id", "0", img).stderr; !strings.Contains(got, "key slot 1") {
		t.Errorf("t=1, one server stopped: %s", got)
	}
	if _, err := clevisLuksPass(t, img, "1"); err != nil {
		t.Errorf("clevis luks pass of t=1 with one server stopped: %v", err)
	}
	r := cryptimg(t, "", "test-key", "--token-only", "--token-id", "1", img)
	if r.code != exitNoKey || !strings.Contains(r.stderr, "sss: 1 of the 2 pins needed unsealed") {
		t.Errorf("t=2, one server stopped: exit %d, stderr %s", r.code, r.stderr)
	}
	// A config with a pin cryptimg does not make is refused, the image
	// unchanged.
	before := fileSHA(t, img)
	r = cryptimg(t, "", "enroll", "-d", key, "--clevis-config", `{"t":1,"pins":{"tpm2":{}}}`, img)
	if r.code != exitFailure || !strings.Contains(r.stderr, `pin "tpm2" is not supported`) || fileSHA(t, img) != before {
		t.Errorf("tpm2 pin: exit %d, stderr %s", r.code, r.stderr)
	}
}
