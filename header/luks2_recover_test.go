package header

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// luks2WithMetadata is a LUKS2 header area laid out as cryptsetup lays it
// out with --luks2-metadata-size hdr: both copies of hdr bytes, keyslot 0's
// material at 2*hdr, a keyslots area up to the data at 16 MiB. It is the
// header area of h (which has 16 KiB copies) with its copies re-made at the
// new size and the key material moved (its IVs count from the area, so it
// moves as it is). Zeros follow the returned bytes.
func luks2WithMetadata(t *testing.T, h *LUKS2, area []byte, hdr int64) []byte {
	t.Helper()
	k := *h.Keyslots[0]
	material := area[k.Area.Offset : k.Area.Offset+k.Area.Size]
	n := h.clone()
	n.bin.HdrSize = hdr
	n.Config.JSONSize = u64s(hdr - luks2BinSize)
	n.Config.KeyslotsSize = u64s(luks2DataOffset - 2*hdr)
	n.Config.changed = true
	k.Area.Offset = u64s(2 * hdr)
	k.changed = true
	n.Keyslots = map[int]*Keyslot{0: &k}
	meta, err := n.marshalCopies(testRand("metadata"))
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, 2*hdr+int64(len(material)))
	copy(img, meta)
	copy(img[2*hdr:], material)
	return img
}

// TestLUKS2LostPrimary: for each metadata size cryptsetup allows (16 KiB to
// 4 MiB), a LUKS2 header whose first 4 KiB are zeroed is found by its
// secondary copy, as cryptsetup finds it: Read warns and says which copy
// (Recovered), the passphrase unlocks, Marked reads it too, a backup holds
// both copies made anew, and Repair, or
// any other change, writes a primary that reads without a warning. With the
// secondary damaged as well the area is not LUKS (ErrNotLUKS). Streamed,
// the header area is found through the secondary as well.
func TestLUKS2LostPrimary(t *testing.T) {
	hh, vk, area, err := Format([]byte("pw"), Params{Version: 2, Cipher: "aes-xts-plain64", PBKDF: "pbkdf2",
		ForceIterations: MinIterations, Rand: testRand("lost")})
	if err != nil {
		t.Fatal(err)
	}
	base := hh.(*LUKS2)
	read := func(img []byte) (*LUKS2, error) {
		h, err := Read(metaReader(img), 0, luks2DataOffset)
		if err != nil {
			return nil, err
		}
		return h.(*LUKS2), nil
	}
	for _, hdr := range luks2HdrSizes {
		t.Run(sizeName(hdr), func(t *testing.T) {
			img := luks2WithMetadata(t, base, area, hdr)
			if h, err := read(img); err != nil || h.Warning != "" || h.Recovered() != 0 || h.MetadataSize() != hdr {
				t.Fatalf("intact: %v, %+v", err, h)
			}
			clear(img[:4096])
			h, err := read(img)
			if err != nil {
				t.Fatalf("zeroed primary: %v", err)
			}
			want := "primary LUKS2 header damaged, using the secondary copy at " + sizeName(hdr)
			if h.Recovered() != hdr || h.MetadataSize() != hdr || h.Warning != want {
				t.Fatalf("recovered from %d (metadata %d), warning %q; want %d, %q", h.Recovered(), h.MetadataSize(), h.Warning, hdr, want)
			}
			got, slot, err := h.Unlock(metaReader(img), 0, []byte("pw"), -1)
			if err != nil || slot != 0 || !bytes.Equal(got, vk) {
				t.Fatalf("unlock: slot %d, %v", slot, err)
			}
			if m, err := Marked(metaReader(img), 0, luks2DataOffset); m || err != nil {
				t.Errorf("Marked: %v, %v", m, err)
			}
			backup := make([]byte, h.BackupSize())
			copy(backup, img)
			h.Backup(backup)
			if b, err := read(backup); err != nil || b.Warning != "" || b.SeqID() != h.SeqID() || !bytes.Equal(backup[2*hdr:len(img)], img[2*hdr:]) {
				t.Errorf("backup: %v, warning %q", err, b.Warning)
			}

			// Streamed: the header area is read up to the payload and
			// the lost primary found in it as in a file.
			stream := make([]byte, luks2DataOffset+4096)
			copy(stream, img)
			if n := streamedLength(t, stream); n != luks2DataOffset {
				t.Errorf("stream: header area of %d bytes", n)
			} else if s, err := Read(bytes.NewReader(stream[:n]), 0, n); err != nil || s.(*LUKS2).Recovered() != hdr {
				t.Errorf("stream: %v", err)
			}

			for name, change := range map[string]func() (*Update, error){
				"repair": h.Repair,
				"add-key": func() (*Update, error) {
					return h.AddSlot(1, []byte("pw1"), vk, KDF{Type: "pbkdf2", Iterations: MinIterations}, testRand("add"))
				},
			} {
				fixed := bytes.Clone(img)
				u, err := change()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, w := range u.Writes {
					if end := w.Offset + int64(len(w.Data)); end > int64(len(fixed)) {
						fixed = append(fixed, make([]byte, end-int64(len(fixed)))...)
					}
					copy(fixed[w.Offset:], w.Data)
				}
				r, err := read(fixed)
				if err != nil || r.Warning != "" || r.Recovered() != 0 || r.SeqID() != h.SeqID()+1 || r.MetadataSize() != hdr {
					t.Fatalf("after %s: %v, warning %q", name, err, r.Warning)
				}
				if !IsLUKSMagic(fixed) {
					t.Errorf("after %s: no primary magic", name)
				}
				if _, _, err := r.Unlock(metaReader(fixed), 0, []byte("pw"), 0); err != nil {
					t.Errorf("after %s: %v", name, err)
				}
			}

			img[hdr+luks2BinSize+1] ^= 1 // the secondary's JSON: its checksum fails
			if _, err := read(img); !errors.Is(err, ErrNotLUKS) {
				t.Errorf("both copies damaged: %v", err)
			}
		})
	}
}

// streamedLength asks StreamLength for the header area at the start of
// stream as image.OpenStream does, failing the test on an error.
func streamedLength(t *testing.T, stream []byte) int64 {
	t.Helper()
	n := 0
	for {
		length, need, err := StreamLength(stream[:n])
		if err != nil {
			t.Fatalf("StreamLength after %d bytes: %v", n, err)
		}
		if need == 0 {
			return length
		}
		if need <= n || need > len(stream) {
			t.Fatalf("StreamLength after %d bytes needs %d", n, need)
		}
		n = need
	}
}

// TestLUKS2ProbeOnlySecondary: the probe for a lost primary takes only a
// LUKS2 secondary copy that says it is where it was found and whose
// checksum holds, so a LUKS1 header, a random file, a secondary moved to
// another offset or one with a bad checksum stay what they were; with a
// stale primary (good, lower seqid) the newer secondary wins and says so.
func TestLUKS2ProbeOnlySecondary(t *testing.T) {
	random := make([]byte, 1<<20)
	testRand("random").Read(random)
	if _, err := Read(bytes.NewReader(random), 0, int64(len(random))); !errors.Is(err, ErrNotLUKS) {
		t.Errorf("random file: %v", err)
	}
	// A stream that is not LUKS: refused once no secondary can follow.
	random = make([]byte, 4<<20+4096)
	testRand("random").Read(random)
	n := 0
	for {
		_, need, err := StreamLength(random[:n])
		if err != nil {
			if !errors.Is(err, ErrNotLUKS) || n != len(random) {
				t.Errorf("random stream: %v after %d bytes", err, n)
			}
			break
		}
		if need <= n || need > len(random) {
			t.Fatalf("random stream: after %d bytes needs %d", n, need)
		}
		n = need
	}
	l1, _, l1area := testFormat(t, "pw", Params{KeyBytes: 32}, "probe")
	if h, err := Read(metaReader(l1area), 0, l1.AreaSize()); err != nil || h.Info().Version != 1 {
		t.Errorf("LUKS1: %v", err)
	}

	file := luks2File(t, minimalLUKS2)
	clear(file[:4096])
	h, err := readL2(file)
	if err != nil || h.Recovered() != 0x4000 {
		t.Fatalf("zeroed primary: %v", err)
	}
	// The secondary copied to 32 KiB: its hdr_offset says 16 KiB.
	moved := make([]byte, len(file)+0x4000)
	copy(moved[0x8000:], file[0x4000:0x8000])
	if _, err := readL2(moved); !errors.Is(err, ErrNotLUKS) {
		t.Errorf("secondary at the wrong offset: %v", err)
	}
	file[0x4000+l2OffLabel] = 'x' // not covered by a new checksum
	if _, err := readL2(file); !errors.Is(err, ErrNotLUKS) {
		t.Errorf("secondary with a bad checksum: %v", err)
	}

	stale := luks2File(t, minimalLUKS2, 3, 7)
	if h, err := readL2(stale); err != nil || h.Recovered() != 0x4000 || !strings.Contains(h.Warning, "using the newer secondary copy at 16 KiB") {
		t.Errorf("stale primary: %v, %q", err, h.Warning)
	}
}
