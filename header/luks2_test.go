package header

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
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

// minimalLUKS2 is a minimal JSON metadata area that cryptsetup 2.6.1
// accepts (checked with luksDump when it was written), with a keyslots area of 256 KiB and the data right after it.
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

// TestLUKS2Validation: metadata variants checked against cryptsetup 2.6.1
// (docs/LUKS2-VALIDATION.md) are accepted or refused as cryptsetup
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
		h.UnlockCost(-1)
		h.(*LUKS2).Problems()
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
		force, mem, par := uint32(1000), uint32(0), uint32(0)
		if kdf != "pbkdf2" {
			force, mem, par = 4, 64, 1
		}
		hh, vk, area, err := Format([]byte("pw"), Params{Version: 2, Cipher: "aes-xts-plain64", PBKDF: kdf, PBKDFMemory: mem,
			PBKDFParallel: par, ForceIterations: force, SectorSize: 4096, Label: "data", Subsystem: "test", Rand: testRand("l2 " + kdf)})
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

// TestLUKS2Updates checks the commit order of AddSlot and KillSlot and the
// crash states between their writes: the material lands before the copies
// that name it, each copy is whole or fails its checksum, and the newer
// valid copy wins.
func TestLUKS2Updates(t *testing.T) {
	hh, vk, area, err := Format([]byte("pw0"), Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: MinIterations, Rand: testRand("upd")})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*LUKS2)
	kdf, err := h.SlotKDF(KDFOptions{PBKDF: "pbkdf2", Force: MinIterations})
	if err != nil {
		t.Fatal(err)
	}
	add, err := h.AddSlot(3, []byte("pw3"), vk, kdf, testRand("add"))
	if err != nil {
		t.Fatal(err)
	}
	if len(add.Writes) != 3 || add.Writes[0].Offset != 32768+int64(h.Keyslots[0].Area.Size) || add.Writes[1].Offset != 0 || add.Writes[2].Offset != 16384 {
		t.Fatalf("AddSlot writes: %v", offsets(add.Writes))
	}
	if h.SlotActive(3) || h.SeqID() != 1 {
		t.Fatal("AddSlot changed its receiver")
	}
	state := func(n int, torn bool) *LUKS2 {
		b := bytes.Clone(area)
		for i, w := range add.Writes[:n] {
			d := w.Data
			if torn && i == n-1 {
				d = d[:luks2BinSize+100] // inside the JSON: the checksum fails
			}
			copy(b[w.Offset:], d)
		}
		got, err := readL2(b)
		if err != nil {
			t.Fatalf("after %d writes (torn %v): %v", n, torn, err)
		}
		if _, _, err := got.Unlock(bytes.NewReader(b), 0, []byte("pw0"), -1); err != nil {
			t.Fatalf("after %d writes: pw0: %v", n, err)
		}
		return got
	}
	for _, c := range []struct {
		n      int
		torn   bool
		slot3  bool
		seqid  uint64
		warned bool
	}{{1, false, false, 1, false}, {2, true, false, 1, true}, {2, false, true, 2, true}, {3, true, true, 2, true}, {3, false, true, 2, false}} {
		got := state(c.n, c.torn)
		if got.SlotActive(3) != c.slot3 || got.SeqID() != c.seqid || (got.Warning != "") != c.warned {
			t.Errorf("after %d writes (torn %v): slot 3 %v, seqid %d, warning %q", c.n, c.torn, got.SlotActive(3), got.SeqID(), got.Warning)
		}
	}
	applyTo(t, area, add)
	nh, err := readL2(area)
	if err != nil {
		t.Fatal(err)
	}
	if _, slot, err := nh.Unlock(bytes.NewReader(area), 0, []byte("pw3"), -1); err != nil || slot != 3 {
		t.Fatalf("pw3: slot %d, %v", slot, err)
	}
	if nh.Digests[0].Keyslots[1] != "3" {
		t.Fatalf("digest keyslots %v", nh.Digests[0].Keyslots)
	}

	kill, err := nh.KillSlot(0, testRand("kill"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kill.Writes) != 3 || kill.Writes[0].Offset != 0 || kill.Writes[1].Offset != 16384 || kill.Writes[2].Offset != 32768 {
		t.Fatalf("KillSlot writes: %v", offsets(kill.Writes))
	}
	applyTo(t, area, kill)
	kh, err := readL2(area)
	if err != nil || kh.SlotActive(0) || !kh.SlotActive(3) || kh.SeqID() != 3 {
		t.Fatalf("after KillSlot: %v", err)
	}
	if _, _, err := kh.Unlock(bytes.NewReader(area), 0, []byte("pw0"), -1); !errors.Is(err, ErrNoMatchingKeyslot) {
		t.Fatalf("pw0 after KillSlot: %v", err)
	}
	if sz := int(nh.Keyslots[0].Area.Size); bytes.Count(area[32768:32768+sz], []byte{0}) > sz/64 {
		t.Error("slot 0's area was not overwritten with random bytes")
	}
	// The first-fit area of a new slot is slot 0's old one.
	if again, err := kh.AddSlot(0, []byte("pw0"), vk, kdf, nil); err != nil || again.Writes[0].Offset != 32768 {
		t.Fatalf("re-add: %v", err)
	}
	u, err := kh.WithUUID("0F2A93B4-1C2D-4E5F-8A9B-0C1D2E3F4A5B")
	if err != nil || u.Header.Info().UUID != "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b" || len(u.Writes) != 2 {
		t.Fatalf("WithUUID: %v", err)
	}
	if _, err := kh.AddSlot(3, []byte("x"), vk, kdf, nil); err == nil {
		t.Error("AddSlot into a used slot")
	}
	if _, err := kh.AddSlot(4, []byte("x"), make([]byte, 64), kdf, nil); err == nil {
		t.Error("AddSlot with a wrong volume key")
	}
}

func offsets(ws []Write) []int64 {
	var o []int64
	for _, w := range ws {
		o = append(o, w.Offset)
	}
	return o
}

// TestLUKS2KeepsUnknownFields: a change rewrites the metadata with the
// members cryptimg does not know where they were: top-level ones, and
// unknown fields of the objects it does know.
func TestLUKS2KeepsUnknownFields(t *testing.T) {
	js := strings.Replace(minimalLUKS2, `"tokens":{},`, `"tokens":{"0":{"type":"systemd-tpm2","keyslots":["0"],"tpm2-pcrs":[7]}},"x-top":{"a":1},`, 1)
	js = strings.Replace(js, `"type":"luks2","key_size":64,`, `"type":"luks2","key_size":64,"x-slot":"kept",`, 1)
	file := luks2File(t, js)
	h, err := readL2(file)
	if err != nil {
		t.Fatal(err)
	}
	u, err := h.WithUUID("0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5c")
	if err != nil {
		t.Fatal(err)
	}
	applyTo(t, file, u)
	got, err := readL2(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"x-top":{"a":1}`, `"x-slot":"kept"`, `"tpm2-pcrs":[7]`} {
		if !bytes.Contains(got.JSON(), []byte(want)) {
			t.Errorf("%s lost: %s", want, got.JSON())
		}
	}
	if got.Info().UUID != "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5c" || got.SeqID() != 2 {
		t.Errorf("uuid %s, seqid %d", got.Info().UUID, got.SeqID())
	}
	// A changed object keeps its unknown fields too.
	n := got.clone()
	k := *n.Keyslots[0]
	p := 2
	k.Priority, k.changed = &p, true
	n.Keyslots[0] = &k
	b, err := n.marshalJSON()
	if err != nil || !bytes.Contains(b, []byte(`"x-slot":"kept"`)) || !bytes.Contains(b, []byte(`"priority":2`)) {
		t.Errorf("changed keyslot: %s, %v", b, err)
	}
	// Unknown requirements make the metadata read-only.
	ro, _ := readL2(luks2File(t, strings.Replace(minimalLUKS2, `"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{"mandatory":["future"]}}`, 1)))
	if _, err := ro.WithUUID("0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5c"); !errors.Is(err, ErrLUKS2Requirements) {
		t.Errorf("change under an unknown requirement: %v", err)
	}
}

// TestUnlockCost: the estimate of a hostile keyslot is far over a
// minute or half of the RAM before any KDF runs, and that of a modest one
// is small.
func TestUnlockCost(t *testing.T) {
	h, err := readL2(luks2File(t, minimalLUKS2))
	if err != nil {
		t.Fatal(err)
	}
	if c := h.UnlockCost(-1); c.Time > time.Second || c.Memory != 0 || !strings.Contains(c.What, "1000 PBKDF2-sha256 iterations in keyslot 0") {
		t.Errorf("modest pbkdf2: %+v", c)
	}
	hostile := strings.Replace(minimalLUKS2, `"type":"pbkdf2","hash":"sha256","iterations":1000,"salt"`, `"type":"argon2id","time":4294967295,"memory":4194304,"cpus":4,"salt"`, 1)
	if h, err = readL2(luks2File(t, hostile)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := h.UnlockCost(0)
	if c.Time < 24*time.Hour || c.Memory != 4<<30 || time.Since(start) > 2*time.Second {
		t.Errorf("hostile argon2: %+v, estimated in %v", c, time.Since(start))
	}
	l1, _, _ := testFormat(t, "pw", Params{KeyBytes: 32}, "cost")
	l1.Slots[0].Iterations = 1 << 31
	if c := l1.UnlockCost(-1); c.Time < 2*time.Minute || !strings.Contains(c.What, "key slot 0") {
		t.Errorf("hostile LUKS1 slot: %+v", c)
	}
}
