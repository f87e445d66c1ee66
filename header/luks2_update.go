package header

// Changing LUKS2 headers. Every change writes both metadata copies with the
// next seqid, primary first, each synced (cryptsetup lib/luks2/
// luks2_disk_metadata.c hdr_write_disk order). A torn write of a copy fails
// its checksum, so a crash leaves one valid copy holding the old state (torn
// primary: the secondary is still the old one) or the new one (torn
// secondary: the primary is new, and its seqid wins). Key material goes into
// an unused area before the copies that name it; a killed slot's area is
// wiped after the copies that drop it.

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// ErrLUKS2Requirements refuses a change to a header whose mandatory
// requirements cryptimg does not know (cryptsetup: "Unmet LUKS2
// requirements detected").
var ErrLUKS2Requirements = errors.New("the LUKS2 header has requirements cryptimg does not know; its metadata is read-only")

// writable refuses changes to headers cryptsetup would not change.
func (h *LUKS2) writable() error {
	if err := h.unfinished(); err != nil {
		return err
	}
	if h.ReadOnly {
		return ErrLUKS2Requirements
	}
	return nil
}

// clone copies h deeply enough that changing the copy's maps, and
// replacing (not editing) their objects, leaves h as it was.
func (h *LUKS2) clone() *LUKS2 {
	n := *h
	bin := *h.bin
	n.bin = &bin
	n.Keyslots = maps.Clone(h.Keyslots)
	n.Segments = maps.Clone(h.Segments)
	n.Digests = maps.Clone(h.Digests)
	n.Tokens = maps.Clone(h.Tokens)
	n.Warning = ""
	return &n
}

// commit makes the update that writes n as the next seqid: pre first, then
// both copies, then post.
func (h *LUKS2) commit(n *LUKS2, pre, post []Write, rnd io.Reader) (*Update, error) {
	n.bin.SeqID = h.bin.SeqID + 1
	meta, err := n.marshalCopies(rnd)
	if err != nil {
		return nil, err
	}
	hdr := n.bin.HdrSize
	got, err := readLUKS2(metaReader(meta), 0, n.Info().AreaSize)
	if err != nil {
		return nil, fmt.Errorf("header: internal error: the changed LUKS2 header does not read back: %w", err)
	}
	writes := append(slices.Clone(pre),
		Write{Offset: 0, Data: meta[:hdr], What: "LUKS2 primary header", Sync: true},
		Write{Offset: hdr, Data: meta[hdr:], What: "LUKS2 secondary header", Sync: true})
	got.allowNull = n.allowNull
	return &Update{Writes: append(writes, post...), Header: got}, nil
}

// metaReader reads meta, and zeros after it.
type metaReader []byte

func (m metaReader) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	if off < int64(len(m)) {
		copy(p, m[off:])
	}
	return len(p), nil
}

// freeArea is the first-fit keyslot area of size bytes: the lowest
// 4096-aligned offset from 2*hdr_size that overlaps no keyslot's area and
// ends within the keyslots area (cryptsetup LUKS2_find_area_gap).
func (h *LUKS2) freeArea(size uint64) (uint64, error) {
	lo := uint64(2 * h.bin.HdrSize)
	end := lo + uint64(h.Config.KeyslotsSize)
	type span struct{ lo, hi uint64 }
	var used []span
	for _, k := range h.Keyslots {
		used = append(used, span{uint64(k.Area.Offset), uint64(k.Area.Offset) + uint64(k.Area.Size)})
	}
	slices.SortFunc(used, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	off := lo
	for _, u := range used {
		if off+size <= u.lo {
			break
		}
		off = max(off, roundUp(u.hi, 4096))
	}
	if off+size > end {
		return 0, fmt.Errorf("no room for a %d-byte keyslot area in the %d-byte keyslots area", size, h.Config.KeyslotsSize)
	}
	return off, nil
}

// AddSlot puts passphrase into the unused keyslot slot, bound to the data
// segment's digest: the key material goes to a free area (synced), then
// both copies name it. h is unchanged.
func (h *LUKS2) AddSlot(slot int, passphrase, volumeKey []byte, kdf KDF, rnd io.Reader) (*Update, error) {
	n, pre, err := h.withSlot(slot, passphrase, volumeKey, kdf, rnd)
	if err != nil {
		return nil, err
	}
	return h.commit(n, pre, nil, rnd)
}

// withSlot is h with passphrase in the unused keyslot slot, and the write
// of its key material that must land before a copy names it.
func (h *LUKS2) withSlot(slot int, passphrase, volumeKey []byte, kdf KDF, rnd io.Reader) (*LUKS2, []Write, error) {
	if err := h.writable(); err != nil {
		return nil, nil, err
	}
	if err := h.CheckSlot(slot); err != nil {
		return nil, nil, err
	}
	if h.Keyslots[slot] != nil {
		return nil, nil, fmt.Errorf("key slot %d is in use", slot)
	}
	if err := h.dataErr(); err != nil {
		return nil, nil, err
	}
	if !h.VerifyVolumeKey(volumeKey) {
		return nil, nil, fmt.Errorf("header: the volume key does not match the digest")
	}
	// The data segment's cipher and key size, the area first fit, AF with
	// the digest's hash, or with a pbkdf2 slot's own hash when it names one
	// (cryptsetup lib/luks2/luks2_keyslot.c LUKS2_keyslot_params_default:
	// the AF hash is the pbkdf's).
	kb := h.keyBytes()
	off, err := h.freeArea(keyslotAreaSize(kb))
	if err != nil {
		return nil, nil, err
	}
	afHash := h.Digests[h.digest].Hash
	if kdf.Type == "pbkdf2" && kdf.Hash != "" {
		afHash = kdf.Hash
	}
	spec, areaKey := keyslotCipher(h.data().Encryption, h.integrity() != nil, kb)
	k, err := newKeyslot(kb, afHash, spec, areaKey, off, kdf, rnd)
	if err != nil {
		return nil, nil, err
	}
	material, err := k.seal(passphrase, volumeKey, randReader(rnd))
	if err != nil {
		return nil, nil, err
	}
	n := h.clone()
	n.Keyslots[slot] = k
	d := *n.Digests[h.digest]
	d.Keyslots = append(slices.Clone(d.Keyslots), strconv.Itoa(slot))
	d.changed = true
	n.Digests[h.digest] = &d
	return n, []Write{{Offset: int64(k.Area.Offset), Data: material, What: fmt.Sprintf("key slot %d material", slot), Sync: true}}, nil
}

// KillSlot removes keyslot slot, from the digests and tokens that name it
// too: both copies are written first, then its area is overwritten with
// random bytes (synced). It is RemoveSlots of one slot.
func (h *LUKS2) KillSlot(slot int, rnd io.Reader) (*Update, error) {
	return h.RemoveSlots([]int{slot}, nil, rnd)
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

// without is the token with keyslot name removed from its list, its other
// fields kept.
func (t *Token) without(name string) (*Token, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(t.Raw, &m); err != nil {
		return nil, err
	}
	c := *t
	c.Keyslots = slices.DeleteFunc(slices.Clone(t.Keyslots), func(s string) bool { return s == name })
	ks, err := json.Marshal(c.Keyslots)
	if err != nil {
		return nil, err
	}
	m["keyslots"] = ks
	if c.Raw, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return &c, nil
}

// WipeSlot overwrites with random bytes the area AddSlot(slot) would have
// used, for a slot that is not in the header: the rollback of an AddSlot
// whose key did not verify.
func (h *LUKS2) WipeSlot(slot int, rnd io.Reader) (*Update, error) {
	if err := h.CheckSlot(slot); err != nil {
		return nil, err
	}
	if h.Keyslots[slot] != nil {
		panic("header: internal error: wiping an active key slot")
	}
	size := keyslotAreaSize(h.keyBytes())
	off, err := h.freeArea(size)
	if err != nil {
		return nil, err
	}
	wipe := make([]byte, size)
	if _, err := io.ReadFull(randReader(rnd), wipe); err != nil {
		return nil, fmt.Errorf("reading random wipe bytes: %w", err)
	}
	return &Update{Writes: []Write{{Offset: int64(off), Data: wipe, What: fmt.Sprintf("key slot %d wipe", slot), Sync: true}}, Header: h}, nil
}

// WithUUID sets the UUID in both copies.
func (h *LUKS2) WithUUID(uuid string) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	u, err := CanonicalUUID(uuid)
	if err != nil {
		return nil, err
	}
	n := h.clone()
	n.bin.UUID = u
	return h.commit(n, nil, nil, nil)
}

// Rewrite writes h again, with the next seqid, so that it wins over
// whatever copy is on disk.
func (h *LUKS2) Rewrite() (*Update, error) { return h.commit(h.clone(), nil, nil, nil) }

// Restore writes a header backup (both copies and the keyslots area, cut
// to the room the image has) back as cryptsetup luksHeaderRestore does:
// the keyslots area first, synced, then the secondary and the primary copy,
// each synced, all as they are in the backup.
func (h *LUKS2) Restore(data []byte) (*Update, error) {
	hdr := h.bin.HdrSize
	if int64(len(data)) < 2*hdr {
		return nil, fmt.Errorf("header backup of %d bytes is shorter than its two metadata copies", len(data))
	}
	return &Update{Writes: []Write{
		{Offset: 2 * hdr, Data: data[2*hdr:], What: "keyslots area", Sync: true},
		{Offset: hdr, Data: data[hdr : 2*hdr], What: "LUKS2 secondary header", Sync: true},
		{Offset: 0, Data: data[:hdr], What: "LUKS2 primary header", Sync: true},
	}, Header: h}, nil
}
