package main

// Unlocking with LUKS2 tokens, as cryptsetup's --token-only, --token-id
// and --token-type: the commands that unlock add these flags (keyOptions'
// tokens), and unlockImage and readKeyFor try the tokens before the key
// file or the prompt.

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/pflag"
)

// unsealerTypes holds, per LUKS2 token type, how cryptimg unseals it: the
// function adds the flags its Unsealer needs to a command (it may add
// none) and returns how to make the Unsealer once they are parsed. A token
// type lands as a file whose init adds itself here (tokens_clevis.go).
var unsealerTypes = map[string]func(*pflag.FlagSet) func() (token.Unsealer, error){}

// tokenOptions are the token flags of a command that unlocks.
type tokenOptions struct {
	only   bool
	id     int
	typ    string
	makers map[string]func() (token.Unsealer, error)
}

// addTokenFlags adds --token-only, --token-id, --token-type and the token
// types' own flags to a command that unlocks.
func addTokenFlags(f *pflag.FlagSet) *tokenOptions {
	o := &tokenOptions{makers: map[string]func() (token.Unsealer, error){}}
	types := slices.Sorted(maps.Keys(unsealerTypes))
	f.BoolVar(&o.only, "token-only", false, "unlock with the image's LUKS2 tokens only ("+strings.Join(types, ", ")+"), never with a passphrase")
	f.IntVar(&o.id, "token-id", -1, "try only this token (then the passphrase, without --token-only)")
	f.StringVar(&o.typ, "token-type", "", "try only tokens of this type ("+strings.Join(types, ", ")+")")
	for _, t := range types {
		o.makers[t] = unsealerTypes[t](f)
	}
	return o
}

// unsealers are the Unsealers the flags select, by token type.
func (o *tokenOptions) unsealers() (map[string]token.Unsealer, error) {
	if o.id < -1 || o.id >= header.MaxSlots {
		return nil, usagef("--token-id must be between 0 and %d", header.MaxSlots-1)
	}
	if o.typ != "" && o.makers[o.typ] == nil {
		return nil, usagef("--token-type %q: cryptimg unseals %s tokens", o.typ, strings.Join(slices.Sorted(maps.Keys(o.makers)), ", "))
	}
	out := map[string]token.Unsealer{}
	for t, make := range o.makers {
		if o.typ != "" && t != o.typ {
			continue
		}
		u, err := make()
		if err != nil {
			return nil, err
		}
		out[t] = u
	}
	return out, nil
}

// unlockWithTokens tries e's tokens as the flags in k say: nil, nil when
// the command has no token flags, the image no tokens, or no token
// unlocked it and the passphrase is to be asked (without --token-only, as
// cryptsetup falls back). With --token-only, no token unlocking is an
// error (exit 2) that says why for each token. The caller clears the
// result.
func unlockWithTokens(g *globalOptions, e *image.Encrypted, k keyOptions, name string, slot int) (*image.TokenKey, error) {
	o := k.tokens
	if o == nil {
		return nil, nil
	}
	us, err := o.unsealers()
	if err != nil {
		return nil, err
	}
	if _, ok := e.Header.(*header.LUKS2); !ok {
		if o.only || o.id >= 0 {
			return nil, fmt.Errorf("%s: %w", name, image.ErrNoTokens)
		}
		return nil, nil
	}
	e.AllowCost = g.slowKDF
	e.AllowNullCipher = g.nullOK
	start := time.Now()
	tk, err := e.UnlockToken(g.ctx(), o.id, slot, us)
	g.kdf += time.Since(start)
	switch {
	case err == nil:
		return tk, nil
	case o.only || !errors.Is(err, image.ErrNoToken):
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return nil, nil
}

// readKeyFor is readKey for a command that needs the passphrase itself
// (test-key, reencrypt): a token of e that unlocks gives it, else the key
// file or prompt (e nil: no tokens). The caller clears it.
func readKeyFor(g *globalOptions, e *image.Encrypted, k keyOptions, name, prompt string, slot int) ([]byte, error) {
	if e != nil {
		tk, err := unlockWithTokens(g, e, k, name, slot)
		if err != nil {
			return nil, err
		}
		if tk != nil {
			tk.Key.Clear()
			key := secmem.Clone(tk.Passphrase)
			clear(tk.Passphrase)
			return key, nil
		}
	}
	return readKey(g, k, prompt, false)
}
