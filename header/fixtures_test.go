package header

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/cryptimg/cryptimg/vectors"
)

// fixture is one entry of vectors/luks/cryptsetup-luks1.json.
type fixture struct {
	File               string   `json:"file"`
	Source             string   `json:"source"`
	Command            string   `json:"command"`
	Passphrase         string   `json:"passphrase"`
	VolumeKey          string   `json:"volume_key"`
	VolumeKeySource    string   `json:"volume_key_source"`
	UUID               string   `json:"uuid"`
	Hash               string   `json:"hash"`
	KeyBytes           uint32   `json:"key_bytes"`
	PayloadOffset      uint32   `json:"payload_offset"`
	MKDigestIterations uint32   `json:"mk_digest_iterations"`
	Slot0Iterations    uint32   `json:"slot0_iterations"`
	SlotOffsets        []uint32 `json:"slot_offsets"`
	AreaSize           int64    `json:"area_size"`
	OriginalSHA256     string   `json:"original_area_sha256"`
	Notes              string   `json:"notes"`
}

func loadFixtures(t testing.TB) ([]fixture, map[string][]byte) {
	t.Helper()
	b, err := vectors.ReadFile("luks/cryptsetup-luks1.json")
	if err != nil {
		t.Fatal(err)
	}
	var fs []fixture
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fs); err != nil {
		t.Fatal(err)
	}
	if len(fs) < 3 {
		t.Fatalf("%d fixtures, want 3", len(fs))
	}
	areas := map[string][]byte{}
	for _, f := range fs {
		z, err := vectors.ReadFile("luks/" + f.File)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		area, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		areas[f.File] = area
	}
	return fs, areas
}

// TestCryptsetupFixtures parses and unlocks headers made by cryptsetup 2.6.1
// and compares the volume key with the one cryptsetup dumped.
func TestCryptsetupFixtures(t *testing.T) {
	t.Parallel()
	fs, areas := loadFixtures(t)
	for _, f := range fs {
		t.Run(f.File, func(t *testing.T) {
			t.Parallel()
			area := areas[f.File]
			if int64(len(area)) != f.AreaSize || f.AreaSize%SectorSize != 0 {
				t.Fatalf("area %d bytes, metadata says %d", len(area), f.AreaSize)
			}
			h, err := readLUKS1(bytes.NewReader(area), 0, int64(len(area)))
			if err != nil {
				t.Fatal(err)
			}
			if h.UUID != f.UUID || h.HashSpec != f.Hash || h.KeyBytes != f.KeyBytes || h.PayloadOffset != f.PayloadOffset ||
				h.MKDigestIter != f.MKDigestIterations || h.Slots[0].Iterations != f.Slot0Iterations || h.CipherSpec() != "aes-cbc-essiv:sha256" {
				t.Fatalf("header %+v does not match the metadata %+v", h, f)
			}
			if h.AreaSize() != f.AreaSize {
				t.Errorf("AreaSize %d, want %d", h.AreaSize(), f.AreaSize)
			}
			for i, s := range h.Slots {
				if s.KeyMaterialOffset != f.SlotOffsets[i] || s.Active() != (i == 0) {
					t.Errorf("slot %d: %+v", i, s)
				}
			}
			// Byte-exact re-encoding of cryptsetup's 1024-byte phdr.
			if !bytes.Equal(h.Marshal(), area[:PhdrSize]) {
				t.Error("Marshal differs from cryptsetup's header bytes")
			}
			want, _ := hex.DecodeString(f.VolumeKey)
			vk, slot, err := h.Unlock(bytes.NewReader(area), 0, []byte(f.Passphrase), -1)
			if err != nil || slot != 0 || !bytes.Equal(vk, want) {
				t.Fatalf("Unlock = %x, %d, %v; want %x (%s)", vk, slot, err, want, f.VolumeKeySource)
			}
			if _, _, err := h.Unlock(bytes.NewReader(area), 0, []byte(f.Passphrase+"\n"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
				t.Errorf("wrong passphrase: %v", err)
			}
			// A slot added by this package to cryptsetup's header opens too.
			m, err := h.SetKeySlot(3, []byte("added"), vk, MinIterations, testRand(f.File))
			if err != nil {
				t.Fatal(err)
			}
			a2 := bytes.Clone(area)
			copy(a2, h.Marshal())
			copy(a2[int(h.Slots[3].KeyMaterialOffset)*SectorSize:], m)
			if got, slot, err := h.Unlock(bytes.NewReader(a2), 0, []byte("added"), -1); err != nil || slot != 3 || !bytes.Equal(got, want) {
				t.Fatalf("added slot: %d, %v", slot, err)
			}
		})
	}
}

// TestFixtureProvenance checks what the README promises: the disabled slots'
// areas are the only bytes changed (zeroed), and every fixture names its
// source and command.
func TestFixtureProvenance(t *testing.T) {
	fs, areas := loadFixtures(t)
	for _, f := range fs {
		area := areas[f.File]
		h, err := Parse(area)
		if err != nil {
			t.Fatal(err)
		}
		n := h.KeyMaterialSectors() * SectorSize
		for i := 1; i < NumSlots; i++ {
			off := int(h.Slots[i].KeyMaterialOffset) * SectorSize
			if !bytes.Equal(area[off:off+n], make([]byte, n)) {
				t.Errorf("%s: disabled slot %d area is not zeroed", f.File, i)
			}
		}
		if len(f.OriginalSHA256) != 64 || f.Source != "cryptsetup 2.6.1" || f.Command == "" {
			t.Errorf("%s: incomplete provenance", f.File)
		}
	}
}
