package header

import (
	"io"
	"time"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// Header is a parsed LUKS header, whatever its version: what package image
// and the CLI need of one. [*LUKS1] and [*LUKS2] implement it; the
// version-specific fields (for a dump) are on the concrete types.
//
// Every method that changes the header returns an [*Update]: the writes and
// syncs in the order the format commits them, and the header they leave.
// The receiver itself never changes, so a caller that fails half-way
// through an update still holds the header that is on disk until the
// commit point.
type Header interface {
	// Info is the header's summary: version, UUID, cipher, geometry.
	Info() Info

	// NumSlots is the number of key slots the format has (8 for LUKS1,
	// 32 for LUKS2).
	NumSlots() int
	// SlotActive reports whether slot holds a key; false out of range.
	SlotActive(slot int) bool
	// ActiveSlots counts the active slots.
	ActiveSlots() int
	// FirstFreeSlot is the lowest slot that can take a new key, or -1.
	FirstFreeSlot() int
	// CheckSlot returns an error for a slot number out of range.
	CheckSlot(slot int) error

	// Unlock recovers the volume key with passphrase from the key slots
	// read from r, where the header starts at byte base; slot -1 tries
	// every active slot. It returns the key and the slot that opened.
	Unlock(r io.ReaderAt, base int64, passphrase []byte, slot int) (volumeKey []byte, usedSlot int, err error)
	// UnlockCost estimates the work of Unlock(…, slot) before it starts:
	// a hostile header may ask for hours of PBKDF2 or gigabytes of argon2.
	UnlockCost(slot int) Cost
	// VerifyVolumeKey reports whether vk is this header's volume key.
	VerifyVolumeKey(vk []byte) bool
	// NewSectorCipher is the payload cipher for the volume key.
	NewSectorCipher(volumeKey []byte) (cipher.Sector, error)
	// NewAuthSector is the payload cipher of an authenticated segment
	// (Info().Integrity set); NewSectorCipher refuses those with
	// ErrAuthenticated, and this refuses the others with
	// ErrNotAuthenticated.
	NewAuthSector(volumeKey []byte) (cipher.AuthSector, error)

	// SlotKDF is the key derivation and cost of a new key slot: forced,
	// or measured on this machine.
	SlotKDF(o KDFOptions) (KDF, error)
	// AddSlot puts passphrase into the free slot, with cost kdf.
	AddSlot(slot int, passphrase, volumeKey []byte, kdf KDF, rnd io.Reader) (*Update, error)
	// KillSlot disables slot and destroys its key material.
	KillSlot(slot int, rnd io.Reader) (*Update, error)
	// WipeSlot destroys the key material of a slot that is not active.
	WipeSlot(slot int, rnd io.Reader) (*Update, error)
	// WithUUID sets the UUID.
	WithUUID(uuid string) (*Update, error)
	// Rewrite writes the header as it is, to put an old header back.
	Rewrite() (*Update, error)

	// BackupSize is the size of a header backup file, as cryptsetup
	// luksHeaderBackup makes it.
	BackupSize() int64
	// Backup turns the first BackupSize bytes of the header area into the
	// backup file's content, in place.
	Backup(area []byte)
	// Restore writes a backup (cut to the room the image has) back over
	// the header area; the receiver is the backup's header.
	Restore(data []byte) (*Update, error)

	// Rekey makes the header of the same image under a new volume key and
	// p's cipher, hash and cost, with each slot of keep holding its
	// passphrase and the payload where it is. The UUID stays unless
	// p.UUID gives another; p.VolumeKey, if set, is the new volume key
	// instead of a random one. area is the whole new header
	// area (at least room bytes are never needed: a header that does not
	// fit in room bytes is an error). The caller clears volumeKey and area.
	Rekey(p Params, keep map[int][]byte, room int64) (h Header, volumeKey, area []byte, err error)
	// Mark marks the header in place as busy with an unfinished
	// operation, so that cryptsetup, qemu and cryptimg's other commands
	// refuse the image (ErrMarked) while its data is neither old nor new.
	// It is idempotent: a marked header (read with ReadMarked) needs no
	// writes.
	Mark() (*Update, error)
	// Unmark ends the mark of a header Mark returned: the header as it
	// is, in place (for a header whose area is complete otherwise).
	Unmark() (*Update, error)
	// MarkedBytes is how much of the start of the header area Mark and
	// Unmark write.
	MarkedBytes() int64
	// Install writes area, the complete header area of the receiver as
	// Rekey made it, over the marked header it replaces, in an order that
	// leaves the marked old header or the new one at every crash point.
	Install(area []byte) *Update
}

// MaxSlots is the most key slots any supported LUKS version has, for
// checking a slot number before a header is read; a header's own count is
// [Header.NumSlots].
const MaxSlots = luks2MaxSlots

// Info is what a header says about its image, in units of bytes.
type Info struct {
	Version  int
	UUID     string
	Cipher   string // cryptsetup specification, "aes-xts-plain64"
	KeyBytes int    // volume key size
	Hash     string // the hash of the digest and of the AF splitter
	// SectorSize is the size of an encrypted sector.
	SectorSize int
	// PayloadOffset is where the encrypted data starts, in bytes from the
	// header; 0 for a detached header.
	PayloadOffset int64
	// PayloadSize is the size of the encrypted data in bytes; 0 means up
	// to the end of the device (LUKS1, and LUKS2's "dynamic").
	PayloadSize int64
	// AreaSize is the end of the header's last key material, in bytes from
	// the header: what must be readable for the header to be whole.
	AreaSize int64
	// Integrity is the LUKS2 integrity type of an authenticated segment
	// ("hmac(sha256)", "aead"), else "".
	Integrity string
}

// KDF is a key slot's key derivation and its cost.
type KDF struct {
	Type               string // "pbkdf2" (LUKS1's only one), "argon2i" or "argon2id"
	Hash               string // pbkdf2's hash; "" means the header's
	Iterations         uint32 // pbkdf2
	Time, Memory, CPUs uint32 // argon2: passes, KiB, threads
}

// KDFOptions choose the KDF of a new key slot, as cryptsetup's --pbkdf,
// --iter-time, --pbkdf-force-iterations, --pbkdf-memory and
// --pbkdf-parallel do.
type KDFOptions struct {
	IterTime time.Duration // benchmark target; 0 means DefaultIterTime
	Force    uint32        // exact iterations (pbkdf2) or passes (argon2); 0 benchmarks
	PBKDF    string        // "" is the version's default: pbkdf2 for LUKS1, argon2id for LUKS2
	Memory   uint32        // argon2 KiB; 0: 1 GiB, at most half the RAM
	Parallel uint32        // argon2 threads; 0: up to 4, at most the CPUs
}

var _ Header = (*LUKS1)(nil)
