package header

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// This file holds the methods by which *LUKS1 is a [Header].

// Info returns the header's summary.
func (h *LUKS1) Info() Info {
	return Info{
		Version: int(h.Version), UUID: h.UUID, Cipher: h.CipherSpec(), KeyBytes: int(h.KeyBytes),
		Hash: h.HashSpec, SectorSize: SectorSize,
		PayloadOffset: int64(h.PayloadOffset) * SectorSize, AreaSize: h.AreaSize(),
	}
}

// NumSlots is 8.
func (h *LUKS1) NumSlots() int { return NumSlots }

// SlotActive reports whether slot is in range and active.
func (h *LUKS1) SlotActive(slot int) bool {
	return slot >= 0 && slot < NumSlots && h.Slots[slot].Active()
}

// CheckSlot returns an error for a slot outside 0..7.
func (h *LUKS1) CheckSlot(slot int) error { return checkSlotIndex(slot) }

// SlotKDF returns the PBKDF2 iterations for a new slot: forced (at least
// MinIterations) or what takes o.IterTime with the header's hash and key
// size. LUKS1 has no other KDF.
func (h *LUKS1) SlotKDF(o KDFOptions) (KDF, error) {
	if o.PBKDF != "" && o.PBKDF != "pbkdf2" || o.Memory != 0 || o.Parallel != 0 {
		return KDF{}, fmt.Errorf("LUKS1 key slots use pbkdf2 only")
	}
	if o.Force != 0 {
		if o.Force < MinIterations {
			return KDF{}, fmt.Errorf("forced iterations %d below the minimum %d", o.Force, MinIterations)
		}
		return KDF{Type: "pbkdf2", Iterations: o.Force}, nil
	}
	if o.IterTime == 0 {
		o.IterTime = DefaultIterTime
	}
	it, _, err := SlotIterations(h.HashSpec, int(h.KeyBytes), o.IterTime)
	return KDF{Type: "pbkdf2", Iterations: it}, err
}

// Rekey formats a header with p's cipher, hash, key size and cost under a
// new volume key (p.VolumeKey, or a random one) and p.UUID (h's if empty)
// and puts each passphrase of keep into its slot, with the same
// iterations for all (measured once). The payload offset stays h's;
// the new key slots must end within room bytes (the payload offset of a
// raw image, the LUKS area of a qcow2 image). area, max(h.AreaSize(),
// the new AreaSize()) rounded up to a sector, holds the phdr, zeros up to
// the first key material, and random bytes wherever key material was or
// may be, so no old slot survives in it.
func (h *LUKS1) Rekey(p Params, keep map[int][]byte, room int64) (Header, []byte, []byte, error) {
	if len(keep) == 0 {
		return nil, nil, nil, fmt.Errorf("header: no key slot to keep")
	}
	slots := slices.Sorted(maps.Keys(keep))
	for _, s := range slots {
		if err := checkSlotIndex(s); err != nil {
			return nil, nil, nil, err
		}
	}
	p.AlignSectors = 8
	if p.UUID == "" {
		p.UUID = h.UUID
	}
	nh, vk, fresh, err := formatLUKS1(keep[slots[0]], p)
	if err != nil {
		return nil, nil, nil, err
	}
	clear(fresh)
	fail := func(err error) (Header, []byte, []byte, error) {
		clear(vk)
		return nil, nil, nil, err
	}
	if nh.AreaSize() > room {
		return fail(fmt.Errorf("the header for a %d-bit key needs %d bytes, but the image has room for %d", nh.KeyBytes*8, nh.AreaSize(), room))
	}
	nh.PayloadOffset = h.PayloadOffset
	iter := nh.Slots[0].Iterations
	nh.DisableSlot(0)
	areaLen := roundUp(uint64(max(h.AreaSize(), nh.AreaSize())), SectorSize)
	area := make([]byte, areaLen)
	if _, err := io.ReadFull(randReader(p.Rand), area); err != nil {
		return fail(fmt.Errorf("reading random slot fill: %w", err))
	}
	firstKM := areaLen
	for i := range nh.Slots {
		firstKM = min(firstKM, uint64(nh.Slots[i].KeyMaterialOffset)*SectorSize)
	}
	clear(area[:firstKM])
	for _, s := range slots {
		m, err := nh.SetKeySlot(s, keep[s], vk, iter, p.Rand)
		if err != nil {
			clear(area)
			return fail(err)
		}
		copy(area[int64(nh.Slots[s].KeyMaterialOffset)*SectorSize:], m)
		clear(m)
	}
	copy(area, nh.Marshal())
	return nh, vk, area, nil
}
