package header

// The policy facts of each LUKS version: what a header may hold and what
// Format picks for a zero field of Params. They are stated here once; the
// CLI checks its flags and writes its help from them, and Format and the
// readers check against the same values.

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"time"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// DefaultVersion is the LUKS version Format makes when Params.Version is
// 0: LUKS1, which qemu reads too, raw and inside qcow2 (cryptsetup 2.6.1's
// own default is LUKS2).
const DefaultVersion = 1

// Versions lists the LUKS versions this package reads and formats.
func Versions() []int { return []int{1, 2} }

// Key-slot KDFs, by the names LUKS2 stores and cryptsetup's --pbkdf takes.
const (
	PBKDF2   = "pbkdf2"
	Argon2i  = "argon2i"
	Argon2id = "argon2id"
)

// Defaults of Format, those of cryptsetup 2.6.1's luksFormat except the
// LUKS1 cipher (DefaultCipher).
const (
	DefaultHash         = "sha256"
	DefaultKeyBytes     = 32              // of the LUKS1 default cipher; each cipher has its own (cipher.Mode.DefaultKeyBytes)
	DefaultIterTime     = 2 * time.Second // cryptsetup's --iter-time, for either KDF
	DefaultAlignSectors = 2048            // 1 MiB, cryptsetup's DEFAULT_DISK_ALIGNMENT
	// DefaultLUKS2Sector is the LUKS2 sector size cryptsetup (2.4 and
	// later) picks for a file: 4096 bytes. Format uses it when
	// Params.SectorSize is 0.
	DefaultLUKS2Sector = cipher.MaxSectorSize
)

// Argon2 defaults of a new LUKS2 key slot (cryptsetup configure.ac): the
// memory is at most half of the RAM, the threads at most the CPUs.
const (
	DefaultArgon2Memory = 1 << 20 // KiB: 1 GiB
	MaxArgon2Threads    = 4
)

// Least forced costs (cryptsetup lib/utils_pbkdf.c verify_pbkdf_params).
const (
	MinIterations = 1000 // PBKDF2 iterations of a key slot, and of a digest when forced
	MinArgon2Time = 4    // argon2 passes
)

// DefaultCipher is the cipher specification Format uses for a header of
// version when Params.Cipher is empty, and "" for an unknown version:
//
//   - LUKS1: aes-cbc-essiv:sha256 with a 256-bit key, cryptimg's choice,
//     which every qemu and cryptsetup reads (cryptsetup 2.6.1's LUKS1
//     default is aes-xts-plain64);
//   - LUKS2: aes-xts-plain64 with a 512-bit key, cryptsetup 2.6.1's.
//
// The key size is the cipher's default (cipher.Mode.DefaultKeyBytes).
func DefaultCipher(version int) string {
	switch version {
	case 0, 1:
		return "aes-cbc-essiv:sha256"
	case 2:
		return "aes-xts-plain64"
	}
	return ""
}

// SlotCount is the number of key slots of a header of version: 8 for
// LUKS1 (the phdr's fixed array), 32 for LUKS2 (cryptsetup's
// LUKS2_KEYSLOTS_MAX), and 0 for an unknown version. A parsed header says
// the same through Header.NumSlots.
func SlotCount(version int) int {
	switch version {
	case 0, 1:
		return NumSlots
	case 2:
		return luks2MaxSlots
	}
	return 0
}

// KDFs lists the key-slot KDFs of version, its default first: pbkdf2
// alone for LUKS1; argon2id, argon2i and pbkdf2 for LUKS2.
func KDFs(version int) []string {
	switch version {
	case 0, 1:
		return []string{PBKDF2}
	case 2:
		return []string{Argon2id, Argon2i, PBKDF2}
	}
	return nil
}

// MinCost is the least forced cost of a key slot under kdf: PBKDF2
// iterations or argon2 passes (KDFOptions.Force, Params.ForceIterations).
func MinCost(kdf string) uint32 {
	if kdf == PBKDF2 {
		return MinIterations
	}
	return MinArgon2Time
}

// hashes are the hashes of PBKDF2 and the AF splitter that headers may
// name and Format takes, the default among them.
var hashes = []struct {
	name string
	new  func() hash.Hash
}{
	{"sha1", sha1.New},
	{"sha256", sha256.New},
	{"sha512", sha512.New},
}

// Hashes lists the hashes Params.Hash takes, as cryptsetup names them.
func Hashes() []string {
	s := make([]string, len(hashes))
	for i, h := range hashes {
		s[i] = h.name
	}
	return s
}

// SectorSizes lists the encryption sector sizes of version: 512 for LUKS1,
// every one of cipher.SectorSizes for LUKS2, none for an unknown version.
func SectorSizes(version int) []int {
	switch version {
	case 0, 1:
		return []int{SectorSize}
	case 2:
		return cipher.SectorSizes()
	}
	return nil
}
