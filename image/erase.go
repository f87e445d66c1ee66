package image

import (
	"io"

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
	f, err := e.rw()
	if err != nil {
		return err
	}
	rnd = randOr(rnd)
	if _, ok := e.Header.(*header.LUKS1); ok {
		for slot := range e.Header.NumSlots() {
			if e.Header.SlotActive(slot) {
				continue
			}
			if err := e.apply(f)(e.Header.WipeSlot(slot, rnd)); err != nil {
				return err
			}
		}
	}
	for slot := range e.Header.NumSlots() {
		if !e.Header.SlotActive(slot) {
			continue
		}
		if err := e.killSlot(f, slot, rnd); err != nil {
			return err
		}
	}
	return nil
}
