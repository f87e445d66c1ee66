package image

// Key slot and header management, following cryptsetup's luksAddKey,
// luksRemoveKey, luksChangeKey, luksKillSlot, luksHeaderBackup,
// luksHeaderRestore and luksUUID (cryptsetup lib/luks1/keymanage.c, lib/setup.c).
//
// Every update keeps the old key usable until the new state is durable. The
// order of writes and syncs is the format's (header.Update: AddSlot,
// KillSlot, WithUUID, RestoreUpdate); this file only carries updates out.
// For LUKS1: key material only ever goes into a disabled slot's area, and
// is fsynced before the 1024-byte phdr that activates it is written and
// fsynced; a slot is disabled by a phdr write (fsynced) before its material
// is overwritten with random bytes. The phdr write is the only commit point
// of each step.
// Offsets are relative to [Encrypted.HeaderOffset], so the same code serves
// raw LUKS and the LUKS area of a qcow2 image.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cryptimg/cryptimg/header"
)

var (
	// ErrNoFreeSlot reports that all eight key slots are active.
	ErrNoFreeSlot = errors.New("all key slots are in use")
	// ErrSlotInUse reports a requested new slot that is active
	// (cryptsetup: "Key slot N is full, please select another one").
	ErrSlotInUse = errors.New("key slot is full, select another one")
	// ErrSlotInactive reports a slot to remove that holds no key.
	ErrSlotInactive = errors.New("key slot is not active")
	// ErrLastSlot reports an attempt to remove the last active key slot
	// without RemoveOptions.AllowLast.
	ErrLastSlot = errors.New("this is the last active key slot: removing it makes the image permanently undecryptable")
	// ErrVolumeKeyMismatch reports a volume key that does not match the
	// header's master key digest.
	ErrVolumeKeyMismatch = errors.New("volume key does not match the volume")
	// ErrBackupMismatch reports a header backup made from another image.
	ErrBackupMismatch = errors.New("header backup does not match the image")
	// ErrVerifyFailed reports that a freshly written key slot did not
	// unlock when the image was reopened; the change was rolled back.
	ErrVerifyFailed = errors.New("new key slot failed to unlock after writing; the change was rolled back")
)

// SlotOptions choose the key slot a new passphrase goes into and its
// PBKDF2 cost.
type SlotOptions struct {
	// Slot is the new key slot, 0 to 7; -1 picks the lowest free one, as
	// cryptsetup does.
	Slot int
	// IterTime is the PBKDF2 time to aim for; 0 means
	// header.DefaultIterTime (2 s, cryptsetup's LUKS1 default).
	IterTime time.Duration
	// ForceIterations, when not zero, skips the benchmark
	// (--pbkdf-force-iterations): PBKDF2 iterations, at least
	// header.MinIterations, or argon2 passes, at least 4.
	ForceIterations uint32
	// PBKDF, PBKDFMemory and PBKDFParallel choose a LUKS2 slot's KDF
	// (header.KDFOptions); zero values give cryptsetup's defaults.
	PBKDF         string
	PBKDFMemory   uint32
	PBKDFParallel uint32
	// Rand is the source of salts, AF stripes and wipe bytes; nil means
	// crypto/rand.
	Rand io.Reader
}

// RemoveOptions guard the removal of a key slot.
type RemoveOptions struct {
	// AllowLast permits removing the last active slot.
	AllowLast bool
	// Rand is the source of the wipe bytes; nil means crypto/rand.
	Rand io.Reader
}

// ChangeOptions configure ChangeKey.
type ChangeOptions struct {
	SlotOptions
	// InPlace permits cryptsetup's in-place change when no slot is free:
	// the old slot's material is overwritten by the new one. A crash
	// between the two writes loses the key, so this must be asked for.
	InPlace bool
}

// rwFile is what updates need from the image file: an *os.File opened
// read-write.
type rwFile interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Name() string
}

func (e *Encrypted) rw() (rwFile, error) {
	f, ok := e.hdr().(rwFile)
	if !ok {
		return nil, errors.New("image: updates need the image opened from an *os.File")
	}
	return f, nil
}

func randOr(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}

// KeyFromVolumeKey returns a Key for a raw volume key, checked against
// the header's master key digest (cryptsetup --volume-key-file). The
// volume key is copied; a mismatch gives ErrVolumeKeyMismatch.
func (e *Encrypted) KeyFromVolumeKey(vk []byte) (*Key, error) {
	h := e.policy()
	if !h.VerifyVolumeKey(vk) {
		return nil, ErrVolumeKeyMismatch
	}
	return newKey(h, bytes.Clone(vk), -1)
}

// TestKey reports which slot passphrase opens (slot -1 tries them all),
// without keeping the volume key (cryptsetup open --test-passphrase).
func (e *Encrypted) TestKey(passphrase []byte, slot int) (int, error) {
	k, err := e.Unlock(passphrase, slot)
	if err != nil {
		return -1, err
	}
	k.Clear()
	return k.Slot, nil
}

// slotKDF returns the key derivation cost for a new slot.
func (e *Encrypted) slotKDF(o SlotOptions) (header.KDF, error) {
	return e.Header.SlotKDF(header.KDFOptions{IterTime: o.IterTime, Force: o.ForceIterations,
		PBKDF: o.PBKDF, Memory: o.PBKDFMemory, Parallel: o.PBKDFParallel})
}

// pickSlot returns the slot a new key goes into.
func (e *Encrypted) pickSlot(slot int) (int, error) {
	if slot == -1 {
		if s := e.Header.FirstFreeSlot(); s >= 0 {
			return s, nil
		}
		return -1, ErrNoFreeSlot
	}
	if err := e.Header.CheckSlot(slot); err != nil {
		return -1, err
	}
	if e.Header.SlotActive(slot) {
		return -1, fmt.Errorf("key slot %d: %w", slot, ErrSlotInUse)
	}
	return slot, nil
}

// applyUpdate carries out a header update, in the format's order, on the
// LUKS area at base in f.
func applyUpdate(f interface {
	io.WriterAt
	Sync() error
}, base int64, u *header.Update) error {
	for _, w := range u.Writes {
		if _, err := f.WriteAt(w.Data, base+w.Offset); err != nil {
			return fmt.Errorf("failed to write %s: %w", w.What, err)
		}
		if w.Sync {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("failed to sync %s: %w", w.What, err)
			}
		}
	}
	return nil
}

// apply carries out the update an update method returned (with its error)
// on e's image and makes its header e's header: e.apply(f)(h.KillSlot(…)).
func (e *Encrypted) apply(f rwFile) func(*header.Update, error) error {
	return func(u *header.Update, err error) error {
		if err != nil {
			return err
		}
		return e.applyNow(f, u)
	}
}

// Apply carries out a header change the caller made with a method only
// one LUKS version has (a LUKS2 label, priority or token), as update
// methods return it: e.Apply(l2.WithLabel(…)). A nil update with no error
// is nothing to do.
func (e *Encrypted) Apply(u *header.Update, err error) error {
	if err != nil || u == nil {
		return err
	}
	f, err := e.rw()
	if err != nil {
		return err
	}
	return e.applyNow(f, u)
}

func (e *Encrypted) applyNow(f rwFile, u *header.Update) error {
	defer u.Clear()
	if err := applyUpdate(f, e.HeaderOffset, u); err != nil {
		return err
	}
	e.Header = u.Header
	return nil
}

// verifySlot reopens the image through a new file descriptor and unlocks
// slot with passphrase.
func verifySlot(name string, passphrase []byte, slot int) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	e, err := Open(f)
	if errors.Is(err, ErrDetached) {
		e, err = OpenHeader(f)
	}
	if err != nil {
		return err
	}
	_, err = e.TestKey(passphrase, slot)
	return err
}

// AddKey puts passphrase into a free key slot using the volume key of k
// (from Unlock or KeyFromVolumeKey) and returns the slot. The material is
// written and synced before the header that activates it; the image is then
// reopened and the new slot unlocked before AddKey returns. Should that
// fail, the slot is disabled and wiped again and ErrVerifyFailed returned.
func (e *Encrypted) AddKey(k *Key, passphrase []byte, o SlotOptions) (int, error) {
	f, err := e.rw()
	if err != nil {
		return -1, err
	}
	slot, err := e.pickSlot(o.Slot)
	if err != nil {
		return -1, err
	}
	if len(passphrase) == 0 {
		return -1, errors.New("empty passphrase")
	}
	kdf, err := e.slotKDF(o)
	if err != nil {
		return -1, err
	}
	if err := e.addSlot(f, k.volume, passphrase, slot, kdf, o.Rand); err != nil {
		return -1, err
	}
	return slot, nil
}

// addSlot writes, activates and verifies one slot.
func (e *Encrypted) addSlot(f rwFile, vk, passphrase []byte, slot int, kdf header.KDF, rnd io.Reader) error {
	old := e.Header
	if err := e.apply(f)(old.AddSlot(slot, passphrase, vk, kdf, rnd)); err != nil {
		return err
	}
	if verr := verifySlot(f.Name(), passphrase, slot); verr != nil {
		// Roll back: the old header, then a wipe of the unusable slot.
		if err := e.apply(f)(old.Rewrite()); err != nil {
			return fmt.Errorf("%w (%v), and rolling back failed: %v", ErrVerifyFailed, verr, err)
		}
		if err := e.apply(f)(old.WipeSlot(slot, rnd)); err != nil {
			return fmt.Errorf("%w (%v), and wiping failed: %v", ErrVerifyFailed, verr, err)
		}
		return fmt.Errorf("%w: %v", ErrVerifyFailed, verr)
	}
	return nil
}

// KillSlot disables slot (header written and synced first) and then
// overwrites its key material with random bytes (cryptsetup
// luksKillSlot; checking a remaining passphrase is the caller's policy).
// The last active slot needs o.AllowLast.
func (e *Encrypted) KillSlot(slot int, o RemoveOptions) error {
	f, err := e.rw()
	if err != nil {
		return err
	}
	if err := e.Header.CheckSlot(slot); err != nil {
		return err
	}
	if !e.Header.SlotActive(slot) {
		return fmt.Errorf("key slot %d: %w", slot, ErrSlotInactive)
	}
	if e.Header.ActiveSlots() == 1 && !o.AllowLast {
		return ErrLastSlot
	}
	return e.killSlot(f, slot, o.Rand)
}

func (e *Encrypted) killSlot(f rwFile, slot int, rnd io.Reader) error {
	return e.apply(f)(e.Header.KillSlot(slot, rnd))
}

// RemoveKey removes the first slot passphrase opens (cryptsetup
// luksRemoveKey) and returns it. A wrong passphrase gives
// header.ErrNoMatchingKeyslot.
func (e *Encrypted) RemoveKey(passphrase []byte, o RemoveOptions) (int, error) {
	slot, err := e.TestKey(passphrase, -1)
	if err != nil {
		return -1, err
	}
	if err := e.KillSlot(slot, o); err != nil {
		return -1, err
	}
	return slot, nil
}

// ChangeKey replaces the passphrase of the slot k was unlocked from
// (k.Slot, from Unlock) with newPass and returns the slot that now holds
// it. As cryptsetup does for LUKS1, the new passphrase goes into a free
// slot (o.Slot, or the lowest free one), which is verified by reopening the
// image; only then is the old slot disabled and wiped. Until that header
// write the old passphrase works, after it the new one does. With no free
// slot it returns ErrNoFreeSlot unless o.InPlace, which reuses the old slot
// as cryptsetup does (disable and wipe, then write the new key: a crash in
// between loses that key).
func (e *Encrypted) ChangeKey(k *Key, newPass []byte, o ChangeOptions) (int, error) {
	f, err := e.rw()
	if err != nil {
		return -1, err
	}
	if len(newPass) == 0 {
		return -1, errors.New("empty passphrase")
	}
	from := k.Slot
	if !e.Header.SlotActive(from) {
		return -1, fmt.Errorf("key slot %d: %w", from, ErrSlotInactive)
	}
	to, err := e.pickSlot(o.Slot)
	inPlace := false
	if errors.Is(err, ErrNoFreeSlot) && o.InPlace {
		to, err, inPlace = from, nil, true
	}
	if err != nil {
		return -1, err
	}
	kdf, err := e.slotKDF(o.SlotOptions)
	if err != nil {
		return -1, err
	}
	if inPlace {
		// cryptsetup's order: the old slot is destroyed, then set again.
		if err := e.killSlot(f, from, o.Rand); err != nil {
			return -1, err
		}
		if err := e.addSlot(f, k.volume, newPass, to, kdf, o.Rand); err != nil {
			return -1, err
		}
		return to, nil
	}
	if err := e.addSlot(f, k.volume, newPass, to, kdf, o.Rand); err != nil {
		return -1, err
	}
	// Commit point: from this header write on only newPass opens the image.
	if err := e.killSlot(f, from, o.Rand); err != nil {
		return to, err
	}
	return to, nil
}

// SetUUID writes a new UUID into the header (cryptsetup luksUUID --uuid).
// It must be in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form; it is stored
// lower-case.
func (e *Encrypted) SetUUID(uuid string) error {
	f, err := e.rw()
	if err != nil {
		return err
	}
	return e.apply(f)(e.Header.WithUUID(uuid))
}

// HeaderBackup writes the LUKS header and key slot area to a new file at
// path, mode 0600, through a temporary file renamed when complete. The
// file is cryptsetup's luksHeaderBackup format: Header.BackupSize bytes, with the
// bytes from 592 up to the first key slot (at most 4096) zeroed. An
// existing path is refused (ErrExists) unless force, which replaces it
// by the same rename.
func (e *Encrypted) HeaderBackup(path string, force bool) error {
	n := e.Header.BackupSize()
	buf := make([]byte, n)
	defer clear(buf)
	m, err := e.hdr().ReadAt(buf, e.HeaderOffset)
	if m < len(buf) && err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("failed to read header area: %w", err)
	}
	if int64(m) < e.Header.Info().AreaSize {
		return fmt.Errorf("%w: header area is truncated", header.ErrCorrupt)
	}
	e.Header.Backup(buf)
	if lim := e.c.area().limit; lim < n {
		// Whatever follows the LUKS area (a qcow2 image's) is not part
		// of it.
		clear(buf[max(lim, e.Header.Info().AreaSize):])
	}
	o, err := CreateOutput(path, force)
	if err != nil {
		return err
	}
	defer o.Abort()
	if _, err := o.Write(buf); err != nil {
		return fmt.Errorf("failed to write header backup: %w", err)
	}
	return o.Commit()
}

// Restore is a checked header restore, ready to apply.
type Restore struct {
	// Current is the image's header, nil if it has none that parses (a
	// damaged image); CurrentErr says why.
	Current    header.Header
	CurrentErr error
	// Backup is the header in the backup file.
	Backup header.Header
	// Mismatch, when not nil, says how the backup differs from the
	// image's header (UUID, payload offset or key size); Apply refuses
	// it unless forced.
	Mismatch error

	f      rwFile
	offset int64 // header offset in the image
	data   []byte
}

// PrepareRestore reads the header backup at backupPath and checks it
// against the image f (opened read-write): the backup must be a valid
// LUKS1 header area; its area must fit where the image keeps its header
// (before the payload of a raw image, inside the LUKS area of a qcow2
// image); and, if the image has a readable header, the UUID, payload
// offset and key size must match (Mismatch). A damaged header is not an
// error: Current is then nil.
func PrepareRestore(f *os.File, backupPath string) (*Restore, error) {
	data, err := os.ReadFile(backupPath)
	if err != nil {
		return nil, fmt.Errorf("failed to read header backup: %w", err)
	}
	bh, err := header.Read(bytes.NewReader(data), 0, int64(len(data)))
	if err != nil {
		clear(data)
		return nil, fmt.Errorf("header backup %s: %w", backupPath, err)
	}
	r := &Restore{Backup: bh, f: f}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	var limit int64 // bytes available for the header area, -1 up to the payload
	if r.offset, limit, err = restoreArea(f, size); err != nil {
		return nil, err
	}
	e, err := Open(f)
	if errors.Is(err, ErrDetached) {
		e, err = OpenHeader(f) // a detached header file
	}
	if err == nil {
		r.Current = e.Header
	} else {
		r.CurrentErr = err
	}
	n := min(int64(len(data)), bh.BackupSize())
	bi := bh.Info()
	if limit < 0 {
		// Raw image: the area ends at the payload, which must exist.
		if p := bi.PayloadOffset; p != 0 {
			n = min(n, p)
			if size < p {
				return nil, fmt.Errorf("%w: the backup's payload offset %d lies beyond the end of the %d-byte image", ErrBackupMismatch, p, size)
			}
		}
	} else if bi.AreaSize > limit {
		return nil, fmt.Errorf("%w: the backup's key slots end at byte %d, past the %d-byte LUKS area", ErrBackupMismatch, bi.AreaSize, limit)
	} else {
		n = min(n, limit)
	}
	r.data = data[:n]
	if r.Current != nil {
		c := r.Current.Info()
		switch {
		case c.UUID != bi.UUID:
			r.Mismatch = fmt.Errorf("%w: UUID %s in the image, %s in the backup", ErrBackupMismatch, c.UUID, bi.UUID)
		case c.PayloadOffset != bi.PayloadOffset:
			r.Mismatch = fmt.Errorf("%w: payload offset %d in the image, %d in the backup", ErrBackupMismatch, c.PayloadOffset/SectorSize, bi.PayloadOffset/SectorSize)
		case c.KeyBytes != bi.KeyBytes:
			r.Mismatch = fmt.Errorf("%w: %d-bit key in the image, %d-bit in the backup", ErrBackupMismatch, c.KeyBytes*8, bi.KeyBytes*8)
		}
	}
	return r, nil
}

// Apply writes the backup's key slot area, syncs it, then writes the phdr
// and syncs again. A Mismatch is refused unless force is set. Apply
// discards the backup data, so it can run once.
func (r *Restore) Apply(force bool) error {
	if r.Mismatch != nil && !force {
		return r.Mismatch
	}
	if r.data == nil {
		return errors.New("image: header restore already applied or discarded")
	}
	defer r.Discard()
	u, err := r.Backup.Restore(r.data)
	if err != nil {
		return err
	}
	return applyUpdate(r.f, r.offset, u)
}

// Discard clears the backup data held for Apply; call it (deferred) when a
// prepared restore may not be applied.
func (r *Restore) Discard() {
	clear(r.data)
	r.data = nil
}
