package header

// Enrolling: a keyslot and the token that unlocks it, added in one Update,
// and several keyslots and tokens removed in one (systemd-cryptenroll's
// enrollments and --wipe-slot, src/cryptenroll/). One commit of both
// copies means a crash leaves the slot with its token, or neither.

import "io"

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
