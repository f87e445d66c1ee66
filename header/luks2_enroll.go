package header

// Enrolling: a keyslot and the token that unlocks it, added in one Update,
// and several keyslots and tokens removed in one (systemd-cryptenroll's
// enrollments and --wipe-slot, src/cryptenroll/). One commit of both
// copies means a crash leaves the slot with its token, or neither.

import (
	"fmt"
	"io"
	"slices"
	"strconv"
)

// AddSlotToken puts passphrase into the unused keyslot slot, as AddSlot
// does, and stores the token JSON object js (a "type" and a "keyslots"
// array, as ImportToken takes it) bound to that slot as token id (-1: the
// lowest free number), in the same commit: the key material is written and
// synced, then both copies name the slot and the token. It returns the
// update and the token's number.
func (h *LUKS2) AddSlotToken(slot int, passphrase, volumeKey []byte, kdf KDF, id int, js []byte, rnd io.Reader) (*Update, int, error) {
	n, pre, err := h.withSlot(slot, passphrase, volumeKey, kdf, rnd)
	if err != nil {
		return nil, -1, err
	}
	n, id, err = n.withToken(id, js, slot, false)
	if err != nil {
		for _, w := range pre {
			clear(w.Data)
		}
		return nil, -1, err
	}
	u, err := h.commit(n, pre, nil, rnd)
	return u, id, err
}

// RemoveSlots removes the keyslots slots and the tokens tokens in one
// commit: both copies are written without them (the digests and the kept
// tokens no longer name the slots), then each slot's area is overwritten
// with random bytes, synced.
func (h *LUKS2) RemoveSlots(slots, tokens []int, rnd io.Reader) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	n := h.clone()
	var post []Write
	for _, slot := range slots {
		if err := h.CheckSlot(slot); err != nil {
			return nil, err
		}
		k := n.Keyslots[slot]
		if k == nil {
			return nil, fmt.Errorf("key slot %d is not active", slot)
		}
		delete(n.Keyslots, slot)
		name := strconv.Itoa(slot)
		for i, d := range n.Digests {
			if slices.Contains(d.Keyslots, name) {
				c := *d
				c.Keyslots = slices.DeleteFunc(slices.Clone(d.Keyslots), func(s string) bool { return s == name })
				c.changed = true
				n.Digests[i] = &c
			}
		}
		wipe := make([]byte, k.Area.Size)
		if _, err := io.ReadFull(randReader(rnd), wipe); err != nil {
			return nil, fmt.Errorf("reading random wipe bytes: %w", err)
		}
		post = append(post, Write{Offset: int64(k.Area.Offset), Data: wipe, What: fmt.Sprintf("key slot %d wipe", slot), Sync: true})
	}
	for _, id := range tokens {
		if n.Tokens[id] == nil {
			return nil, fmt.Errorf("token %d does not exist", id)
		}
		delete(n.Tokens, id)
	}
	for _, slot := range slots {
		name := strconv.Itoa(slot)
		for i, t := range n.Tokens {
			if slices.Contains(t.Keyslots, name) {
				c, err := t.without(name)
				if err != nil {
					return nil, err
				}
				n.Tokens[i] = c
			}
		}
	}
	return h.commit(n, nil, post, rnd)
}
