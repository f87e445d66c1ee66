package header

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

func TestUnlock(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		keyBytes int
		hash     string
	}{{16, "sha1"}, {24, "sha512"}, {32, "sha256"}} {
		t.Run(fmt.Sprintf("%d-%s", tt.keyBytes, tt.hash), func(t *testing.T) {
			t.Parallel()
			h, vk, area := testFormat(t, "correct horse", Params{KeyBytes: tt.keyBytes, Hash: tt.hash}, "unlock")
			if len(vk) != tt.keyBytes || !h.VerifyVolumeKey(vk) {
				t.Fatal("volume key does not match its digest")
			}
			r := bytes.NewReader(area)
			got, slot, err := h.Unlock(r, 0, []byte("correct horse"), -1)
			if err != nil || slot != 0 || !bytes.Equal(got, vk) {
				t.Fatalf("Unlock = %x, %d, %v; want %x, 0", got, slot, err, vk)
			}
			got, slot, err = h.Unlock(r, 0, []byte("correct horse"), 0)
			if err != nil || slot != 0 || !bytes.Equal(got, vk) {
				t.Fatalf("Unlock slot 0 = %x, %d, %v", got, slot, err)
			}
			for _, wrong := range []string{"correct horse\n", "", "Correct horse"} {
				if got, slot, err := h.Unlock(r, 0, []byte(wrong), -1); !errors.Is(err, ErrNoMatchingKeyslot) || got != nil || slot != -1 {
					t.Errorf("wrong passphrase %q: %x, %d, %v", wrong, got, slot, err)
				}
			}
			// An inactive slot asked for explicitly.
			if _, _, err := h.Unlock(r, 0, []byte("correct horse"), 1); !errors.Is(err, ErrNoActiveKeyslot) {
				t.Errorf("slot 1: err %v, want ErrNoActiveKeyslot", err)
			}
			for _, bad := range []int{-2, 8, 100} {
				if _, _, err := h.Unlock(r, 0, []byte("correct horse"), bad); err == nil || errors.Is(err, ErrNoMatchingKeyslot) {
					t.Errorf("slot %d: err %v, want a range error", bad, err)
				}
			}
			// Damaged key material: the passphrase no longer matches.
			damaged := bytes.Clone(area)
			damaged[8*SectorSize+100] ^= 1
			if _, _, err := h.Unlock(bytes.NewReader(damaged), 0, []byte("correct horse"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
				t.Errorf("damaged material: err %v, want ErrNoMatchingKeyslot", err)
			}
			// Key material cut off.
			if _, _, err := h.Unlock(bytes.NewReader(area[:9*SectorSize]), 0, []byte("correct horse"), -1); !errors.Is(err, ErrCorrupt) {
				t.Errorf("truncated: err %v, want ErrCorrupt", err)
			}
			// No active slot at all.
			h2 := *h
			h2.DisableSlot(0)
			if _, _, err := h2.Unlock(r, 0, []byte("correct horse"), -1); !errors.Is(err, ErrNoActiveKeyslot) || errors.Is(err, ErrNoMatchingKeyslot) {
				t.Errorf("no active slot: err %v, want ErrNoActiveKeyslot", err)
			}
			// The sector cipher for the payload.
			c, err := h.NewSectorCipher(vk)
			if err != nil || c == nil {
				t.Fatalf("NewSectorCipher: %v", err)
			}
			if _, err := h.NewSectorCipher(vk[1:]); err == nil {
				t.Error("NewSectorCipher accepted a short key")
			}
			if h.VerifyVolumeKey(append(bytes.Clone(vk[1:]), vk[0])) || h.VerifyVolumeKey(vk[1:]) || h.VerifyVolumeKey(nil) {
				t.Error("VerifyVolumeKey accepted a wrong key")
			}
		})
	}
}

func TestUnlockAtOffset(t *testing.T) {
	t.Parallel()
	h, vk, area := testFormat(t, "pw", Params{KeyBytes: 16, AlignSectors: 8}, "offset")
	file := append(make([]byte, 3*SectorSize+7), area...)
	got, _, err := h.Unlock(bytes.NewReader(file), 3*SectorSize+7, []byte("pw"), -1)
	if err != nil || !bytes.Equal(got, vk) {
		t.Fatalf("Unlock at offset: %v", err)
	}
	if _, _, err := h.Unlock(bytes.NewReader(file), 0, []byte("pw"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
		t.Fatalf("Unlock at the wrong base: err %v", err)
	}
	ioErr := errors.New("disk on fire")
	if _, _, err := h.Unlock(failingReader{ioErr}, 0, []byte("pw"), -1); !errors.Is(err, ioErr) {
		t.Fatalf("I/O error: err %v, want it wrapped", err)
	}
}

func TestUnlockUnsupported(t *testing.T) {
	t.Parallel()
	h, vk, area := testFormat(t, "pw", Params{KeyBytes: 32}, "unsupported")
	x := *h
	x.CipherName = "serpent"
	var uc *UnsupportedCipherError
	if _, _, err := x.Unlock(bytes.NewReader(area), 0, []byte("pw"), -1); !errors.As(err, &uc) || uc.Spec != "serpent-cbc-essiv:sha256" {
		t.Errorf("serpent Unlock: err %v, want *UnsupportedCipherError", err)
	}
	if _, err := x.NewSectorCipher(vk); !errors.As(err, &uc) {
		t.Errorf("serpent NewSectorCipher: err %v", err)
	}
	if _, err := x.SetKeySlot(1, []byte("pw"), vk, MinIterations, nil); !errors.As(err, &uc) {
		t.Errorf("serpent SetKeySlot: err %v", err)
	}
	z := *h
	z.KeyBytes = 17
	if _, _, err := z.Unlock(bytes.NewReader(area), 0, []byte("pw"), -1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("17-byte AES key: Unlock err %v, want ErrCorrupt", err)
	}
	if _, err := z.NewSectorCipher(make([]byte, 17)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("17-byte AES key: NewSectorCipher err %v, want ErrCorrupt", err)
	}
	y := *h
	y.HashSpec = "ripemd160"
	var uh *UnsupportedHashError
	if _, _, err := y.Unlock(bytes.NewReader(area), 0, []byte("pw"), -1); !errors.As(err, &uh) {
		t.Errorf("ripemd160 Unlock: err %v, want *UnsupportedHashError", err)
	}
	if y.VerifyVolumeKey(vk) {
		t.Error("VerifyVolumeKey with an unsupported hash returned true")
	}
}

// TestSetKeySlotAllSlots fills every slot with its own passphrase, checks each
// opens (by search and explicitly) and that disabling a slot closes it.
func TestSetKeySlotAllSlots(t *testing.T) {
	t.Parallel()
	h, vk, area := testFormat(t, "pass 0", Params{KeyBytes: 32, Hash: "sha256"}, "slots")
	rnd := testRand("slots")
	if _, err := h.SetKeySlot(0, []byte("again"), vk, MinIterations, rnd); err == nil {
		t.Fatal("SetKeySlot overwrote the active slot 0")
	}
	for i := 1; i < NumSlots; i++ {
		if f := h.FirstFreeSlot(); f != i {
			t.Fatalf("FirstFreeSlot = %d, want %d", f, i)
		}
		before := *h
		m, err := h.SetKeySlot(i, []byte(fmt.Sprintf("pass %d", i)), vk, MinIterations+uint32(i), rnd)
		if err != nil {
			t.Fatalf("SetKeySlot(%d): %v", i, err)
		}
		if len(m) != h.KeyMaterialSectors()*SectorSize {
			t.Fatalf("material %d bytes", len(m))
		}
		s := h.Slots[i]
		if !s.Active() || s.Iterations != MinIterations+uint32(i) || s.Salt == before.Slots[i].Salt || s.KeyMaterialOffset != before.Slots[i].KeyMaterialOffset {
			t.Fatalf("slot %d after SetKeySlot: %+v", i, s)
		}
		copy(area[int(s.KeyMaterialOffset)*SectorSize:], m)
	}
	if f := h.FirstFreeSlot(); f != -1 {
		t.Fatalf("FirstFreeSlot with all slots active = %d", f)
	}
	copy(area, h.Marshal())
	h2, err := readLUKS1(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(area)
	for i := range NumSlots {
		pass := []byte(fmt.Sprintf("pass %d", i))
		for _, try := range []int{-1, i} {
			got, slot, err := h2.Unlock(r, 0, pass, try)
			if err != nil || slot != i || !bytes.Equal(got, vk) {
				t.Fatalf("slot %d (asked %d): %x, %d, %v", i, try, got, slot, err)
			}
		}
		// Another slot's passphrase does not open this slot.
		if _, _, err := h2.Unlock(r, 0, []byte(fmt.Sprintf("pass %d", (i+1)%NumSlots)), i); !errors.Is(err, ErrNoMatchingKeyslot) {
			t.Fatalf("slot %d with another passphrase: %v", i, err)
		}
	}
	// Disable slot 5: its passphrase stops working, the others still work.
	h2.DisableSlot(5)
	if s := h2.Slots[5]; s.State != SlotDisabled || s.Iterations != 0 || s.Salt != [SaltSize]byte{} || s.KeyMaterialOffset == 0 || s.Stripes != Stripes {
		t.Fatalf("disabled slot: %+v", s)
	}
	h3, err := Parse(h2.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h3.Unlock(r, 0, []byte("pass 5"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
		t.Fatalf("disabled slot by search: %v", err)
	}
	if _, _, err := h3.Unlock(r, 0, []byte("pass 5"), 5); !errors.Is(err, ErrNoActiveKeyslot) {
		t.Fatalf("disabled slot explicitly: %v", err)
	}
	if _, slot, err := h3.Unlock(r, 0, []byte("pass 6"), -1); err != nil || slot != 6 {
		t.Fatalf("slot 6 after disabling 5: %d, %v", slot, err)
	}
	if f := h3.FirstFreeSlot(); f != 5 {
		t.Fatalf("FirstFreeSlot after disabling 5 = %d", f)
	}
	// The slot can be reused.
	m, err := h3.SetKeySlot(5, []byte("new 5"), vk, MinIterations, rnd)
	if err != nil {
		t.Fatal(err)
	}
	copy(area[int(h3.Slots[5].KeyMaterialOffset)*SectorSize:], m)
	if _, slot, err := h3.Unlock(bytes.NewReader(area), 0, []byte("new 5"), -1); err != nil || slot != 5 {
		t.Fatalf("reused slot 5: %d, %v", slot, err)
	}
}

func TestSetKeySlotErrors(t *testing.T) {
	t.Parallel()
	h, vk, _ := testFormat(t, "pw", Params{KeyBytes: 16}, "setkey")
	orig := *h
	wrongKey := bytes.Clone(vk)
	wrongKey[0] ^= 1
	tests := []struct {
		name string
		slot int
		key  []byte
		iter uint32
	}{
		{"slot -1", -1, vk, MinIterations},
		{"slot 8", 8, vk, MinIterations},
		{"active slot", 0, vk, MinIterations},
		{"wrong key", 1, wrongKey, MinIterations},
		{"short key", 1, vk[:15], MinIterations},
		{"too few iterations", 1, vk, MinIterations - 1},
	}
	for _, tt := range tests {
		if m, err := h.SetKeySlot(tt.slot, []byte("x"), tt.key, tt.iter, nil); err == nil || m != nil {
			t.Errorf("%s: SetKeySlot succeeded", tt.name)
		}
		if *h != orig {
			t.Fatalf("%s: failed SetKeySlot changed the header", tt.name)
		}
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("DisableSlot(8) did not panic")
		}
	}()
	h.DisableSlot(8)
}
