package header

import (
	"bytes"
	"errors"
	"testing"
)

// applyTo carries out u on area, checking that every write is synced and
// inside the area.
func applyTo(t *testing.T, area []byte, u *Update) {
	t.Helper()
	for _, w := range u.Writes {
		if !w.Sync {
			t.Errorf("%s is not synced", w.What)
		}
		if w.Offset < 0 || w.Offset+int64(len(w.Data)) > int64(len(area)) {
			t.Fatalf("%s at %d+%d is outside the %d-byte area", w.What, w.Offset, len(w.Data), len(area))
		}
		copy(area[w.Offset:], w.Data)
	}
}

// TestUpdateOrder checks LUKS1's commit order: key material before the phdr
// that activates it, the phdr that disables a slot before the wipe, and a
// restore's slot area before its phdr; and that each result unlocks as it
// should when applied.
func TestUpdateOrder(t *testing.T) {
	h, vk, area := testFormat(t, "pw0", Params{KeyBytes: 32}, "update")
	orig := *h

	add, err := h.AddSlot(3, []byte("pw3"), vk, KDF{Iterations: MinIterations}, testRand("add"))
	if err != nil {
		t.Fatal(err)
	}
	if len(add.Writes) != 2 || add.Writes[0].Offset != int64(h.Slots[3].KeyMaterialOffset)*SectorSize || add.Writes[1].Offset != 0 {
		t.Fatalf("AddSlot writes: %+v", add.Writes)
	}
	if h.Slots[3].Active() || *h != orig {
		t.Fatal("AddSlot changed its receiver")
	}
	// A crash after the material but before the phdr: the old header
	// still opens with pw0 and has no slot 3.
	partial := bytes.Clone(area)
	copy(partial[add.Writes[0].Offset:], add.Writes[0].Data)
	if _, _, err := h.Unlock(bytes.NewReader(partial), 0, []byte("pw0"), -1); err != nil {
		t.Fatalf("old state after the material write: %v", err)
	}
	applyTo(t, area, add)
	nh, err := readLUKS1(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil || !nh.Slots[3].Active() {
		t.Fatalf("after AddSlot: %v", err)
	}
	if _, slot, err := nh.Unlock(bytes.NewReader(area), 0, []byte("pw3"), -1); err != nil || slot != 3 {
		t.Fatalf("pw3: slot %d, %v", slot, err)
	}

	kill, err := nh.KillSlot(3, testRand("kill"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kill.Writes) != 2 || kill.Writes[0].Offset != 0 || kill.Writes[1].Offset != int64(nh.Slots[3].KeyMaterialOffset)*SectorSize ||
		len(kill.Writes[1].Data) != nh.KeyMaterialSectors()*SectorSize {
		t.Fatalf("KillSlot writes: %+v", kill.Writes)
	}
	applyTo(t, area, kill)
	if _, _, err := kill.Header.Unlock(bytes.NewReader(area), 0, []byte("pw3"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
		t.Fatalf("pw3 after KillSlot: %v", err)
	}
	if _, err := kill.Header.KillSlot(8, nil); err == nil {
		t.Fatal("KillSlot(8) accepted")
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("WipeSlot of an active slot did not panic")
			}
		}()
		kill.Header.WipeSlot(0, nil)
	}()

	u, err := kill.Header.WithUUID("0F2A93B4-1C2D-4E5F-8A9B-0C1D2E3F4A5B")
	if err != nil || u.Header.Info().UUID != "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b" || len(u.Writes) != 1 || u.Writes[0].Offset != 0 {
		t.Fatalf("WithUUID: %+v, %v", u, err)
	}
	if _, err := kill.Header.WithUUID("nope"); !errors.Is(err, ErrInvalidUUID) {
		t.Fatalf("bad UUID: %v", err)
	}

	backup := bytes.Clone(area[:orig.BackupSize()])
	orig.Backup(backup)
	if !bytes.Equal(backup[phdrDefined:4096], make([]byte, 4096-phdrDefined)) || !bytes.Equal(backup[:phdrDefined], area[:phdrDefined]) {
		t.Fatal("Backup did not zero 592..4096 alone")
	}
	r, _ := orig.Restore(backup)
	if len(r.Writes) != 2 || r.Writes[0].Offset != PhdrSize || r.Writes[1].Offset != 0 {
		t.Fatalf("Restore writes: %+v", r.Writes)
	}
}
