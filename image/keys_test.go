package image

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

var testPass = []byte("view test") // newTestImage's passphrase

func fast(slot int) SlotOptions {
	return SlotOptions{Slot: slot, ForceIterations: header.MinIterations}
}

// reopen opens the image file again, as another process would.
func reopen(t *testing.T, f *os.File) *Encrypted {
	t.Helper()
	g, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	e, err := Open(g)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func slotMaterial(t *testing.T, f *os.File, e *Encrypted, slot int) []byte {
	t.Helper()
	b := make([]byte, e.Header.(*header.LUKS1).KeyMaterialSectors()*header.SectorSize)
	if _, err := f.ReadAt(b, e.HeaderOffset+int64(e.Header.(*header.LUKS1).Slots[slot].KeyMaterialOffset)*header.SectorSize); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAddKeyAndTestKey(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	slot, err := e.AddKey(k, []byte("second"), fast(-1))
	if err != nil || slot != 1 {
		t.Fatalf("AddKey = %d, %v; want slot 1", slot, err)
	}
	if slot, err := e.AddKey(k, []byte("fifth"), fast(5)); err != nil || slot != 5 {
		t.Fatalf("AddKey to slot 5 = %d, %v", slot, err)
	}
	r := reopen(t, f)
	for pass, want := range map[string]int{"view test": 0, "second": 1, "fifth": 5} {
		if got, err := r.TestKey([]byte(pass), -1); err != nil || got != want {
			t.Errorf("TestKey(%q) = %d, %v; want %d", pass, got, err, want)
		}
	}
	if it := r.Header.(*header.LUKS1).Slots[1].Iterations; it != header.MinIterations {
		t.Errorf("slot 1 iterations %d", it)
	}
	if _, err := r.TestKey([]byte("second"), 5); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("second in slot 5: %v, want ErrNoMatchingKeyslot", err)
	}
	if _, err := e.AddKey(k, []byte("x"), fast(5)); !errors.Is(err, ErrSlotInUse) {
		t.Errorf("AddKey to an active slot: %v, want ErrSlotInUse", err)
	}
	if _, err := e.AddKey(k, []byte("x"), fast(8)); err == nil {
		t.Error("AddKey to slot 8 succeeded")
	}
	if _, err := e.AddKey(k, []byte("x"), SlotOptions{Slot: -1, ForceIterations: 999}); err == nil {
		t.Error("999 forced iterations accepted")
	}
	for i := 0; i < 5; i++ {
		if _, err := e.AddKey(k, []byte{'p', byte(i)}, fast(-1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.AddKey(k, []byte("ninth"), fast(-1)); !errors.Is(err, ErrNoFreeSlot) {
		t.Errorf("ninth key: %v, want ErrNoFreeSlot", err)
	}
}

func TestAddKeyWithVolumeKey(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	vk, err := e.KeyFromVolumeKey(k.VolumeKey())
	if err != nil {
		t.Fatal(err)
	}
	defer vk.Clear()
	if _, err := e.AddKey(vk, []byte("from vk"), fast(-1)); err != nil {
		t.Fatal(err)
	}
	if _, err := reopen(t, f).TestKey([]byte("from vk"), 1); err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(k.VolumeKey())
	bad[0] ^= 1
	if _, err := e.KeyFromVolumeKey(bad); !errors.Is(err, ErrVolumeKeyMismatch) {
		t.Errorf("wrong volume key: %v", err)
	}
	if _, err := e.KeyFromVolumeKey(bad[:16]); !errors.Is(err, ErrVolumeKeyMismatch) {
		t.Errorf("short volume key: %v", err)
	}
}

func TestKillSlotWipesAndGuardsLast(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	if _, err := e.AddKey(k, []byte("second"), fast(-1)); err != nil {
		t.Fatal(err)
	}
	before := slotMaterial(t, f, e, 1)
	if err := e.KillSlot(1, RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	r := reopen(t, f)
	s := r.Header.(*header.LUKS1).Slots[1]
	if s.Active() || s.Iterations != 0 || s.Salt != [header.SaltSize]byte{} {
		t.Errorf("killed slot: %+v", s)
	}
	after := slotMaterial(t, f, r, 1)
	if bytes.Equal(before, after) || bytes.Count(after, []byte{0}) > len(after)/64 {
		t.Error("key material was not overwritten with random bytes")
	}
	if _, err := r.TestKey([]byte("second"), -1); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("removed key: %v", err)
	}
	if err := e.KillSlot(1, RemoveOptions{}); !errors.Is(err, ErrSlotInactive) {
		t.Errorf("killing an inactive slot: %v", err)
	}
	if err := e.KillSlot(0, RemoveOptions{}); !errors.Is(err, ErrLastSlot) {
		t.Errorf("killing the last slot: %v, want ErrLastSlot", err)
	}
	if _, err := e.RemoveKey(testPass, RemoveOptions{}); !errors.Is(err, ErrLastSlot) {
		t.Errorf("removing the last key: %v, want ErrLastSlot", err)
	}
	if _, err := e.RemoveKey(testPass, RemoveOptions{AllowLast: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := reopen(t, f).TestKey(testPass, -1); !errors.Is(err, header.ErrNoActiveKeyslot) {
		t.Errorf("after removing every key: %v", err)
	}
}

func TestRemoveKey(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	for _, p := range []string{"a", "b"} {
		if _, err := e.AddKey(k, []byte(p), fast(-1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.RemoveKey([]byte("c"), RemoveOptions{}); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("wrong passphrase: %v", err)
	}
	if slot, err := e.RemoveKey([]byte("a"), RemoveOptions{}); err != nil || slot != 1 {
		t.Fatalf("RemoveKey = %d, %v", slot, err)
	}
	r := reopen(t, f)
	if r.Header.(*header.LUKS1).Slots[1].Active() || !r.Header.(*header.LUKS1).Slots[2].Active() || !r.Header.(*header.LUKS1).Slots[0].Active() {
		t.Error("wrong slots after RemoveKey")
	}
}

func TestChangeKey(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	to, err := e.ChangeKey(k, []byte("new"), ChangeOptions{SlotOptions: fast(-1)})
	if err != nil || to != 1 {
		t.Fatalf("ChangeKey = %d, %v; want 1", to, err)
	}
	r := reopen(t, f)
	if _, err := r.TestKey(testPass, -1); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("old passphrase after change: %v", err)
	}
	if s, err := r.TestKey([]byte("new"), -1); err != nil || s != 1 {
		t.Errorf("new passphrase: %d, %v", s, err)
	}
	if _, err := e.ChangeKey(k, []byte("x"), ChangeOptions{SlotOptions: fast(-1)}); !errors.Is(err, ErrSlotInactive) {
		t.Errorf("changing a removed slot: %v", err)
	}
}

func TestChangeKeyInPlace(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	for i := 1; i < header.NumSlots; i++ {
		if _, err := e.AddKey(k, []byte{'k', byte('0' + i)}, fast(-1)); err != nil {
			t.Fatal(err)
		}
	}
	k3, err := e.Unlock([]byte("k3"), -1)
	if err != nil || k3.Slot != 3 {
		t.Fatal(k3, err)
	}
	defer k3.Clear()
	o := ChangeOptions{SlotOptions: fast(-1)}
	if _, err := e.ChangeKey(k3, []byte("new"), o); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("full header without InPlace: %v, want ErrNoFreeSlot", err)
	}
	o.InPlace = true
	if to, err := e.ChangeKey(k3, []byte("new"), o); err != nil || to != 3 {
		t.Fatalf("in-place ChangeKey = %d, %v", to, err)
	}
	r := reopen(t, f)
	if s, err := r.TestKey([]byte("new"), -1); err != nil || s != 3 {
		t.Errorf("new passphrase: %d, %v", s, err)
	}
	if _, err := r.TestKey([]byte("k3"), -1); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("old passphrase: %v", err)
	}
}

func TestSetUUID(t *testing.T) {
	f, e, _ := newTestImage(t, make([]byte, 4096))
	if err := e.SetUUID("not-a-uuid"); !errors.Is(err, header.ErrInvalidUUID) {
		t.Errorf("bad UUID: %v", err)
	}
	if err := e.SetUUID("0123ABCD-0000-4000-8000-00000000000F"); err != nil {
		t.Fatal(err)
	}
	r := reopen(t, f)
	if r.Header.Info().UUID != "0123abcd-0000-4000-8000-00000000000f" {
		t.Errorf("UUID %q", r.Header.Info().UUID)
	}
	if _, err := r.TestKey(testPass, 0); err != nil {
		t.Error(err)
	}
}

func TestHeaderBackupRestore(t *testing.T) {
	plain := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	f, e, k := newTestImage(t, plain)
	want := decryptedFile(t, f, e, k)
	dir := t.TempDir()
	backup := filepath.Join(dir, "hdr.img")
	if err := e.HeaderBackup(backup, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(backup)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != 1052672 {
		t.Errorf("backup mode %v size %d; want 0600, 1052672", st.Mode().Perm(), st.Size())
	}
	b, _ := os.ReadFile(backup)
	if !bytes.Equal(b[592:4096], make([]byte, 4096-592)) {
		t.Error("bytes 592..4095 of the backup are not zero")
	}
	if err := e.HeaderBackup(backup, false); !errors.Is(err, ErrExists) {
		t.Errorf("backup over an existing file: %v", err)
	}

	// Damage the image: zero the first MiB.
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f); err == nil {
		t.Fatal("damaged image opens")
	}
	r, err := PrepareRestore(f, backup)
	if err != nil {
		t.Fatal(err)
	}
	if r.Current != nil || r.Mismatch != nil {
		t.Fatalf("damaged image: current %v, mismatch %v", r.Current, r.Mismatch)
	}
	if err := r.Apply(false); err != nil {
		t.Fatal(err)
	}
	e2 := reopen(t, f)
	k2, err := e2.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Clear()
	if got := decryptedFile(t, f, e2, k2); !bytes.Equal(got, want) {
		t.Error("restored image decrypts differently")
	}

	// Another image's backup is refused unless forced.
	g, _, _ := newTestImage(t, plain)
	r, err = PrepareRestore(g, backup)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Mismatch, ErrBackupMismatch) {
		t.Fatalf("mismatch %v", r.Mismatch)
	}
	if err := r.Apply(false); !errors.Is(err, ErrBackupMismatch) {
		t.Errorf("Apply without force: %v", err)
	}
	if _, err := reopen(t, g).TestKey(testPass, 0); err != nil {
		t.Errorf("refused restore changed the image: %v", err)
	}

	// A backup that is not LUKS, or truncated, is refused.
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, make([]byte, 8192), 0o600)
	if _, err := PrepareRestore(f, junk); !errors.Is(err, header.ErrNotLUKS) {
		t.Errorf("junk backup: %v", err)
	}
	os.WriteFile(junk, b[:8192], 0o600)
	if _, err := PrepareRestore(f, junk); !errors.Is(err, header.ErrCorrupt) {
		t.Errorf("truncated backup: %v", err)
	}
}

// TestAddKeyRollsBackWhenVerifyFails swaps another image in under the
// file's name, so the reopen-and-unlock check fails: AddKey must put the
// old header back, wipe the slot and keep the old key working.
func TestAddKeyRollsBackWhenVerifyFails(t *testing.T) {
	f, e, k := newTestImage(t, make([]byte, 4096))
	g, _, _ := newTestImage(t, make([]byte, 4096))
	material := slotMaterial(t, f, e, 1)
	if err := os.Rename(g.Name(), f.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddKey(k, []byte("second"), fast(-1)); !errors.Is(err, ErrVerifyFailed) {
		t.Fatalf("AddKey = %v, want ErrVerifyFailed", err)
	}
	if e.Header.(*header.LUKS1).Slots[1].Active() {
		t.Error("in-memory header keeps the failed slot")
	}
	r, err := Open(f) // the original inode, still open
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.(*header.LUKS1).Slots[1].Active() {
		t.Fatal("on-disk header keeps the failed slot")
	}
	if after := slotMaterial(t, f, r, 1); bytes.Equal(after, material) {
		t.Error("failed slot's area was not rewritten")
	}
	if _, err := r.TestKey(testPass, 0); err != nil {
		t.Errorf("old key after rollback: %v", err)
	}
	if _, err := r.TestKey([]byte("second"), -1); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Errorf("rolled-back key: %v", err)
	}
}
