//go:build unix

package clevis

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/vectors/peer"
)

var client = &http.Client{Timeout: 10 * time.Second}

// clevisRun runs the real clevis with stdin and returns its stdout.
func clevisRun(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(peer.Path(t, "clevis"), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(err.Error() + ": " + stderr.String())
	}
	return string(out), nil
}

func tangPin(t *testing.T, s *peer.TangServer) *Tang {
	t.Helper()
	p, err := NewTang(s.URL, s.Adv, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A tang JWE cryptimg makes offline is what clevis decrypt opens, and its
// protected header has clevis-encrypt-tang's members; a JWE clevis encrypt
// makes is what cryptimg's Decrypt opens; with the server stopped, Decrypt
// says the unlocker is unavailable.
func TestTangInterop(t *testing.T) {
	s := peer.Tang(t)
	secret := "pass-" + rand.Text()
	jwe, err := tangPin(t, s).Encrypt([]byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]json.RawMessage
	if err := protectedHeader(jwe, &h); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
	if want := []string{"alg", "clevis", "enc", "epk", "kid"}; !slices.Equal(got, want) {
		t.Errorf("protected header members %v, want %v", got, want)
	}
	if pt, err := clevisRun(t, jwe, "decrypt"); err != nil || pt != secret {
		t.Fatalf("clevis decrypt of cryptimg's JWE: %q, %v", pt, err)
	}
	pt, err := Decrypt(context.Background(), client, jwe)
	if err != nil || string(pt) != secret {
		t.Fatalf("Decrypt of cryptimg's JWE: %q, %v", pt, err)
	}
	adv := filepath.Join(t.TempDir(), "adv.jws")
	os.WriteFile(adv, s.Adv, 0o600)
	theirs, err := clevisRun(t, secret, "encrypt", "tang", `{"url":"`+s.URL+`","adv":"`+adv+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err = Decrypt(context.Background(), client, theirs); err != nil || string(pt) != secret {
		t.Fatalf("Decrypt of clevis's JWE: %q, %v", pt, err)
	}
	// The same header as clevis-encrypt-tang's, but for the ephemeral key:
	// the members, kid, clevis.pin, clevis.tang.url and the advertised
	// keys.
	var hc map[string]json.RawMessage
	if err := protectedHeader(theirs, &hc); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"alg", "enc", "kid", "clevis"} {
		a, b := string(h[m]), string(hc[m])
		if m == "clevis" {
			var ca, cb any
			json.Unmarshal(h[m], &ca)
			json.Unmarshal(hc[m], &cb)
			ja, _ := json.Marshal(ca)
			jb, _ := json.Marshal(cb)
			a, b = string(ja), string(jb)
		}
		if a != b {
			t.Errorf("protected %s: %s, clevis's %s", m, a, b)
		}
	}
	s.Stop()
	if _, err = Decrypt(context.Background(), client, theirs); !errors.Is(err, token.ErrUnavailable) {
		t.Fatalf("Decrypt with the server down: %v, want token.ErrUnavailable", err)
	}
}

// sss over two tang servers: cryptimg's JWE with t=2 opens with clevis
// decrypt and with Decrypt; clevis's with t=1 opens with Decrypt with one
// server down, and cryptimg's t=2 one then does not (unavailable).
func TestSSSInterop(t *testing.T) {
	s1, s2 := peer.Tang(t), peer.Tang(t)
	secret := "pass-" + rand.Text()
	both := []Pin{tangPin(t, s1), tangPin(t, s2)}
	p2, err := NewSSS(2, both)
	if err != nil {
		t.Fatal(err)
	}
	jwe2, err := p2.Encrypt([]byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := clevisRun(t, jwe2, "decrypt"); err != nil || pt != secret {
		t.Fatalf("clevis decrypt of cryptimg's sss JWE: %q, %v", pt, err)
	}
	if pt, err := Decrypt(context.Background(), client, jwe2); err != nil || string(pt) != secret {
		t.Fatalf("Decrypt of cryptimg's sss JWE: %q, %v", pt, err)
	}
	dir := t.TempDir()
	a1, a2 := filepath.Join(dir, "a1.jws"), filepath.Join(dir, "a2.jws")
	os.WriteFile(a1, s1.Adv, 0o600)
	os.WriteFile(a2, s2.Adv, 0o600)
	cfg := `{"t":1,"pins":{"tang":[{"url":"` + s1.URL + `","adv":"` + a1 + `"},{"url":"` + s2.URL + `","adv":"` + a2 + `"}]}}`
	theirs, err := clevisRun(t, secret, "encrypt", "sss", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s2.Stop()
	if pt, err := Decrypt(context.Background(), client, theirs); err != nil || string(pt) != secret {
		t.Fatalf("Decrypt of clevis's sss t=1 JWE, one server down: %q, %v", pt, err)
	}
	if _, err := Decrypt(context.Background(), client, jwe2); !errors.Is(err, token.ErrUnavailable) {
		t.Fatalf("Decrypt of sss t=2 with one server down: %v, want token.ErrUnavailable", err)
	}
	// The config parser makes the same pin from clevis's config.
	pin, err := ParseConfig([]byte(cfg), os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if sp, ok := pin.(*SSS); !ok || sp.t != 1 || len(sp.pins) != 2 {
		t.Fatalf("ParseConfig: %#v", pin)
	}
}
