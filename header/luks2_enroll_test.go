package header

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
)

// TestLUKS2EnrollPowerCut: a power cut at every sector of every write of
// AddSlotToken (a keyslot and the token naming it) leaves either no new
// slot and no token, or the slot opening with its passphrase and the token
// naming it; never one without the other. The same holds for RemoveSlots
// of two slots and a token: all of them or none. The check itself refuses
// the state that an AddSlot followed by a separate ImportToken leaves
// between the two.
func TestLUKS2EnrollPowerCut(t *testing.T) {
	hh, vk, area, err := Format([]byte("pw0"), Params{Version: 2, Cipher: "aes-xts-plain64", PBKDF: "pbkdf2", ForceIterations: MinIterations, Rand: testRand("enroll")})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*LUKS2)
	area = area[:1<<20] // the copies and the first keyslot areas
	read := func(img []byte) (*LUKS2, error) {
		r, err := Read(metaReader(img), 0, h.Info().AreaSize)
		if err != nil {
			return nil, err
		}
		return r.(*LUKS2), nil
	}
	opens := func(img []byte, h *LUKS2, pass string, slot int) bool {
		_, _, err := h.Unlock(bytes.NewReader(img), 0, []byte(pass), slot)
		return err == nil
	}
	kdf := KDF{Type: "pbkdf2", Hash: "sha512", Iterations: MinIterations}
	js := []byte(`{"type":"systemd-recovery","keyslots":[]}`)
	// enrolled checks the two allowed states of slot 1 with token 0.
	enrolled := func(img []byte) error {
		got, err := read(img)
		if err != nil {
			return err
		}
		if !opens(img, got, "pw0", 0) {
			return fmt.Errorf("pw0 no longer opens slot 0")
		}
		tok, hasToken := got.Tokens[0]
		switch {
		case !got.SlotActive(1) && !hasToken && got.ActiveSlots() == 1:
			return nil
		case got.SlotActive(1) && hasToken && slices.Equal(tok.Keyslots, []string{"1"}) && tok.Type == "systemd-recovery" &&
			opens(img, got, "rk", 1) && got.Keyslots[1].KDF.Hash == "sha512" && got.Keyslots[1].AF.Hash == "sha512":
			return nil
		}
		return fmt.Errorf("slot 1 active %v, token 0 %v: not both, nor neither", got.SlotActive(1), hasToken)
	}
	// The check has teeth: the slot alone, as an AddSlot without its token
	// leaves it, is refused.
	alone, err := h.AddSlot(1, []byte("rk"), vk, kdf, testRand("alone"))
	if err != nil {
		t.Fatal(err)
	}
	img := bytes.Clone(area)
	applyTo(t, img, alone)
	if enrolled(img) == nil {
		t.Fatal("the check accepts a slot without its token")
	}

	u, id, err := h.AddSlotToken(1, []byte("rk"), vk, kdf, -1, js, testRand("enroll add"))
	if err != nil || id != 0 {
		t.Fatal(id, err)
	}
	n := 0
	for seed := range uint64(2) {
		n += crashPoints(t, area, u, 20+seed, enrolled)
	}
	t.Logf("enroll: %d crash points", n)
	if n < 200 {
		t.Errorf("enroll: only %d crash points", n)
	}
	applyTo(t, area, u)
	h = u.Header.(*LUKS2)
	if err := enrolled(area); err != nil || !h.SlotActive(1) {
		t.Fatalf("after the whole update: %v", err)
	}

	// A third slot, then slots 1 and 2 and token 0 go in one update.
	add, err := h.AddSlot(2, []byte("pw2"), vk, kdf, testRand("enroll add2"))
	if err != nil {
		t.Fatal(err)
	}
	applyTo(t, area, add)
	h = add.Header.(*LUKS2)
	rm, err := h.RemoveSlots([]int{1, 2}, []int{0}, testRand("enroll rm"))
	if err != nil {
		t.Fatal(err)
	}
	removed := func(img []byte) error {
		got, err := read(img)
		if err != nil {
			return err
		}
		_, hasToken := got.Tokens[0]
		switch {
		case got.SlotActive(1) && got.SlotActive(2) && hasToken && opens(img, got, "rk", 1) && opens(img, got, "pw2", 2):
		case !got.SlotActive(1) && !got.SlotActive(2) && !hasToken && got.ActiveSlots() == 1:
		default:
			return fmt.Errorf("slots 1 %v, 2 %v, token %v: a partial removal", got.SlotActive(1), got.SlotActive(2), hasToken)
		}
		if !opens(img, got, "pw0", 0) {
			return fmt.Errorf("pw0 no longer opens slot 0")
		}
		return nil
	}
	n = 0
	for seed := range uint64(2) {
		n += crashPoints(t, area, rm, 30+seed, removed)
	}
	t.Logf("wipe: %d crash points", n)
	if n < 200 {
		t.Errorf("wipe: only %d crash points", n)
	}
	applyTo(t, area, rm)
	got, err := read(area)
	if err != nil || got.ActiveSlots() != 1 || len(got.Tokens) != 0 || len(got.Digests[got.digest].Keyslots) != 1 {
		t.Fatalf("after the removal: %v", err)
	}
	// The wiped areas no longer hold the key material.
	for _, w := range rm.Writes[2:] {
		if !bytes.Equal(area[w.Offset:w.Offset+int64(len(w.Data))], w.Data) {
			t.Errorf("%s not written", w.What)
		}
	}
}
