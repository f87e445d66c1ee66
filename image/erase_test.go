package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

// namedFault is a faultFile as the key commands need it, with a name.
type namedFault struct{ *faultFile }

func (n namedFault) Name() string { return n.name }

// erasable makes an image with three keys, in slots[i] with pass[i].
func erasable(t *testing.T, p header.Params, slots []int) (content []byte, pass [][]byte) {
	t.Helper()
	f := newCreateFile(t, "img")
	if _, err := Create(context.Background(), f, 1<<20, createOpts(p)); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	pass = [][]byte{testPass}
	for _, s := range slots[1:] {
		pp := []byte("erase test " + string(rune('a'+s)))
		o := fast(s)
		o.PBKDF = "pbkdf2"
		if _, err := e.AddKey(k, pp, o); err != nil {
			t.Fatal(err)
		}
		pass = append(pass, pp)
	}
	content, err = os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return content, pass
}

// TestErasePowerLoss cuts the power before every write and sync of an
// erase: afterwards each slot that was there either still opens with its
// key or is disabled, never active with destroyed material, and the header
// always parses. Without a cut, no slot is left.
func TestErasePowerLoss(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     header.Params
		slots []int
		// atom: LUKS1 relies on its 1024-byte phdr reaching the disk
		// whole (the sector-atomic writes of a 4096-byte block device);
		// LUKS2's checksummed copies survive writes torn at 512 bytes.
		atom int64
	}{
		{"luks1", header.Params{}, []int{0, 3, 7}, 4096},
		{"luks2", header.Params{Version: 2}, []int{0, 5, 31}, 512},
	} {
		t.Run(c.name, func(t *testing.T) {
			content, pass := erasable(t, c.p, c.slots)
			size := int64(len(content))
			payload := content[len(content)-1<<20:]
			step := 1
			if raceEnabled {
				step = 4 // the race run looks for data races, not every crash state
			}
			for cut := 1; ; cut += step {
				d := newFaultDisk(uint64(cut))
				d.atom, d.crashAt = c.atom, cut
				ff := d.add("img", content)
				e, err := openImage(namedFault{ff}, size)
				if err != nil {
					t.Fatal(err)
				}
				err = e.Erase(nil)
				if err == nil {
					if n := e.Header.ActiveSlots(); n != 0 {
						t.Fatalf("erase left %d active slots", n)
					}
					r, err := openImage(bytes.NewReader(ff.cur), size)
					if err != nil || r.Header.ActiveSlots() != 0 {
						t.Fatalf("after erase: %v, %d active slots", err, r.Header.ActiveSlots())
					}
					t.Logf("%d cut points", cut-1)
					break
				}
				if !errors.Is(err, errCrash) {
					t.Fatalf("cut %d: %v", cut, err)
				}
				d.crash()
				r, err := openImage(bytes.NewReader(ff.durable), size)
				if err != nil {
					t.Fatalf("cut %d: the header does not parse: %v", cut, err)
				}
				for i, s := range c.slots {
					if !r.Header.SlotActive(s) {
						continue
					}
					if got, err := r.TestKey(pass[i], s); err != nil || got != s {
						t.Fatalf("cut %d: slot %d is active but its key fails: %v", cut, s, err)
					}
				}
				if !bytes.Equal(ff.durable[len(ff.durable)-1<<20:], payload) {
					t.Fatalf("cut %d: the payload changed", cut)
				}
			}
		})
	}
}

// TestEraseWipesEverySlot: LUKS1's disabled slots are overwritten too, and
// an image opened from a non-file is refused before anything is written.
func TestEraseWipesEverySlot(t *testing.T) {
	content, _ := erasable(t, header.Params{}, []int{0, 2, 4})
	d := newFaultDisk(1)
	ff := d.add("img", content)
	e, err := openImage(namedFault{ff}, int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	h := e.Header.(*header.LUKS1)
	n := int64(h.KeyMaterialSectors()) * header.SectorSize
	if err := e.Erase(nil); err != nil {
		t.Fatal(err)
	}
	for i, s := range h.Slots {
		off := int64(s.KeyMaterialOffset) * header.SectorSize
		for o := off; o < off+n; o += 512 {
			if bytes.Equal(content[o:o+512], ff.cur[o:o+512]) {
				t.Fatalf("slot %d: key material at byte %d unchanged", i, o)
			}
		}
	}
	ro, err := openImage(bytes.NewReader(content), int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	if err := ro.Erase(nil); err == nil {
		t.Error("Erase on a read-only reader succeeded")
	}
}
