package image

// Enrolling unattended unlockers into LUKS2 images, offline, as
// systemd-cryptenroll does on a block device: a key slot and the token
// that unlocks it, in one header update (src/cryptenroll/), and the
// removal of slots by number or kind (its --wipe-slot,
// src/cryptenroll/cryptenroll-wipe.c).

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/header/token/clevis"
	"github.com/cryptimg/cryptimg/header/token/tpm2"
)

// ErrNoTokens refuses to enroll into a LUKS1 header, which has no tokens.
var ErrNoTokens = errors.New("LUKS1 headers have no tokens; enrolling needs a LUKS2 header")

// ErrWipeAll refuses a wipe that would leave no key slot.
var ErrWipeAll = errors.New("the wipe would leave no key slot")

// Recovery is an enrolled recovery key: the key (the caller clears it), its
// key slot and its systemd-recovery token.
type Recovery struct {
	Key   []byte
	Slot  int
	Token int
}

// luks2 is e's header as LUKS2, or ErrNoTokens.
func (e *Encrypted) luks2() (*header.LUKS2, error) {
	h, ok := e.Header.(*header.LUKS2)
	if !ok {
		return nil, ErrNoTokens
	}
	return h, nil
}

// EnrollRecovery makes a recovery key in systemd's format and adds it to
// the lowest free key slot, with the minimal KDF systemd gives it, and a
// systemd-recovery token naming that slot, in one header update: a crash
// leaves both or neither. The image is then reopened and the new slot
// unlocked with the key; should that fail, the old header is written back,
// the slot's area wiped, and ErrVerifyFailed returned. rnd (nil:
// crypto/rand) gives the key, salts, stripes and wipe bytes.
func (e *Encrypted) EnrollRecovery(k *Key, rnd io.Reader) (*Recovery, error) {
	if _, err := e.luks2(); err != nil {
		return nil, err
	}
	key, err := token.NewRecoveryKey(rnd)
	if err != nil {
		return nil, err
	}
	kdf := header.KDF{Type: token.RecoveryPBKDF, Hash: token.RecoveryHash, Iterations: token.RecoveryIterations}
	slot, id, err := e.enroll(k, key, kdf, func(slot int) ([]byte, error) { return token.RecoveryJSON(slot), nil }, rnd)
	if err != nil {
		clear(key)
		return nil, err
	}
	return &Recovery{Key: key, Slot: slot, Token: id}, nil
}

// EnrollTPM2 seals a new secret offline to the TPM key p names, as
// systemd-cryptenroll --tpm2-device-key= does (tpm2.Seal), and adds a key
// slot opened by its passphrase, with the minimal KDF systemd gives it, and
// the systemd-tpm2 token naming that slot, in one header update, checked
// as EnrollRecovery's. It returns the slot and the token. Only systemd 255
// and later unseal such a token. rnd (nil: crypto/rand) gives the secret,
// the seeds, salts, stripes and wipe bytes.
func (e *Encrypted) EnrollTPM2(k *Key, p *tpm2.Params, rnd io.Reader) (slot, id int, err error) {
	if _, err := e.luks2(); err != nil {
		return 0, 0, err
	}
	sealed, err := tpm2.Seal(rnd, p)
	if err != nil {
		return 0, 0, err
	}
	defer clear(sealed.Passphrase)
	kdf := header.KDF{Type: tpm2.PBKDF, Hash: tpm2.Hash, Iterations: tpm2.Iterations}
	return e.enroll(k, sealed.Passphrase, kdf, func(slot int) ([]byte, error) { return sealed.JSON(slot), nil }, rnd)
}

// Clevis is an enrolled clevis binding: its key slot and clevis token.
type Clevis struct {
	Slot  int
	Token int
}

// EnrollClevis binds the image to a clevis pin (tang, or sss over tang
// pins) as clevis luks bind does, offline: a new passphrase in clevis's
// form, encrypted by the pin into the JWE of a clevis token, and a key
// slot for it in the lowest free slot with clevis's KDF (pbkdf2, 1000
// iterations, the hash of the first pbkdf2 slot: clevis_luks_add_key and
// clevis_luks_get_hash in clevis src/luks/clevis-luks-common-functions.in).
// Slot and token go in one header update and the slot is checked, as
// EnrollRecovery does. rnd (nil: crypto/rand) gives the passphrase, the
// sss shares, salts and stripes.
func (e *Encrypted) EnrollClevis(k *Key, pin clevis.Pin, rnd io.Reader) (*Clevis, error) {
	h, err := e.luks2()
	if err != nil {
		return nil, err
	}
	pass, err := clevis.NewPassphrase(rnd)
	if err != nil {
		return nil, err
	}
	defer clear(pass)
	jwe, err := pin.Encrypt(pass, rnd)
	if err != nil {
		return nil, err
	}
	kdf := header.KDF{Type: clevis.PBKDF, Hash: clevisHash(h), Iterations: clevis.Iterations}
	slot, id, err := e.enroll(k, pass, kdf, func(slot int) ([]byte, error) { return clevis.TokenJSON(slot, jwe) }, rnd)
	if err != nil {
		return nil, err
	}
	return &Clevis{Slot: slot, Token: id}, nil
}

// clevisHash is the hash clevis gives a new keyslot: clevis_luks_get_hash
// takes the first "Hash:" line after the keyslots' heading in luksDump,
// which is the lowest pbkdf2 keyslot's hash, or with none the digest's
// (the next such line), as "" here means.
func clevisHash(h *header.LUKS2) string {
	for n := range h.NumSlots() {
		if ks := h.Keyslots[n]; ks != nil && ks.KDF.Type == "pbkdf2" && ks.KDF.Hash != "" {
			return ks.KDF.Hash
		}
	}
	return ""
}

// enroll adds passphrase to the lowest free key slot with kdf and the
// token js(slot) in one header update, then unlocks the new slot from the
// file to check it; should that fail, the old header is written back, the
// slot's area wiped, and ErrVerifyFailed returned.
func (e *Encrypted) enroll(k *Key, passphrase []byte, kdf header.KDF, js func(slot int) ([]byte, error), rnd io.Reader) (slot, id int, err error) {
	h, err := e.luks2()
	if err != nil {
		return -1, -1, err
	}
	f, err := e.rw()
	if err != nil {
		return -1, -1, err
	}
	if slot, err = e.pickSlot(-1); err != nil {
		return -1, -1, err
	}
	tok, err := js(slot)
	if err != nil {
		return -1, -1, err
	}
	u, id, err := h.AddSlotToken(slot, passphrase, k.volume, kdf, -1, tok, rnd)
	if err == nil {
		err = e.applyNow(f, u)
	}
	if err != nil {
		return -1, -1, err
	}
	if verr := verifySlot(f.Name(), passphrase, slot); verr != nil {
		if err := e.apply(f)(h.Rewrite()); err != nil {
			return -1, -1, fmt.Errorf("%w (%v), and rolling back failed: %v", ErrVerifyFailed, verr, err)
		}
		if err := e.apply(f)(h.WipeSlot(slot, rnd)); err != nil {
			return -1, -1, fmt.Errorf("%w (%v), and wiping failed: %v", ErrVerifyFailed, verr, err)
		}
		return -1, -1, fmt.Errorf("%w: %v", ErrVerifyFailed, verr)
	}
	return slot, id, nil
}

// Wipe selects key slots to remove, as systemd-cryptenroll's --wipe-slot
// does.
type Wipe struct {
	// Slots by number.
	Slots []int
	// All: every slot.
	All bool
	// Empty: every slot an empty passphrase opens.
	Empty bool
	// Kinds: every slot a token of that kind names (the keys of
	// token.Types), or with "password" every slot no token names.
	Kinds []string
}

// IsZero reports whether w selects nothing.
func (w Wipe) IsZero() bool { return len(w.Slots) == 0 && !w.All && !w.Empty && len(w.Kinds) == 0 }

// WipeSelection returns the key slots and tokens that w removes, keeping
// slot keep (-1: none), in ascending order, with systemd's rules: a token
// goes with its slots, unless one of them is kept, in which case all of its
// slots stay; and the wipe must leave at least one slot. It changes
// nothing. A slot named by number must exist.
func (e *Encrypted) WipeSelection(w Wipe, keep int) (slots, tokens []int, err error) {
	h, err := e.luks2()
	if err != nil {
		return nil, nil, err
	}
	active := func(n int) bool { return h.Keyslots[n] != nil && h.Bound(n) }
	wipe, kept := map[int]bool{}, map[int]bool{}
	if keep >= 0 {
		kept[keep] = true
	}
	for _, n := range w.Slots {
		if err := h.CheckSlot(n); err != nil {
			return nil, nil, err
		}
		if h.Keyslots[n] == nil {
			return nil, nil, fmt.Errorf("key slot %d: %w", n, ErrSlotInactive)
		}
		wipe[n] = true
	}
	undecided := func(n int) bool { return active(n) && !wipe[n] && !kept[n] }
	switch {
	case w.All:
		for n := range h.NumSlots() {
			if undecided(n) {
				wipe[n] = true
			}
		}
	case w.Empty:
		for n := range h.NumSlots() {
			if !undecided(n) {
				continue
			}
			vk, _, err := h.Unlock(e.hdr(), e.HeaderOffset, []byte{}, n)
			if err == nil {
				clear(vk)
				wipe[n] = true
			} else if !errors.Is(err, header.ErrNoMatchingKeyslot) {
				return nil, nil, fmt.Errorf("key slot %d: %w", n, err)
			}
		}
	}
	// Slots by the kind of the tokens that name them; the slots some token
	// names are not passwords.
	types := map[string]bool{}
	password := false
	for _, kind := range w.Kinds {
		if kind == "password" {
			password = true
			continue
		}
		t, ok := token.Types[kind]
		if !ok {
			return nil, nil, fmt.Errorf("unknown kind of key slot %q", kind)
		}
		types[t] = true
	}
	ids := slices.Sorted(maps.Keys(h.Tokens))
	named := map[int]bool{}
	for _, id := range ids {
		t := h.Tokens[id]
		for _, n := range tokenSlots(t) {
			if types[t.Type] {
				wipe[n] = true
			} else {
				named[n] = true
			}
		}
	}
	if password {
		for n := range h.NumSlots() {
			if undecided(n) && !named[n] {
				wipe[n] = true
			}
		}
	}
	// Tokens go with their slots, unless one of them is kept: then the
	// token and all its slots stay.
	for _, id := range ids {
		ns := tokenSlots(h.Tokens[id])
		drop := false
		for _, n := range ns {
			if kept[n] {
				drop = false
				break
			}
			if wipe[n] {
				drop = true
			}
		}
		for _, n := range ns {
			if drop {
				wipe[n] = true
			} else {
				kept[n] = true
			}
		}
		if drop {
			tokens = append(tokens, id)
		}
	}
	remains := false
	for n := range h.NumSlots() {
		if active(n) && (kept[n] || !wipe[n]) {
			remains = true
		}
	}
	if !remains {
		return nil, nil, ErrWipeAll
	}
	for n := range h.NumSlots() {
		if wipe[n] && !kept[n] && h.Keyslots[n] != nil {
			slots = append(slots, n)
		}
	}
	return slots, tokens, nil
}

// tokenSlots are the key slot numbers a token names; entries that are not
// numbers are ignored, as systemd ignores them.
func tokenSlots(t *header.Token) []int {
	var out []int
	for _, s := range t.Keyslots {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			out = append(out, n)
		}
	}
	return out
}

// WipeSlots removes the key slots and tokens w selects (WipeSelection),
// keeping slot keep, in one header update: both copies are written
// without them, then the slots' areas are overwritten with random bytes
// (rnd; nil: crypto/rand). It returns what it removed.
func (e *Encrypted) WipeSlots(w Wipe, keep int, rnd io.Reader) (slots, tokens []int, err error) {
	slots, tokens, err = e.WipeSelection(w, keep)
	if err != nil || len(slots) == 0 && len(tokens) == 0 {
		return slots, tokens, err
	}
	h, _ := e.luks2()
	f, err := e.rw()
	if err != nil {
		return nil, nil, err
	}
	if err := e.apply(f)(h.RemoveSlots(slots, tokens, rnd)); err != nil {
		return nil, nil, err
	}
	return slots, tokens, nil
}
