package header

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// NewSectorCipher returns the payload sector cipher for volumeKey. It fails
// with an *UnsupportedCipherError for a cipher package cipher does not
// support, and with an error if the key is not KeyBytes long.
func (h *LUKS1) NewSectorCipher(volumeKey []byte) (cipher.Sector, error) {
	m, err := checkCipherKey(h.CipherName, h.CipherMode, h.KeyBytes)
	if err != nil {
		return nil, err
	}
	if len(volumeKey) != int(h.KeyBytes) {
		return nil, fmt.Errorf("volume key is %d bytes, header says %d", len(volumeKey), h.KeyBytes)
	}
	return m.NewSector(volumeKey, cipher.LUKS1)
}

// VerifyVolumeKey reports whether vk matches the header's master key digest.
// The comparison is constant-time.
func (h *LUKS1) VerifyVolumeKey(vk []byte) bool {
	if len(vk) != int(h.KeyBytes) || h.MKDigestIter == 0 {
		return false
	}
	d, err := deriveKey(h.HashSpec, vk, h.MKDigestSalt[:], h.MKDigestIter, DigestSize)
	if err != nil {
		return false
	}
	ok := subtle.ConstantTimeCompare(d, h.MKDigest[:]) == 1
	clear(d)
	return ok
}

func checkSlotIndex(slot int) error { return checkSlotRange(slot, NumSlots) }

// checkSlotRange refuses a slot number outside 0..n-1.
func checkSlotRange(slot, n int) error {
	if slot < 0 || slot >= n {
		return fmt.Errorf("key slot %d out of range (0 to %d)", slot, n-1)
	}
	return nil
}

// Unlock recovers the volume key with passphrase. The key material is read
// from r at base + KeyMaterialOffset*512, so base is the byte offset of the
// header itself. slot -1 tries the active slots 0..7 in order; otherwise only
// that slot is tried.
//
// It returns ErrNoMatchingKeyslot if the passphrase opens none of the active
// slots tried, ErrNoActiveKeyslot (wrapped) if there is none to try, an
// *UnsupportedCipherError or *UnsupportedHashError if the header's algorithms
// are not supported, ErrCorrupt if key material lies past the end of r or the
// key size does not suit the cipher, and I/O errors wrapped.
func (h *LUKS1) Unlock(r io.ReaderAt, base int64, passphrase []byte, slot int) (volumeKey []byte, usedSlot int, err error) {
	if _, err := checkCipherKey(h.CipherName, h.CipherMode, h.KeyBytes); err != nil {
		return nil, -1, err
	}
	if _, err := hashFunc(h.HashSpec); err != nil {
		return nil, -1, err
	}
	first, last := 0, NumSlots-1
	if slot != -1 {
		if err := checkSlotIndex(slot); err != nil {
			return nil, -1, err
		}
		if !h.Slots[slot].Active() {
			return nil, -1, fmt.Errorf("key slot %d is not active: %w", slot, ErrNoActiveKeyslot)
		}
		first, last = slot, slot
	}
	tried := false
	for i := first; i <= last; i++ {
		if !h.Slots[i].Active() {
			continue
		}
		tried = true
		vk, err := h.openSlot(r, base, passphrase, i)
		if err != nil {
			return nil, -1, err
		}
		if vk != nil {
			return vk, i, nil
		}
	}
	if !tried {
		return nil, -1, ErrNoActiveKeyslot
	}
	return nil, -1, ErrNoMatchingKeyslot
}

// openSlot tries one active slot. It returns nil, nil if the passphrase does
// not match, and an error only for what makes trying pointless.
func (h *LUKS1) openSlot(r io.ReaderAt, base int64, passphrase []byte, i int) ([]byte, error) {
	s := &h.Slots[i]
	if s.Iterations == 0 {
		return nil, parseErrorf(fmt.Sprintf("key slot %d", i), "active with zero iterations")
	}
	if s.Stripes != Stripes {
		return nil, parseErrorf(fmt.Sprintf("key slot %d", i), "%d stripes (want %d)", s.Stripes, Stripes)
	}
	size := h.KeyMaterialSectors() * SectorSize
	material := make([]byte, size)
	defer clear(material)
	off := base + int64(s.KeyMaterialOffset)*SectorSize
	if n, err := r.ReadAt(material, off); n < size {
		if err == nil || errors.Is(err, io.EOF) {
			return nil, parseErrorf(fmt.Sprintf("key slot %d", i), "key material at byte %d is beyond the end of the file", off)
		}
		return nil, fmt.Errorf("reading key slot %d: %w", i, err)
	}
	dk, err := deriveKey(h.HashSpec, passphrase, s.Salt[:], s.Iterations, int(h.KeyBytes))
	if err != nil {
		return nil, fmt.Errorf("key slot %d: %w", i, err)
	}
	if err := cryptMaterial(h.CipherSpec(), dk, material, false); err != nil {
		return nil, fmt.Errorf("key slot %d: %w", i, err)
	}
	vk, err := AFMerge(material, int(h.KeyBytes), Stripes, h.HashSpec)
	if err != nil {
		return nil, fmt.Errorf("key slot %d: %w", i, err)
	}
	if !h.VerifyVolumeKey(vk) {
		clear(vk)
		return nil, nil
	}
	return vk, nil
}

// SetKeySlot puts passphrase into the disabled slot: it fills h.Slots[slot]
// (active, a new salt from rnd, iterations) and returns the encrypted AF
// material to write at KeyMaterialOffset*512 bytes from the header start,
// KeyMaterialSectors()*512 bytes long. volumeKey must match the header's
// digest and iterations must be at least MinIterations. rnd nil means
// crypto/rand. On error h is unchanged.
func (h *LUKS1) SetKeySlot(slot int, passphrase, volumeKey []byte, iterations uint32, rnd io.Reader) (material []byte, err error) {
	return h.setKeySlot(slot, passphrase, volumeKey, iterations, rnd, true)
}

// setKeySlot is SetKeySlot; Format, which has just made the digest from
// volumeKey, skips the verification.
func (h *LUKS1) setKeySlot(slot int, passphrase, volumeKey []byte, iterations uint32, rnd io.Reader, verify bool) (material []byte, err error) {
	if err := checkSlotIndex(slot); err != nil {
		return nil, err
	}
	s := &h.Slots[slot]
	if s.State != SlotDisabled {
		return nil, fmt.Errorf("key slot %d is not disabled", slot)
	}
	if s.Stripes != Stripes || s.KeyMaterialOffset < PhdrSize/SectorSize {
		return nil, parseErrorf(fmt.Sprintf("key slot %d", slot), "bad layout (stripes %d, offset %d)", s.Stripes, s.KeyMaterialOffset)
	}
	if iterations < MinIterations {
		return nil, fmt.Errorf("%d iterations is below the minimum %d", iterations, MinIterations)
	}
	if _, err := checkCipherKey(h.CipherName, h.CipherMode, h.KeyBytes); err != nil {
		return nil, err
	}
	if len(volumeKey) != int(h.KeyBytes) {
		return nil, fmt.Errorf("volume key is %d bytes, header says %d", len(volumeKey), h.KeyBytes)
	}
	if verify && !h.VerifyVolumeKey(volumeKey) {
		return nil, errors.New("volume key does not match the header digest")
	}
	rnd = randReader(rnd)
	var salt [SaltSize]byte
	if _, err := io.ReadFull(rnd, salt[:]); err != nil {
		return nil, fmt.Errorf("reading random salt: %w", err)
	}
	split, err := AFSplit(volumeKey, Stripes, h.HashSpec, rnd)
	if err != nil {
		return nil, err
	}
	material = make([]byte, h.KeyMaterialSectors()*SectorSize)
	copy(material, split)
	clear(split)
	dk, err := deriveKey(h.HashSpec, passphrase, salt[:], iterations, int(h.KeyBytes))
	if err != nil {
		clear(material)
		return nil, err
	}
	if err := cryptMaterial(h.CipherSpec(), dk, material, true); err != nil {
		clear(material)
		return nil, err
	}
	s.State = SlotActive
	s.Iterations = iterations
	s.Salt = salt
	return material, nil
}

// DisableSlot marks the slot disabled and zeroes its salt and iterations, as
// cryptsetup's LUKS_del_key does. Its key material stays where it is; the
// caller wipes it. It panics if slot is not in 0..7.
func (h *LUKS1) DisableSlot(slot int) {
	if err := checkSlotIndex(slot); err != nil {
		panic("header: " + err.Error())
	}
	s := &h.Slots[slot]
	s.State = SlotDisabled
	s.Iterations = 0
	s.Salt = [SaltSize]byte{}
}

// FirstFreeSlot returns the lowest disabled slot, the one cryptsetup
// luksAddKey picks without --key-slot, or -1 if all eight are active.
func (h *LUKS1) FirstFreeSlot() int {
	for i := range h.Slots {
		if h.Slots[i].State == SlotDisabled {
			return i
		}
	}
	return -1
}
