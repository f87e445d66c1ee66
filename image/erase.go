package image

import (
	"io"
	"slices"

	"github.com/cryptimg/cryptimg/header"
)

// Erase destroys every key slot of the image, as cryptsetup luksErase
// does: afterwards no passphrase opens it, and its data can only be
// decrypted with a header backup or the volume key.
//
// Each active slot is removed by the header's own KillSlot update, one
// slot at a time: the header that drops it is written and synced (the
// commit point: LUKS1's phdr, LUKS2's two metadata copies, whose tokens
// lose the slot as well), then its key material is overwritten with
// random bytes from rnd (nil: crypto/rand) and synced. A crash at any
// moment thus leaves every slot either working or disabled, never an
// active slot with broken material. A LUKS1 header's disabled slots have
// their areas overwritten too (first, since nothing reads them), so that
// no key material of an earlier key survives in any of the eight.
//
// On an image opened with OpenHeader only the header file changes. The
// metadata of a LUKS2 header with requirements cryptimg does not know is
// read-only and is refused before anything is written.
func (e *Encrypted) Erase(rnd io.Reader) error {
	_, err := e.EraseSlots(rnd)
	return err
}

// Erased is what EraseSlots destroyed, in slot order.
type Erased struct {
	// Removed are the slots that were active: each is disabled and its
	// key material overwritten.
	Removed []int
	// Wiped are the slots whose key material areas were overwritten: the
	// removed ones, and a LUKS1 header's disabled ones too.
	Wiped []int
}

// EraseSlots is Erase, and reports the slots it removed and wiped. After
// an error it reports what was done before it.
func (e *Encrypted) EraseSlots(rnd io.Reader) (r Erased, err error) {
	defer func() { slices.Sort(r.Wiped) }()
	f, err := e.rw()
	if err != nil {
		return r, err
	}
	rnd = randOr(rnd)
	for slot := range e.Header.NumSlots() {
		if e.Header.SlotActive(slot) {
			r.Removed = append(r.Removed, slot)
		}
	}
	if _, ok := e.Header.(*header.LUKS1); ok {
		for slot := range e.Header.NumSlots() {
			if e.Header.SlotActive(slot) {
				continue
			}
			if err := e.apply(f)(e.Header.WipeSlot(slot, rnd)); err != nil {
				r.Removed = nil
				return r, err
			}
			r.Wiped = append(r.Wiped, slot)
		}
	}
	removed := r.Removed
	r.Removed = nil
	for _, slot := range removed {
		if err := e.killSlot(f, slot, rnd); err != nil {
			return r, err
		}
		r.Removed = append(r.Removed, slot)
		r.Wiped = append(r.Wiped, slot)
	}
	return r, nil
}
