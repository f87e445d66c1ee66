package cipher

import (
	"encoding/binary"
	"errors"
)

// Resealing: sealing sectors again so that they come out exactly as an
// earlier Seal made them, for a redo after a crash (an interrupted
// reencryption writes the tags it recorded). The deterministic modes need
// nothing for that; a random-IV mode takes each sector's IV from its tag
// slot instead of drawing a new one.

// ivResealer is implemented by the kernels of random-IV modes.
type ivResealer interface {
	reseal(dst, tags, src []byte, aadUnit uint64, sectorSize int) error
}

// Reseal is Seal with the IVs, for the random-IV modes, taken from tags
// (TagSize bytes per sector, as an earlier Seal wrote them): with the same
// key and plaintext it writes the same ciphertext and tags.
func (s *authSector) Reseal(dst, tags, src []byte, unit uint64) error {
	check(s.prefix, dst, src, s.g.SectorSize)
	s.checkTags(src, tags)
	if len(src) == 0 {
		return nil
	}
	if r, ok := s.k.(ivResealer); ok {
		return r.reseal(dst, tags, src, unit, s.g.SectorSize)
	}
	return s.k.seal(dst, tags, src, unit, unit+s.g.IVOffset, s.g.SectorSize)
}

// reseal seals each sector with the IV in its slot.
func (g *authGCM) reseal(dst, tags, src []byte, aadUnit uint64, ss int) error {
	if g.aead == nil {
		return errors.New("cipher: aes-gcm-random: the key was cleared")
	}
	n, step := len(src)/ss, uint64(ss/UnitSize)
	buf := make([]byte, 0, ss+gcmTag)
	var aad [8 + gcmIV]byte
	for j := range n {
		slot := tags[j*(gcmTag+gcmIV) : (j+1)*(gcmTag+gcmIV)]
		binary.LittleEndian.PutUint64(aad[:8], aadUnit+uint64(j)*step)
		copy(aad[8:], slot[gcmTag:])
		off := j * ss
		out := g.aead.Seal(buf[:0], slot[gcmTag:], src[off:off+ss], aad[:])
		copy(dst[off:off+ss], out[:ss])
		copy(slot[:gcmTag], out[ss:])
	}
	clear(buf[:cap(buf)])
	return nil
}
