package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
)

// fakeUnsealer unseals {"type":"test","keyslots":[...],"pass":P} to P, and
// a token with "down" as the unlocker not being at hand.
type fakeUnsealer struct{}

func (fakeUnsealer) Unseal(_ context.Context, js []byte) ([]byte, error) {
	var t struct {
		Pass string `json:"pass"`
		Down bool   `json:"down"`
	}
	if err := json.Unmarshal(js, &t); err != nil {
		return nil, err
	}
	if t.Down {
		return nil, token.ErrUnavailable
	}
	return []byte(t.Pass), nil
}

func newLUKS2Image(t *testing.T) (*Encrypted, *Key) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "plain.raw")
	os.WriteFile(src, make([]byte, 4096), 0o600)
	sf, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	f, err := os.OpenFile(filepath.Join(dir, "img.luks2"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := EncryptRaw(context.Background(), f, sf, EncryptOptions{
		Header:     header.Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: header.MinIterations},
		Passphrase: testPass,
	}); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Clear)
	return e, k
}

// addToken enrolls pass in a new slot with a token of typ holding extra
// members; the token names the slot, or slots when given.
func addToken(t *testing.T, e *Encrypted, k *Key, typ, pass, extra string) int {
	t.Helper()
	kdf := header.KDF{Type: "pbkdf2", Iterations: header.MinIterations}
	slot, _, err := e.enroll(k, []byte(pass), kdf, func(slot int) ([]byte, error) {
		return []byte(`{"type":"` + typ + `","keyslots":["` + strconv.Itoa(slot) + `"]` + extra + `}`), nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return slot
}

// UnlockToken tries tokens in id order and takes the first that opens its
// slot; a token id, a key slot and the types given narrow the choice; with
// none unlocking, the error gives each token's reason and matches
// ErrNoToken and the reasons' errors.
func TestUnlockToken(t *testing.T) {
	e, k := newLUKS2Image(t)
	ctx := context.Background()
	us := map[string]token.Unsealer{"test": fakeUnsealer{}}
	addToken(t, e, k, "test", "p1", `,"pass":"p1","down":true`) // token 0, slot 1
	s2 := addToken(t, e, k, "test", "p2", `,"pass":"wrong"`)    // token 1, slot 2
	s3 := addToken(t, e, k, "test", "p3", `,"pass":"p3"`)       // token 2, slot 3
	addToken(t, e, k, "other", "p4", `,"pass":"p4"`)            // token 3, slot 4

	tk, err := e.UnlockToken(ctx, -1, -1, us)
	if err != nil || tk.Token != 2 || tk.Slot != s3 || !bytes.Equal(tk.Passphrase, []byte("p3")) {
		t.Fatalf("UnlockToken(any) = %+v, %v; want token 2, slot %d", tk, err, s3)
	}
	tk.Key.Clear()

	_, err = e.UnlockToken(ctx, 0, -1, us)
	if !errors.Is(err, ErrNoToken) || !errors.Is(err, token.ErrUnavailable) || !strings.Contains(err.Error(), "token 0 (test)") {
		t.Errorf("token 0: %v", err)
	}
	_, err = e.UnlockToken(ctx, 1, -1, us)
	if !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "token 1 (test): its passphrase does not open key slot "+strconv.Itoa(s2)) {
		t.Errorf("token 1: %v", err)
	}
	if _, err = e.UnlockToken(ctx, 3, -1, us); !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "cannot unseal this type") {
		t.Errorf("token 3 (no unsealer): %v", err)
	}
	if _, err = e.UnlockToken(ctx, 9, -1, us); !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "token 9 does not exist") {
		t.Errorf("token 9: %v", err)
	}
	if _, err = e.UnlockToken(ctx, -1, s2, us); !errors.Is(err, ErrNoToken) || strings.Contains(err.Error(), "token 0") {
		t.Errorf("slot %d: %v; want only token 1 tried", s2, err)
	}
	if _, err = e.UnlockToken(ctx, -1, -1, map[string]token.Unsealer{"none": fakeUnsealer{}}); !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "no token of a type cryptimg unseals (none)") {
		t.Errorf("no token of the types: %v", err)
	}
}
