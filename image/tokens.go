package image

// Unlocking with LUKS2 tokens, as cryptsetup's --token-only and
// --token-id do: a token's Unsealer (by token type; clevis asks a tang
// server, systemd-tpm2 a TPM) recovers the passphrase of the key slots
// the token names.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
)

// ErrNoToken is matched by every *TokenError: no token unlocked the
// image.
var ErrNoToken = errors.New("no token unlocked the image")

// TokenError says why no token unlocked the image: each token tried, and
// what went wrong with it. It matches ErrNoToken, and each reason (such as
// token.ErrUnavailable).
type TokenError struct {
	// Reasons are "token N (TYPE): why", in token order; empty when
	// there was no token to try.
	Reasons []error
	// None, when there was nothing to try, says why.
	None string
}

func (e *TokenError) Error() string {
	if len(e.Reasons) == 0 {
		return ErrNoToken.Error() + ": " + e.None
	}
	var s []string
	for _, r := range e.Reasons {
		s = append(s, r.Error())
	}
	return ErrNoToken.Error() + ": " + strings.Join(s, "; ")
}

func (e *TokenError) Unwrap() []error { return append([]error{ErrNoToken}, e.Reasons...) }

// TokenKey is what a token unlocked: the key, the token, and the keyslot
// passphrase it held (the caller clears both: Key.Clear, clear).
type TokenKey struct {
	*Key
	Token      int
	Passphrase []byte
}

// UnlockToken unlocks the image with its LUKS2 tokens: id >= 0 tries that
// token only, -1 each token in id order; slot >= 0 only tokens naming
// that key slot, and only that slot. A token whose type has no Unsealer
// in unsealers is passed over (a token named by id is an error then); the
// others are unsealed and the passphrase tried on the key slots the token
// names, in its order. The first that opens a slot wins; with none, a
// *TokenError says why for each token. A cancelled ctx stops at once.
func (e *Encrypted) UnlockToken(ctx context.Context, id, slot int, unsealers map[string]token.Unsealer) (*TokenKey, error) {
	h, err := e.luks2()
	if err != nil {
		return nil, err
	}
	ids := slices.Sorted(maps.Keys(h.Tokens))
	if id >= 0 {
		if h.Tokens[id] == nil {
			return nil, &TokenError{None: fmt.Sprintf("token %d does not exist", id)}
		}
		ids = []int{id}
	}
	te := &TokenError{}
	for _, n := range ids {
		t := h.Tokens[n]
		slots := tokenSlots(t)
		if slot >= 0 {
			if !slices.Contains(slots, slot) {
				continue
			}
			slots = []int{slot}
		}
		u := unsealers[t.Type]
		if u == nil {
			if id >= 0 {
				te.Reasons = append(te.Reasons, fmt.Errorf("token %d (%s): cryptimg cannot unseal this type of token", n, t.Type))
			}
			continue
		}
		k, err := e.unlockWith(ctx, u, h, n, t, slots)
		if err == nil {
			return k, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		te.Reasons = append(te.Reasons, err)
	}
	if len(te.Reasons) == 0 {
		types := slices.Sorted(maps.Keys(unsealers))
		te.None = "the image has no token of a type cryptimg unseals (" + strings.Join(types, ", ") + ")"
		if slot >= 0 {
			te.None = fmt.Sprintf("no token of a type cryptimg unseals (%s) names key slot %d", strings.Join(types, ", "), slot)
		}
	}
	return nil, te
}

// unlockWith unseals token n with u and tries its passphrase on slots.
func (e *Encrypted) unlockWith(ctx context.Context, u token.Unsealer, h *header.LUKS2, n int, t *header.Token, slots []int) (*TokenKey, error) {
	raw := t.Raw
	if raw == nil {
		return nil, fmt.Errorf("token %d (%s): no JSON", n, t.Type)
	}
	pass, err := u.Unseal(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("token %d (%s): %w", n, t.Type, err)
	}
	var last error = fmt.Errorf("token %d (%s): it names no active key slot", n, t.Type)
	for _, s := range slots {
		if h.Keyslots[s] == nil {
			continue
		}
		k, err := e.Unlock(pass, s)
		if err == nil {
			return &TokenKey{Key: k, Token: n, Passphrase: pass}, nil
		}
		if errors.Is(err, header.ErrNoMatchingKeyslot) {
			err = fmt.Errorf("its passphrase does not open key slot %d", s)
		}
		last = fmt.Errorf("token %d (%s): %w", n, t.Type, err)
	}
	clear(pass)
	return nil, last
}
