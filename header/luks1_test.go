package header

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestLUKS1Info(t *testing.T) {
	h, vk, _ := testFormat(t, "pw", Params{Cipher: "aes-xts-plain64", KeyBytes: 64, AlignSectors: 8}, "info")
	defer clear(vk)
	i := h.Info()
	want := Info{Version: 1, UUID: h.UUID, Cipher: "aes-xts-plain64", KeyBytes: 64, Hash: "sha256", SectorSize: 512,
		PayloadOffset: int64(h.PayloadOffset) * 512, AreaSize: h.AreaSize()}
	if i != want {
		t.Fatalf("Info = %+v, want %+v", i, want)
	}
	// cryptsetup's LUKS1 layout for a 512-bit key with 4096-byte alignment:
	// slots of 500 sectors, 504 apart, from sector 8; the payload at the
	// end of the last one rounded up to 8 sectors.
	if i.PayloadOffset != 4040*512 || i.AreaSize != (8+7*504+500)*512 {
		t.Fatalf("payload %d, area %d", i.PayloadOffset, i.AreaSize)
	}
	if h.NumSlots() != 8 || !h.SlotActive(0) || h.SlotActive(1) || h.SlotActive(-1) || h.SlotActive(8) || h.ActiveSlots() != 1 || h.FirstFreeSlot() != 1 {
		t.Fatal("slot queries disagree with a fresh header")
	}
	for _, s := range []int{-1, 8, 31} {
		if err := h.CheckSlot(s); err == nil || !strings.Contains(err.Error(), "0 to 7") {
			t.Errorf("CheckSlot(%d) = %v", s, err)
		}
	}
	if err := h.CheckSlot(7); err != nil {
		t.Error(err)
	}
	if k, err := h.SlotKDF(KDFOptions{Force: 2000}); err != nil || k.Iterations != 2000 {
		t.Errorf("forced SlotKDF = %+v, %v", k, err)
	}
	if _, err := h.SlotKDF(KDFOptions{Force: 999}); err == nil {
		t.Error("SlotKDF took 999 forced iterations")
	}
	if k, err := h.SlotKDF(KDFOptions{IterTime: 20e6}); err != nil || k.Iterations < MinIterations {
		t.Errorf("measured SlotKDF = %+v, %v", k, err)
	}
}

// TestRekey checks the header reencrypt writes: a new volume key and the
// new cipher, the kept slots at their numbers with their passphrases, the
// payload where it was, the other slots gone, and random bytes where any
// key material was.
func TestRekey(t *testing.T) {
	h, vk, area := testFormat(t, "pw0", Params{KeyBytes: 32}, "rekey")
	for _, s := range []struct {
		slot int
		pass string
	}{{2, "pw2"}, {5, "pw5"}} {
		u, err := h.AddSlot(s.slot, []byte(s.pass), vk, KDF{Iterations: MinIterations}, testRand(s.pass))
		if err != nil {
			t.Fatal(err)
		}
		applyTo(t, area, u)
		h = u.Header.(*LUKS1)
	}
	keep := map[int][]byte{2: []byte("pw2"), 5: []byte("pw5")}
	p := Params{Cipher: "aes-xts-plain64", ForceIterations: MinIterations, UUID: h.UUID, Rand: testRand("rekey new")}
	nh, nvk, narea, err := h.Rekey(p, keep, int64(h.PayloadOffset)*SectorSize)
	if err != nil {
		t.Fatal(err)
	}
	i := nh.Info()
	if i.Cipher != "aes-xts-plain64" || i.KeyBytes != 64 || i.UUID != h.UUID || i.PayloadOffset != int64(h.PayloadOffset)*SectorSize {
		t.Fatalf("new header %+v", i)
	}
	if bytes.Equal(nvk[:32], vk) || len(nvk) != 64 {
		t.Fatal("volume key not new")
	}
	if int64(len(narea)) < max(h.AreaSize(), i.AreaSize) || len(narea)%SectorSize != 0 {
		t.Fatalf("area of %d bytes", len(narea))
	}
	got, err := Read(bytes.NewReader(narea), 0, int64(len(narea)))
	if err != nil {
		t.Fatal(err)
	}
	for slot := range 8 {
		_, wantActive := keep[slot]
		if got.SlotActive(slot) != wantActive {
			t.Errorf("slot %d active %v", slot, got.SlotActive(slot))
		}
	}
	for slot, pass := range keep {
		k, used, err := got.Unlock(bytes.NewReader(narea), 0, pass, -1)
		if err != nil || used != slot || !bytes.Equal(k, nvk) {
			t.Errorf("%s: slot %d, %v", pass, used, err)
		}
	}
	if _, _, err := got.Unlock(bytes.NewReader(narea), 0, []byte("pw0"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
		t.Errorf("removed slot 0 still opens: %v", err)
	}
	// No byte of the old slot 0 material survives (random fill).
	old0 := area[int64(h.Slots[0].KeyMaterialOffset)*SectorSize:][:h.KeyMaterialSectors()*SectorSize]
	if bytes.Contains(narea, old0[:64]) {
		t.Error("old key material survives in the new area")
	}
	if _, _, _, err := h.Rekey(p, keep, i.AreaSize-1); err == nil || !strings.Contains(err.Error(), "room") {
		t.Errorf("Rekey into too small a room: %v", err)
	}
	if _, _, _, err := h.Rekey(p, map[int][]byte{}, 1<<30); err == nil {
		t.Error("Rekey kept no slot")
	}
	if _, _, _, err := h.Rekey(p, map[int][]byte{9: []byte("x")}, 1<<30); err == nil {
		t.Error("Rekey kept slot 9")
	}
}

func TestReadMarked(t *testing.T) {
	h, vk, area := testFormat(t, "pw", Params{KeyBytes: 32}, "marked")
	defer clear(vk)
	file := append(make([]byte, 4096), area...)
	Mark(file[4096:])
	if _, err := Read(bytes.NewReader(file), 4096, int64(len(area))); !errors.Is(err, ErrMarked) {
		t.Fatalf("Read of a marked header: %v", err)
	}
	got, err := ReadMarked(bytes.NewReader(file), 4096, int64(len(area)))
	if err != nil || got.Info() != h.Info() {
		t.Fatalf("ReadMarked: %v", err)
	}
	if !IsMarked(file[4096:]) {
		t.Fatal("ReadMarked changed the bytes it read")
	}
	if _, _, err := got.Unlock(bytes.NewReader(file), 4096, []byte("pw"), -1); err != nil {
		t.Fatal(err)
	}
}
