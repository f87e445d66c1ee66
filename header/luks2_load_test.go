package header

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
)

// setJSON replaces the metadata of both copies of a LUKS2 header area
// with js and checksums them again (sha256, as Format writes them).
func setJSON(t *testing.T, area []byte, js string) {
	t.Helper()
	h, err := readL2(area)
	if err != nil {
		t.Fatal(err)
	}
	hdr := int(h.MetadataSize())
	if len(js) >= hdr-luks2BinSize {
		t.Fatalf("%d bytes of metadata do not fit", len(js))
	}
	for _, off := range []int{0, hdr} {
		b := area[off : off+hdr]
		clear(b[luks2BinSize:])
		copy(b[luks2BinSize:], js)
		clear(b[l2OffCsum : l2OffCsum+l2CsumSize])
		sum := sha256.Sum256(b)
		copy(b[l2OffCsum:], sum[:])
	}
}

// twoSlotArea is a real LUKS2 header area (pbkdf2 at the minimum cost) with
// passphrase "pw0" in keyslot 0 and "pw1" in keyslot 1, and its volume key.
func twoSlotArea(t *testing.T) ([]byte, []byte) {
	t.Helper()
	hh, vk, area, err := Format([]byte("pw0"), Params{Version: 2, Cipher: "aes-xts-plain64", KeyBytes: 64, SectorSize: 512, PBKDF: "pbkdf2", ForceIterations: MinIterations, Rand: testRand("load")})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*LUKS2)
	kdf, err := h.SlotKDF(KDFOptions{PBKDF: "pbkdf2", Force: MinIterations})
	if err != nil {
		t.Fatal(err)
	}
	u, err := h.AddSlot(1, []byte("pw1"), vk, kdf, testRand("load1"))
	if err != nil {
		t.Fatal(err)
	}
	applyTo(t, area, u)
	return area, vk
}

// keyslotJSON returns the text of keyslot n's object in js.
func keyslotJSON(t *testing.T, h *LUKS2, n int) string {
	t.Helper()
	raw := string(h.Keyslots[n].raw)
	if raw == "" || !strings.Contains(string(h.JSON()), raw) {
		t.Fatalf("keyslot %d's text not found", n)
	}
	return raw
}

// TestLUKS2LoadsWhatCryptsetupLoads: metadata with parts cryptimg does not
// know loads, as cryptsetup 2.6-2.8 loads it (docs/LUKS2-VALIDATION.md),
// Problems names those parts, and what they would be needed for fails
// with an error naming them while the rest works. Each case edits keyslot
// 0 of a real two-slot header, or its segment, digest or tokens.
func TestLUKS2LoadsWhatCryptsetupLoads(t *testing.T) {
	base, vk := twoSlotArea(t)
	h0, err := readL2(base)
	if err != nil {
		t.Fatal(err)
	}
	ks0 := keyslotJSON(t, h0, 0)
	js0 := string(h0.JSON())
	// slot0 edits keyslot 0's object only.
	slot0 := func(old, new string) string {
		if !strings.Contains(ks0, old) {
			t.Fatalf("%q not in keyslot 0: %s", old, ks0)
		}
		return strings.Replace(js0, ks0, strings.Replace(ks0, old, new, 1), 1)
	}
	edit := func(old, new string) string {
		if !strings.Contains(js0, old) {
			t.Fatalf("%q not in %s", old, js0)
		}
		return strings.Replace(js0, old, new, 1)
	}
	segment := func(js string) string {
		i := strings.Index(js0, `"segments":{"0":`)
		j := strings.Index(js0[i:], "}}") + i + 2
		return js0[:i] + js + js0[j:]
	}
	const (
		slot1Unlocks     = 1 << iota // "pw1" opens slot 1 with slot -1
		dataRefused                  // every use of the data refused
		namedWhenNoMatch             // with slot -1 and no match, slot 0 is named as passed over
	)
	for _, c := range []struct {
		name    string
		js      string
		problem string // in Problems(), "" for none
		flags   int
		slot0   string // in the error of unlocking slot 0 by number; "" opens it
	}{
		// cryptsetup luks2_keyslot_luks2.c luks2_keyslot_validate checks
		// only the KDFs it knows.
		{name: "keyslot kdf argon2 (early LUKS2 name)", js: slot0(`"type":"pbkdf2"`, `"type":"argon2"`), problem: `keyslot 0: kdf "argon2"`, flags: slot1Unlocks | namedWhenNoMatch, slot0: `keyslot 0: kdf "argon2"`},
		{name: "keyslot kdf scrypt with its own fields", js: slot0(`"type":"pbkdf2","hash":"sha256"`, `"type":"scrypt","n":16384,"hash":"sha256"`), problem: `kdf "scrypt"`, flags: slot1Unlocks | namedWhenNoMatch, slot0: `kdf "scrypt"`},
		// luks2_keyslot.c LUKS2_keyslots_validate skips keyslot types it
		// has no handler for, and LUKS2_keyslot_open_priority passes
		// over them silently (-ENOENT).
		{name: "keyslot type unknown", js: slot0(`"type":"luks2"`, `"type":"luks3"`), problem: `keyslot 0: type "luks3"`, flags: slot1Unlocks, slot0: `keyslot 0: type "luks3"`},
		// luks2_json_metadata.c hdr_validate_tokens checks a type string
		// and the keyslots.
		{name: "token type unknown", js: edit(`"tokens":{}`, `"tokens":{"0":{"type":"x-future","keyslots":["0"],"blob":[1,{"a":null}]}}`), flags: slot1Unlocks},
		// hdr_validate_segments checks the fields every type has and a
		// crypt segment's; tests/luks2-validation-test "segment-unknown-type".
		{name: "segment type unknown", js: segment(`"segments":{"0":{"type":"some_type","offset":"16777216","size":"dynamic","a_field":0}}`), problem: `segment 0: type "some_type"`, flags: dataRefused, slot0: `segment 0: type "some_type"`},
		// tests/luks2-validation-test "uint64-max-segment-size".
		{name: "segment size 2^64-512", js: edit(`"size":"dynamic"`, `"size":"18446744073709551104"`), problem: "segment 0: offset 16777216 and size 18446744073709551104 reach beyond 2^63", flags: dataRefused, slot0: "reach beyond 2^63"},
		// hdr_validate_digests checks a type string and the lists; the
		// pbkdf2 handler runs only when the digest is used.
		{name: "digest type unknown", js: edit(`"segments":["0"],"type":"pbkdf2"`, `"segments":["0"],"type":"pbkdf3"`), problem: `digest 0: type "pbkdf3"`, flags: dataRefused, slot0: `digest 0: type "pbkdf3"`},
		// Hostile headers: a keyslot or segment under the null cipher,
		// kernel crypto API names (cryptsetup 2.7, 2.8.1).
		{name: "keyslot cipher_null", js: slot0(`"encryption":"aes-xts-plain64"`, `"encryption":"cipher_null-ecb"`), problem: `keyslot 0 is not encrypted (cipher "cipher_null-ecb")`, flags: slot1Unlocks | namedWhenNoMatch, slot0: `keyslot 0 is not encrypted`},
		{name: "keyslot cipher unsupported", js: slot0(`"encryption":"aes-xts-plain64"`, `"encryption":"serpent-xts-plain64"`), problem: `keyslot 0: unsupported cipher "serpent-xts-plain64"`, flags: slot1Unlocks | namedWhenNoMatch, slot0: `keyslot 0: unsupported cipher "serpent-xts-plain64"`},
		{name: "keyslot capi", js: slot0(`"encryption":"aes-xts-plain64"`, `"encryption":"capi:xts(aes)-plain64"`), problem: `keyslot 0: cipher "capi:xts(aes)-plain64" is a kernel crypto API name`, flags: slot1Unlocks | namedWhenNoMatch, slot0: "kernel crypto API"},
		{name: "segment cipher_null", js: edit(`"encryption":"aes-xts-plain64","sector_size"`, `"encryption":"cipher_null-ecb","sector_size"`), problem: `segment 0 is not encrypted (cipher "cipher_null-ecb")`, flags: dataRefused, slot0: "segment 0 is not encrypted"},
		{name: "segment capi", js: edit(`"encryption":"aes-xts-plain64","sector_size"`, `"encryption":"capi:xts(aes)-plain64","sector_size"`), problem: `segment 0: cipher "capi:xts(aes)-plain64" is a kernel crypto API name`, flags: dataRefused, slot0: "kernel crypto API"},
	} {
		t.Run(c.name, func(t *testing.T) {
			area := bytes.Clone(base)
			setJSON(t, area, c.js)
			h, err := readL2(area)
			if err != nil {
				t.Fatalf("Read refused what cryptsetup loads: %v", err)
			}
			problems := strings.Join(h.Problems(), "\n")
			if (c.problem == "") != (problems == "") || !strings.Contains(problems, c.problem) {
				t.Errorf("Problems %q, want one with %q", problems, c.problem)
			}
			r := bytes.NewReader(area)
			_, slot, err := h.Unlock(r, 0, []byte("pw1"), -1)
			if c.flags&slot1Unlocks != 0 && (err != nil || slot != 1) {
				t.Errorf("pw1 with every slot: slot %d, %v", slot, err)
			}
			if c.flags&dataRefused != 0 {
				if err == nil || !strings.Contains(err.Error(), c.slot0) {
					t.Errorf("pw1 with every slot: %v, want an error with %q", err, c.slot0)
				}
				if _, err := h.NewSectorCipher(vk); err == nil {
					t.Error("NewSectorCipher of an unusable segment")
				}
				if _, err := h.SlotKDF(KDFOptions{PBKDF: "pbkdf2", Force: MinIterations}); err == nil {
					t.Error("SlotKDF with an unusable segment")
				}
			}
			_, _, err = h.Unlock(r, 0, []byte("pw0"), 0)
			switch {
			case c.slot0 == "" && err != nil:
				t.Errorf("pw0 in slot 0: %v", err)
			case c.slot0 != "" && (err == nil || !strings.Contains(err.Error(), c.slot0)):
				t.Errorf("pw0 in slot 0: %v, want an error with %q", err, c.slot0)
			case c.slot0 != "" && (errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoMatchingKeyslot)):
				t.Errorf("pw0 in slot 0: %v is a corrupt header or a wrong passphrase", err)
			}
			if c.flags&namedWhenNoMatch != 0 {
				// Passed over, and named, when nothing else opens.
				_, _, err := h.Unlock(r, 0, []byte("wrong"), -1)
				if !errors.Is(err, ErrNoMatchingKeyslot) || !strings.Contains(err.Error(), c.slot0) {
					t.Errorf("wrong passphrase: %v, want no match naming %q", err, c.slot0)
				}
			}
			i := h.Info()
			if i.SectorSize <= 0 || i.PayloadOffset < 0 || i.PayloadSize < 0 {
				t.Errorf("Info %+v", i)
			}
			h.UnlockCost(-1)
			h.UnlockCost(0)
		})
	}
}

// TestLUKS2KeepsUnknownKeyslot: a keyslot of an unknown type and one with
// an unknown KDF survive adding a key to another slot byte for byte, and
// so do a token and a second segment of unknown types.
func TestLUKS2KeepsUnknownKeyslot(t *testing.T) {
	area, vk := twoSlotArea(t)
	h, _ := readL2(area)
	js := string(h.JSON())
	ks0, ks1 := keyslotJSON(t, h, 0), keyslotJSON(t, h, 1)
	new0 := strings.Replace(ks0, `"type":"luks2"`, `"type":"luks3","x-future":{"a":[1,2]}`, 1)
	new1 := strings.Replace(ks1, `"type":"pbkdf2"`, `"type":"argon2"`, 1)
	js = strings.Replace(strings.Replace(js, ks0, new0, 1), ks1, new1, 1)
	js = strings.Replace(js, `"tokens":{}`, `"tokens":{"3":{"type":"x-future","keyslots":["1"],"z":[{}]}}`, 1)
	// A second segment of an unknown type after a fixed-size data segment.
	const seg1 = `"1":{"type":"some","offset":"17825792","size":"dynamic","x":[1]}`
	if !strings.Contains(js, `"size":"dynamic","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":512}}`) {
		t.Fatalf("segment 0 not found in %s", js)
	}
	js = strings.Replace(js, `"size":"dynamic","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":512}}`,
		`"size":"1048576","iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":512},`+seg1+`}`, 1)
	setJSON(t, area, js)
	h, err := readL2(area)
	if err != nil {
		t.Fatal(err)
	}
	kdf, err := h.SlotKDF(KDFOptions{PBKDF: "pbkdf2", Force: MinIterations})
	if err != nil {
		t.Fatal(err)
	}
	u, err := h.AddSlot(2, []byte("pw2"), vk, kdf, testRand("keep"))
	if err != nil {
		t.Fatal(err)
	}
	applyTo(t, area, u)
	got, err := readL2(area)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{new0, new1, `"3":{"type":"x-future","keyslots":["1"],"z":[{}]}`, seg1} {
		if !bytes.Contains(got.JSON(), []byte(want)) {
			t.Errorf("lost %s\nin %s", want, got.JSON())
		}
	}
	if _, slot, err := got.Unlock(bytes.NewReader(area), 0, []byte("pw2"), -1); err != nil || slot != 2 {
		t.Errorf("pw2: slot %d, %v", slot, err)
	}
	// Killing slot 2 again leaves them too.
	k, err := got.KillSlot(2, testRand("kill"))
	if err != nil {
		t.Fatal(err)
	}
	applyTo(t, area, k)
	got, _ = readL2(area)
	if !bytes.Contains(got.JSON(), []byte(new0)) || !bytes.Contains(got.JSON(), []byte(new1)) {
		t.Errorf("lost after kill: %s", got.JSON())
	}
}

// TestLUKS2NullCipherAllowed: with AllowNullCipher, a keyslot under the
// null cipher opens with the empty passphrase only (cryptsetup 2.8.1), and
// a null-cipher data segment reads as it is; new keyslots never get the
// null cipher.
func TestLUKS2NullCipherAllowed(t *testing.T) {
	area, vk := twoSlotArea(t)
	h, _ := readL2(area)
	k1 := h.Keyslots[1]
	// Keyslot 1 holds the AF-split key in the clear.
	material, err := AFSplit(vk, Stripes, k1.AF.Hash, testRand("af"))
	if err != nil {
		t.Fatal(err)
	}
	copy(area[k1.Area.Offset:], material)
	ks1 := keyslotJSON(t, h, 1)
	js := strings.Replace(string(h.JSON()), ks1, strings.Replace(ks1, `"encryption":"aes-xts-plain64"`, `"encryption":"cipher_null-ecb"`, 1), 1)
	js = strings.Replace(js, `"encryption":"aes-xts-plain64","sector_size"`, `"encryption":"cipher_null-ecb","sector_size"`, 1)
	setJSON(t, area, js)
	h, err = readL2(area)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(area)
	if _, _, err := h.Unlock(r, 0, nil, 1); !errors.Is(err, ErrNullCipher) {
		t.Fatalf("null segment, not allowed: %v", err)
	}
	a := AllowNullCipher(h)
	for _, c := range []struct {
		pw   string
		slot int
		want error
	}{{"", 1, nil}, {"", -1, nil}, {"pw1", 1, ErrNoMatchingKeyslot}, {"pw0", -1, nil}, {"x", -1, ErrNoMatchingKeyslot}} {
		got, slot, err := a.Unlock(r, 0, []byte(c.pw), c.slot)
		if !errors.Is(err, c.want) || (err == nil && !bytes.Equal(got, vk)) {
			t.Errorf("allowed, %q in slot %d: slot %d, %v; want %v", c.pw, c.slot, slot, err, c.want)
		}
	}
	s, err := a.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	plain := bytes.Repeat([]byte("data"), 128)
	out := make([]byte, len(plain))
	if s.EncryptSectors(out, plain, 7); !bytes.Equal(out, plain) {
		t.Error("the null cipher changed the data")
	}
	kdf, err := a.SlotKDF(KDFOptions{PBKDF: "pbkdf2", Force: MinIterations})
	if err != nil {
		t.Fatal(err)
	}
	u, err := a.(*LUKS2).AddSlot(2, []byte("pw2"), vk, kdf, testRand("null2"))
	if err != nil {
		t.Fatal(err)
	}
	if k := u.Header.(*LUKS2).Keyslots[2]; k.Area.Encryption != "aes-xts-plain64" || k.KeySize != len(vk) {
		t.Errorf("new keyslot cipher %q", k.Area.Encryption)
	}
	if _, _, err := u.Header.Unlock(r, 0, nil, 1); err != nil {
		t.Errorf("the update's header forgot AllowNullCipher: %v", err)
	}
}
