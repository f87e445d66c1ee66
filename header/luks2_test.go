package header

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// luks2File builds the two metadata copies of a LUKS2 header (16 KiB each,
// checksummed with sha256) around metadata, followed by a zero keyslots
// area and payload, as a test fixture: it parses, but no keyslot opens.
func luks2File(t testing.TB, metadata string, seqids ...uint64) []byte {
	t.Helper()
	const hdr = 0x4000
	file := make([]byte, 2*hdr+0x40000+4096)
	for i, off := range []int{0, hdr} {
		b := file[off : off+hdr]
		if off == 0 {
			copy(b, magic[:])
		} else {
			copy(b, secondaryMagic[:])
		}
		be := binary.BigEndian
		be.PutUint16(b[l2OffVersion:], 2)
		be.PutUint64(b[l2OffHdrSize:], hdr)
		seq := uint64(1)
		if i < len(seqids) {
			seq = seqids[i]
		}
		be.PutUint64(b[l2OffSeqID:], seq)
		copy(b[l2OffCsumAlg:], "sha256")
		copy(b[l2OffUUID:], "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
		be.PutUint64(b[l2OffHdrOffset:], uint64(off))
		copy(b[luks2BinSize:], metadata)
		sum := sha256.Sum256(b)
		copy(b[l2OffCsum:], sum[:])
	}
	return file
}

var salt32 = base64.StdEncoding.EncodeToString(make([]byte, 32))

// minimalLUKS2 is reference/luks.md's minimal JSON that cryptsetup 2.6.1
// accepts, with a keyslots area of 256 KiB and the data right after it.
var minimalLUKS2 = `{"keyslots":{"0":{"type":"luks2","key_size":64,
 "af":{"type":"luks1","stripes":4000,"hash":"sha256"},
 "area":{"type":"raw","offset":"32768","size":"258048","encryption":"aes-xts-plain64","key_size":64},
 "kdf":{"type":"pbkdf2","hash":"sha256","iterations":1000,"salt":"` + salt32 + `"}}},
 "tokens":{},
 "segments":{"0":{"type":"crypt","offset":"294912","size":"dynamic","iv_tweak":"0",
  "encryption":"aes-xts-plain64","sector_size":512}},
 "digests":{"0":{"type":"pbkdf2","keyslots":["0"],"segments":["0"],"hash":"sha256",
  "iterations":1000,"salt":"` + salt32 + `","digest":"` + salt32 + `"}},
 "config":{"json_size":"12288","keyslots_size":"262144"}}`

func readL2(file []byte) (*LUKS2, error) {
	h, err := Read(bytes.NewReader(file), 0, int64(len(file)))
	if err != nil {
		return nil, err
	}
	return h.(*LUKS2), nil
}

// TestLUKS2Validation: the variants reference/luks.md §10 lists as
// verified against cryptsetup 2.6.1 are accepted or refused as cryptsetup
// does, refusals as ErrCorrupt.
func TestLUKS2Validation(t *testing.T) {
	h, err := readL2(luks2File(t, minimalLUKS2))
	if err != nil {
		t.Fatal(err)
	}
	i := h.Info()
	if i.Version != 2 || i.Cipher != "aes-xts-plain64" || i.KeyBytes != 64 || i.SectorSize != 512 ||
		i.PayloadOffset != 294912 || i.AreaSize != 2*0x4000+262144 || h.Warning != "" || h.ReadOnly {
		t.Fatalf("Info = %+v, warning %q", i, h.Warning)
	}
	if h.NumSlots() != 32 || !h.SlotActive(0) || h.SlotActive(1) || h.FirstFreeSlot() != 1 || h.CheckSlot(31) != nil || h.CheckSlot(32) == nil {
		t.Fatal("slot queries")
	}
	for _, c := range []struct {
		name     string
		old, new string
		ok       bool
	}{
		{"pretty-printed", `"tokens":{},`, "\n\t\"tokens\" : { } ,\n", true},
		{"extra top-level key", `"tokens":{},`, `"tokens":{},"extra":[1,2],`, true},
		{"20-byte digest", `"digest":"` + salt32 + `"`, `"digest":"` + base64.StdEncoding.EncodeToString(make([]byte, 20)) + `"`, true},
		{"extra kdf field", `"iterations":1000,"salt"`, `"iterations":1000,"extra":1,"salt"`, true},
		{"unknown requirement", `"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{"mandatory":["future"]}}`, true},
		{"missing tokens", `"tokens":{},`, ``, false},
		{"missing keyslots_size", `,"keyslots_size":"262144"`, ``, false},
		{"iterations as a string", `"iterations":1000,"salt"`, `"iterations":"1000","salt"`, false},
		{"json_size differs", `"json_size":"12288"`, `"json_size":"28672"`, false},
		{"crypt segment in no digest", `"segments":["0"]`, `"segments":[]`, false},
		{"keyslots_size not 4K-aligned", `"keyslots_size":"262144"`, `"keyslots_size":"262145"`, false},
		{"offset not decimal", `"offset":"294912"`, `"offset":"0x48000"`, false},
		{"negative key size", `"key_size":64,`, `"key_size":-64,`, false},
		{"keyslot area overlaps metadata", `"offset":"32768"`, `"offset":"16384"`, false},
		{"keyslot in no digest", `"keyslots":["0"]`, `"keyslots":[]`, false},
		{"sector size 1000", `"sector_size":512`, `"sector_size":1000`, false},
		{"object name 32", `"keyslots":{"0":`, `"keyslots":{"32":`, false},
		{"object name 01", `"keyslots":{"0":`, `"keyslots":{"01":`, false},
		{"trailing garbage", `"keyslots_size":"262144"}}`, `"keyslots_size":"262144"}}}`, false},
	} {
		js := strings.Replace(minimalLUKS2, c.old, c.new, 1)
		if js == minimalLUKS2 {
			t.Fatalf("%s: %q not found", c.name, c.old)
		}
		_, err := readL2(luks2File(t, js))
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if !c.ok && !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", c.name, err)
		}
	}
	h, _ = readL2(luks2File(t, strings.Replace(minimalLUKS2, `"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{"mandatory":["future"]}}`, 1)))
	if !h.ReadOnly {
		t.Error("an unknown requirement does not make the header read-only")
	}
	h, _ = readL2(luks2File(t, strings.Replace(minimalLUKS2, `"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{"mandatory":["online-reencrypt-v2"]}}`, 1)))
	if _, _, err := h.Unlock(bytes.NewReader(nil), 0, []byte("x"), -1); !errors.Is(err, ErrLUKS2Reencrypt) {
		t.Errorf("unlock in mid-reencryption: %v", err)
	}
}

// FuzzLUKS2 feeds hostile JSON metadata, correctly checksummed, to Read:
// it must never panic, and what it accepts must answer every query.
func FuzzLUKS2(f *testing.F) {
	f.Add(minimalLUKS2)
	f.Add(strings.Replace(minimalLUKS2, `"size":"dynamic"`, `"size":"1048576"`, 1))
	f.Add(strings.Replace(minimalLUKS2, `"type":"pbkdf2","hash":"sha256","iterations":1000,"salt"`, `"type":"argon2id","time":4,"memory":32,"cpus":1,"salt"`, 1))
	f.Fuzz(func(t *testing.T, js string) {
		if len(js) >= 12288 || strings.IndexByte(js, 0) >= 0 {
			return
		}
		h, err := Read(bytes.NewReader(luks2File(t, js)), 0, 2*0x4000+0x40000+4096)
		if err != nil {
			return
		}
		_ = h.Info()
		for s := -1; s <= 32; s++ {
			h.SlotActive(s)
		}
		h.ActiveSlots()
		h.FirstFreeSlot()
		h.BackupSize()
	})
}

// TestLUKS2Copies: a damaged copy is read around with a warning, the newer
// of two good copies wins, and two bad copies are refused.
func TestLUKS2Copies(t *testing.T) {
	file := luks2File(t, minimalLUKS2)
	file[luks2BinSize+3] ^= 1 // primary JSON: checksum fails
	h, err := readL2(file)
	if err != nil || !strings.Contains(h.Warning, "primary") || h.bin.HdrOffset != 0x4000 {
		t.Fatalf("damaged primary: %v, %q", err, h.Warning)
	}
	file = luks2File(t, minimalLUKS2)
	file[0x4000+l2OffSeqID] ^= 1 // secondary's seqid changes: checksum fails
	if h, err = readL2(file); err != nil || !strings.Contains(h.Warning, "secondary") || h.bin.HdrOffset != 0 {
		t.Fatalf("damaged secondary: %v, %q", err, h.Warning)
	}
	if h, err = readL2(luks2File(t, minimalLUKS2, 3, 7)); err != nil || h.SeqID() != 7 || !strings.Contains(h.Warning, "differ") {
		t.Fatalf("newer secondary: %v, seqid %d", err, h.SeqID())
	}
	file = luks2File(t, minimalLUKS2)
	file[luks2BinSize+3] ^= 1
	file[0x4000+luks2BinSize+3] ^= 1
	if _, err := readL2(file); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both damaged: %v", err)
	}
	if _, err := readL2(file[:0x5000]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
}

// TestLUKS2Format: a LUKS2 header made here reads back, unlocks with its
// passphrase (pbkdf2, argon2i, argon2id) and not with another, and has
// cryptsetup's layout: 16 KiB metadata, keyslot 0 at 32 KiB with a
// 4096-byte-rounded area, the data at 16 MiB.
func TestLUKS2Format(t *testing.T) {
	for _, kdf := range []string{"pbkdf2", "argon2i", "argon2id"} {
		force := uint32(1000)
		if kdf != "pbkdf2" {
			force = 4
		}
		hh, vk, area, err := Format([]byte("pw"), Params{Version: 2, Cipher: "aes-xts-plain64", PBKDF: kdf, PBKDFMemory: 64,
			PBKDFParallel: 1, ForceIterations: force, SectorSize: 4096, Label: "data", Subsystem: "test", Rand: testRand("l2 " + kdf)})
		if err != nil {
			t.Fatal(err)
		}
		h := hh.(*LUKS2)
		i := h.Info()
		if i.Version != 2 || i.KeyBytes != 64 || i.SectorSize != 4096 || i.PayloadOffset != 16<<20 || len(area) != 16<<20 ||
			h.Label() != "data" || h.Subsystem() != "test" || h.MetadataSize() != 16384 {
			t.Fatalf("%s: %+v", kdf, i)
		}
		k := h.Keyslots[0]
		if k.KDF.Type != kdf || k.Area.Offset != 32768 || k.Area.Size != 258048 || h.Config.KeyslotsSize != 16744448 {
			t.Fatalf("%s: keyslot %+v", kdf, k)
		}
		got, slot, err := h.Unlock(bytes.NewReader(area), 0, []byte("pw"), -1)
		if err != nil || slot != 0 || !bytes.Equal(got, vk) {
			t.Fatalf("%s: unlock: slot %d, %v", kdf, slot, err)
		}
		if _, _, err := h.Unlock(bytes.NewReader(area), 0, []byte("px"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
			t.Fatalf("%s: wrong passphrase: %v", kdf, err)
		}
		if !h.VerifyVolumeKey(vk) {
			t.Fatal("digest does not verify the volume key")
		}
	}
	if _, _, _, err := Format([]byte("pw"), Params{Version: 2, PBKDF: "argon2id", ForceIterations: 3, PBKDFMemory: 64}); err == nil {
		t.Error("argon2 time cost 3 accepted")
	}
	if _, _, _, err := Format([]byte("pw"), Params{Version: 2, SectorSize: 1000, ForceIterations: 1000, PBKDF: "pbkdf2"}); err == nil {
		t.Error("sector size 1000 accepted")
	}
	if _, _, _, err := Format([]byte("pw"), Params{PBKDF: "argon2id"}); err == nil {
		t.Error("LUKS1 with argon2id accepted")
	}
}
