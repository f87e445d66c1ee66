//go:build !purego

package asm

import (
	"encoding/binary"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// Regenerate cbc_arm64.s and cbc_arm64_stubs.go with GOARCH=arm64 go generate ./asm
// (the generator itself runs on the host architecture).
//
//go:generate env -u GOARCH go run gen_arm64.go
//go:generate env -u GOARCH go run gen_xts_arm64.go

// # arm64 key layout
//
// Schedule.enc holds the FIPS-197 round keys rk[0..nr] as bytes, 16 per
// round, in the order AESE consumes them (rk[0] is the key's first 16
// bytes). Schedule.dec holds the keys of the equivalent inverse cipher in
// the order AESD consumes them: rk[nr], InvMixColumns(rk[nr-1]), ...,
// InvMixColumns(rk[1]), rk[0]. The kernels in cbc_arm64.s load them into
// V(31-nr)..V31, so the last key used is always V31.

// ceImpl is the ARMv8 Crypto Extensions implementation.
var ceImpl = Impl{Name: "arm64-ce", Encrypt: encryptCE, Decrypt: decryptCE}

// archImpls lists the arm64 kernels this CPU supports, best first. The
// caller copies the slice.
func archImpls() []Impl {
	if cpu.ARM64.HasAES {
		return ceImpls
	}
	return nil
}

var ceImpls = []Impl{ceImpl}

// expandKey fills s.enc and s.dec from key. The S-box and InvMixColumns
// come from the AES instructions, not from tables, so the expansion has no
// key-dependent memory accesses. Without the AES extension the kernels are
// never used and the schedule is left empty.
func expandKey(s *Schedule, key []byte) {
	if !cpu.ARM64.HasAES {
		return
	}
	nk := len(key) / 4
	nw := 4 * (s.rounds + 1)
	// Words are little endian, so storing them back writes the key bytes
	// in their original order; byte 0 of a word is its low byte.
	var w [60]uint32
	for i := range nk {
		w[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	rcon := uint32(1)
	for i := nk; i < nw; i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			// RotWord moves byte 0 to byte 3: a right rotation of the
			// little-endian word. Rcon goes into byte 0.
			t = subWordCE(bits.RotateLeft32(t, -8)) ^ rcon
			rcon <<= 1
			if rcon == 0x100 {
				rcon = 0x1b
			}
		case nk > 6 && i%nk == 4:
			t = subWordCE(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i := range nw {
		binary.LittleEndian.PutUint32(s.enc[4*i:], w[i])
	}
	clear(w[:])

	nr := s.rounds
	copy(s.dec[:BlockSize], s.enc[nr*BlockSize:])
	for i := 1; i < nr; i++ {
		invMixColumnsCE((*[BlockSize]byte)(s.dec[i*BlockSize:]), (*[BlockSize]byte)(s.enc[(nr-i)*BlockSize:]))
	}
	copy(s.dec[nr*BlockSize:], s.enc[:BlockSize])
}

// checkArgs guards the assembly against buffers that break the SectorFunc
// contract. It returns the number of sectors.
func checkArgs(dst, src []byte, sectorSize int) int {
	if sectorSize <= 0 || sectorSize%BlockSize != 0 {
		panic("asm: sector size not a positive multiple of the block size")
	}
	if len(src)%sectorSize != 0 {
		panic("asm: input not full sectors")
	}
	if len(dst) < len(src) {
		panic("asm: output smaller than input")
	}
	return len(src) / sectorSize
}

// encryptCE encrypts the batch in groups of up to 8 sectors run side by
// side in interleaved lanes: CBC encryption is serial within a sector, so
// only independent sectors can keep the AES units busy.
//
// A lane group shorter than the AES pipeline (latency × issue width, about
// 3–4 blocks on common cores) leaves it partly idle, so when the batch
// ends in 1–3 leftover sectors after a full group, the last 8+r sectors
// are split into two groups of 4–6 lanes instead of 8 lanes plus r lanes.
func encryptCE(k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int) {
	n := checkArgs(dst, src, sectorSize)
	step := uint64(sectorSize / 512)
	full, tail := n/8, n%8
	last := [2]int{tail, 0}
	if full > 0 && tail > 0 && tail < 4 {
		full--
		last = [2]int{(8 + tail + 1) / 2, (8 + tail) / 2}
	}
	if full > 0 {
		encLanes(8, full, k, ivk, dst, src, firstSector, sectorSize)
		done := full * 8 * sectorSize
		dst, src = dst[done:], src[done:]
		firstSector += uint64(full*8) * step
	}
	for _, lanes := range last {
		if lanes == 0 {
			continue
		}
		encLanes(lanes, 1, k, ivk, dst, src, firstSector, sectorSize)
		done := lanes * sectorSize
		dst, src = dst[done:], src[done:]
		firstSector += uint64(lanes) * step
	}
}

// encLanes encrypts groups×lanes sectors at the start of src with the
// kernel for that many lanes.
func encLanes(lanes, groups int, k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int) {
	xk, nr, ivxk, ivnr, d, s := k.enc, k.rounds, ivk.enc, ivk.rounds, &dst[0], &src[0]
	step := uint64(sectorSize / 512)
	switch lanes {
	case 1:
		encLanes1CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 2:
		encLanes2CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 3:
		encLanes3CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 4:
		encLanes4CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 5:
		encLanes5CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 6:
		encLanes6CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 7:
		encLanes7CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	case 8:
		encLanes8CE(xk, nr, ivxk, ivnr, d, s, groups, sectorSize, firstSector, step)
	default:
		panic("asm: internal error: bad lane count")
	}
}

// decryptCE decrypts the whole batch in one call: CBC decryption is
// parallel within a sector, so no lanes are needed.
func decryptCE(k, ivk *Schedule, dst, src []byte, firstSector uint64, sectorSize int) {
	n := checkArgs(dst, src, sectorSize)
	if n == 0 {
		return
	}
	decCE(k.dec, k.rounds, ivk.enc, ivk.rounds, &dst[0], &src[0], n, sectorSize, firstSector, uint64(sectorSize/512))
}

// xtsArchImpls lists the arm64 XTS kernels this CPU supports.
func xtsArchImpls() []XTSImpl {
	if cpu.ARM64.HasAES {
		return []XTSImpl{{Name: "arm64-ce", Encrypt: xtsEnc(xtsEncCE), Decrypt: xtsDec(xtsDecCE)}}
	}
	return nil
}
