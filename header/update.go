package header

import (
	"fmt"
	"io"
)

// Write is one step of a header update: Data goes at Offset bytes from the
// start of the LUKS header, and with Sync the file is then flushed to stable
// storage before the next step.
type Write struct {
	Offset int64
	Data   []byte
	What   string // for error messages: "key slot 2 material", "LUKS header"
	Sync   bool
}

// Update is a header change in the order the format commits it: apply the
// Writes in order, and afterwards Header is what the image holds. The
// format, not its caller, decides that order, so that a crash between any
// two writes leaves either the old state or the new one (each method says
// which write is the commit point). Clear it after use: it may hold key
// material.
type Update struct {
	Writes []Write
	Header Header
}

// Clear wipes the data of every write.
func (u *Update) Clear() {
	for i := range u.Writes {
		clear(u.Writes[i].Data)
	}
}

// phdrWrite is the write of h's 1024-byte phdr, synced: LUKS1's only commit
// point.
func (h *LUKS1) phdrWrite() Write {
	return Write{Offset: 0, Data: h.Marshal(), What: "LUKS header", Sync: true}
}

// Rewrite writes h's phdr as it is: used to put an old header back.
func (h *LUKS1) Rewrite() (*Update, error) {
	return &Update{Writes: []Write{h.phdrWrite()}, Header: h}, nil
}

// AddSlot puts passphrase into the disabled slot: its key material is
// written into the slot's area and synced, then the phdr that activates it
// is written and synced (the commit point). Until then the image reads as
// before; the material only ever lands in an unused area. h is unchanged;
// the new header is in the update.
func (h *LUKS1) AddSlot(slot int, passphrase, volumeKey []byte, kdf KDF, rnd io.Reader) (*Update, error) {
	n := *h
	material, err := n.SetKeySlot(slot, passphrase, volumeKey, kdf.Iterations, rnd)
	if err != nil {
		return nil, err
	}
	return &Update{Writes: []Write{
		{Offset: int64(n.Slots[slot].KeyMaterialOffset) * SectorSize, Data: material, What: fmt.Sprintf("key slot %d material", slot), Sync: true},
		n.phdrWrite(),
	}, Header: &n}, nil
}

// KillSlot disables slot: the phdr without it is written and synced (the
// commit point), then the slot's key material is overwritten with random
// bytes from rnd (nil: crypto/rand) and synced, so a crash after the
// commit leaves a disabled slot whose old material is merely not yet
// wiped. h is unchanged.
func (h *LUKS1) KillSlot(slot int, rnd io.Reader) (*Update, error) {
	if err := checkSlotIndex(slot); err != nil {
		return nil, err
	}
	n := *h
	n.DisableSlot(slot)
	wipe, err := n.wipeWrite(slot, rnd)
	if err != nil {
		return nil, err
	}
	return &Update{Writes: []Write{n.phdrWrite(), wipe}, Header: &n}, nil
}

// WipeSlot overwrites the key material area of a disabled slot with random
// bytes, synced: used after a rolled-back AddSlot. It panics on an active
// slot, whose material must never be destroyed in place.
func (h *LUKS1) WipeSlot(slot int, rnd io.Reader) (*Update, error) {
	if err := checkSlotIndex(slot); err != nil {
		return nil, err
	}
	if h.Slots[slot].Active() {
		panic("header: internal error: wiping an active key slot")
	}
	wipe, err := h.wipeWrite(slot, rnd)
	if err != nil {
		return nil, err
	}
	return &Update{Writes: []Write{wipe}, Header: h}, nil
}

func (h *LUKS1) wipeWrite(slot int, rnd io.Reader) (Write, error) {
	buf := make([]byte, h.KeyMaterialSectors()*SectorSize)
	if _, err := io.ReadFull(randReader(rnd), buf); err != nil {
		return Write{}, fmt.Errorf("reading random wipe bytes: %w", err)
	}
	return Write{Offset: int64(h.Slots[slot].KeyMaterialOffset) * SectorSize, Data: buf,
		What: fmt.Sprintf("key slot %d wipe", slot), Sync: true}, nil
}

// WithUUID sets a new UUID, in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form and
// stored lower-case: one phdr write, synced.
func (h *LUKS1) WithUUID(uuid string) (*Update, error) {
	u, err := CanonicalUUID(uuid)
	if err != nil {
		return nil, err
	}
	n := *h
	n.UUID = u
	return n.Rewrite()
}

// backupAlign is the page size cryptsetup rounds a header backup to.
const backupAlign = 4096

// BackupSize is the size of a header backup: the end of the last key slot
// rounded up to 4096 bytes, as cryptsetup luksHeaderBackup makes it.
func (h *LUKS1) BackupSize() int64 {
	return (h.AreaSize() + backupAlign - 1) / backupAlign * backupAlign
}

// Backup turns area, the BackupSize bytes from the header start, into
// cryptsetup's luksHeaderBackup form in place: the bytes from 592 (the end
// of the defined phdr) up to the first key material, at most 4096, zeroed.
func (h *LUKS1) Backup(area []byte) {
	first := int64(h.Slots[0].KeyMaterialOffset)
	for i := range h.Slots {
		first = min(first, int64(h.Slots[i].KeyMaterialOffset))
	}
	end := min(int64(len(area)), backupAlign, max(first*SectorSize, phdrDefined))
	clear(area[phdrDefined:max(end, phdrDefined)])
}

// phdrDefined is the length of the defined part of the LUKS1 phdr.
const phdrDefined = 592

// Restore writes a backup's area back: the key slot area after the phdr
// first, synced, then the phdr, synced (the commit point). data is the
// backup cut to what the image has room for; h is its parsed header.
func (h *LUKS1) Restore(data []byte) (*Update, error) {
	return &Update{Writes: []Write{
		{Offset: PhdrSize, Data: data[PhdrSize:], What: "key slot area", Sync: true},
		{Offset: 0, Data: data[:PhdrSize], What: "LUKS header", Sync: true},
	}, Header: h}, nil
}
