package header

// LUKS2 in cryptimg's in-place operations: the busy mark, the new header of
// a reencryption, and the order it is installed in.

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
)

// busyRequirement marks a LUKS2 header whose image cryptimg is changing in
// place (reencrypt). cryptsetup does not know it, so it treats the metadata
// as read-only and refuses to activate the device, as it does for its own
// online-reencrypt requirement; cryptimg refuses the image with ErrMarked
// until the operation that set it ends. The LUKS\xde\xad magic that marks
// LUKS1 does not work for LUKS2: cryptsetup would restore the first copy
// from the second.
const busyRequirement = "cryptimg-busy-v1"

// Mark is the update that marks h busy: both copies with busyRequirement
// added, at the next seqid. A header marked already needs no writes.
func (h *LUKS2) Mark() (*Update, error) {
	if h.busy {
		return &Update{Header: h}, nil
	}
	if err := h.writable(); err != nil {
		return nil, err
	}
	n := h.clone()
	n.busy = true
	n.Config.changed = true
	r := &struct {
		Mandatory []string `json:"mandatory"`
	}{}
	if h.Config.Requirements != nil {
		r.Mandatory = slices.Clone(h.Config.Requirements.Mandatory)
	}
	r.Mandatory = append(r.Mandatory, busyRequirement)
	n.Config.Requirements = r
	return h.commit(n, nil, nil, nil)
}

// Unmark is the update that ends Mark: both copies without
// busyRequirement, at the next seqid.
func (h *LUKS2) Unmark() (*Update, error) {
	if !h.busy {
		return nil, fmt.Errorf("header: Unmark of a LUKS2 header that is not marked")
	}
	n := h.clone()
	n.busy = false
	n.Config.changed = true
	var rest []string
	for _, m := range h.Config.Requirements.Mandatory {
		if m != busyRequirement {
			rest = append(rest, m)
		}
	}
	n.Config.Requirements = nil
	if len(rest) > 0 {
		n.Config.Requirements = &struct {
			Mandatory []string `json:"mandatory"`
		}{rest}
	}
	return h.commit(n, nil, nil, nil)
}

// MarkedBytes is the part of the header area Mark and Unmark write: both
// metadata copies.
func (h *LUKS2) MarkedBytes() int64 { return 2 * h.bin.HdrSize }

// Install is the update that writes area, the complete header area of h
// (from Rekey, two seqids past the header it replaces), over the marked
// old header: the keyslots area first, then the primary copy, then the
// secondary, each synced. Until the primary lands the marked old header is
// read; from then on the new one, which has the higher seqid.
func (h *LUKS2) Install(area []byte) *Update {
	hdr := h.bin.HdrSize
	return &Update{Writes: []Write{
		{Offset: 2 * hdr, Data: area[2*hdr:], What: "LUKS2 keyslots area", Sync: true},
		{Offset: 0, Data: area[:hdr], What: "LUKS2 primary header", Sync: true},
		{Offset: hdr, Data: area[hdr : 2*hdr], What: "LUKS2 secondary header", Sync: true},
	}, Header: h}
}

// Rekey is h under a new volume key, for reencryption: p's cipher, key
// size and hash (the data segment keeps its offset, size, sector size and
// iv_tweak), each passphrase of keep in its keyslot with one KDF (p's,
// benchmarked once) and its old priority, tokens without the removed
// keyslots, and the label, subsystem, flags and UUID kept. A p.UUID
// other than h's is the new header's UUID, and p.VolumeKey, if set, the
// new volume key instead of a random one (a key derived from the UUID).
// area is the whole header area: both copies at two seqids past h (Mark
// takes the one between), the new key material, and random bytes over the
// rest of the keyslots area, so no old keyslot survives in it.
func (h *LUKS2) Rekey(p Params, keep map[int][]byte, room int64) (Header, []byte, []byte, error) {
	if err := h.writable(); err != nil {
		return nil, nil, nil, err
	}
	if err := h.dataErr(); err != nil {
		return nil, nil, nil, err
	}
	if len(keep) == 0 {
		return nil, nil, nil, fmt.Errorf("header: no key slot to keep")
	}
	if len(h.Segments) != 1 {
		return nil, nil, nil, fmt.Errorf("reencrypting LUKS2 headers with %d segments is not supported", len(h.Segments))
	}
	if err := h.rekeyIntegrity(&p); err != nil {
		return nil, nil, nil, err
	}
	if p.UUID == "" {
		p.UUID = h.bin.UUID
	}
	p, err := p.withDefaults()
	if err != nil {
		return nil, nil, nil, err
	}
	if h.Info().AreaSize > room {
		return nil, nil, nil, fmt.Errorf("the LUKS2 header area of %d bytes does not fit in %d", h.Info().AreaSize, room)
	}
	kdf, err := p.luks2KDF()
	if err != nil {
		return nil, nil, nil, err
	}
	vk := make([]byte, p.KeyBytes)
	if p.VolumeKey != nil {
		copy(vk, p.VolumeKey) // withDefaults made KeyBytes its length
	} else if _, err := io.ReadFull(p.Rand, vk); err != nil {
		return nil, nil, nil, fmt.Errorf("reading random volume key: %w", err)
	}
	fail := func(err error) (Header, []byte, []byte, error) {
		clear(vk)
		return nil, nil, nil, err
	}
	slots := slices.Sorted(maps.Keys(keep))
	names := make([]string, len(slots))
	for i, s := range slots {
		if err := h.CheckSlot(s); err != nil {
			return fail(err)
		}
		names[i] = strconv.Itoa(s)
	}

	n := h.clone()
	n.bin.UUID = p.UUID
	seg := *h.data()
	seg.Encryption, seg.changed = p.Cipher, true
	if p.Integrity != "" {
		seg.Integrity, seg.integrity = segmentIntegrity(p.Integrity)
	}
	n.Segments = map[int]*Segment{h.seg: &seg}
	d, err := newDigest(p, vk, names, strconv.Itoa(h.seg))
	if err != nil {
		return fail(err)
	}
	n.Digests = map[int]*Digest{0: d}
	n.digest = 0
	n.Keyslots = map[int]*Keyslot{}
	for id, t := range h.Tokens {
		for _, k := range t.Keyslots {
			if i, err := strconv.Atoi(k); err != nil || keep[i] == nil {
				if t, err = t.without(k); err != nil {
					return fail(err)
				}
			}
		}
		n.Tokens[id] = t
	}

	end := h.Info().AreaSize
	hdr := h.bin.HdrSize
	area := make([]byte, end)
	if _, err := io.ReadFull(p.Rand, area[2*hdr:]); err != nil {
		return fail(fmt.Errorf("reading random keyslot fill: %w", err))
	}
	for _, s := range slots {
		off, err := n.freeArea(keyslotAreaSize(p.KeyBytes))
		if err != nil {
			clear(area)
			return fail(err)
		}
		spec, areaKey := keyslotCipher(p.Cipher, p.Integrity != "", p.KeyBytes)
		k, err := newKeyslot(p.KeyBytes, p.Hash, spec, areaKey, off, kdf, p.Rand)
		if err != nil {
			clear(area)
			return fail(err)
		}
		k.Priority = h.Keyslots[s].Priority
		material, err := k.seal(keep[s], vk, p.Rand)
		if err != nil {
			clear(area)
			return fail(err)
		}
		copy(area[off:], material)
		clear(material)
		n.Keyslots[s] = k
	}
	n.bin.SeqID = h.bin.SeqID + 2
	meta, err := n.marshalCopies(p.Rand)
	if err != nil {
		clear(area)
		return fail(err)
	}
	copy(area, meta)
	got, err := readLUKS2(bytes.NewReader(area), 0, end)
	if err != nil {
		clear(area)
		return fail(fmt.Errorf("header: internal error: the new LUKS2 header does not read back: %w", err))
	}
	return got, vk, area, nil
}
