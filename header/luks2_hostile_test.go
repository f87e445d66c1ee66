package header

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostileCase is one hostile LUKS2 metadata file, with what Read makes of
// it and what cryptsetup 2.6.1 does (measured with cryptsetup luksDump
// --debug; TestLUKS2HostileJSONCryptsetup measures it again).
type hostileCase struct {
	name    string
	hdr     int       // metadata size of each copy; 0 is luks2File's 16 KiB
	js, js2 string    // the primary's and the secondary's metadata; js2 "" is js
	seq     [2]uint64 // the copies' seqids; zero is 1 and 1
	want    string    // errClass of Read's error
	cs      bool      // cryptsetup luksDump reads it
	check   func(t *testing.T, h *LUKS2)
}

// Error classes of Read (errClass).
const (
	accepted = "accepted"
	corrupt  = "ErrCorrupt"
	badHash  = "*UnsupportedHashError"
)

func errClass(err error) string {
	var uh *UnsupportedHashError
	switch {
	case err == nil:
		return accepted
	case errors.Is(err, ErrCorrupt):
		return corrupt
	case errors.As(err, &uh):
		return badHash
	}
	return fmt.Sprintf("other error (%v)", err)
}

// file builds the case's image: with luks2File, the secondary copy of
// js2 put in, or with luks2Sized.
func (c hostileCase) file(t testing.TB) []byte {
	t.Helper()
	if c.hdr != 0 {
		return luks2Sized(t, c.hdr, c.js)
	}
	seq := c.seq
	if seq == [2]uint64{} {
		seq = [2]uint64{1, 1}
	}
	for _, js := range []string{c.js, c.js2} {
		if len(js) >= 0x4000-luks2BinSize {
			t.Fatalf("%s: %d bytes of metadata do not fit in luks2File's 16 KiB copies", c.name, len(js))
		}
	}
	f := luks2File(t, c.js, seq[0], seq[1])
	if c.js2 != "" {
		// Each copy has its own checksum: the other file's secondary
		// drops in whole.
		copy(f[0x4000:0x8000], luks2File(t, c.js2, seq[0], seq[1])[0x4000:0x8000])
	}
	return f
}

// luks2Sized is luks2File for copies of hdr bytes (16 KiB to 4 MiB), both
// with seqid 1, for metadata too long for 16 KiB: sizedLUKS2's layout.
func luks2Sized(t testing.TB, hdr int, metadata string) []byte {
	t.Helper()
	if len(metadata) >= hdr-luks2BinSize {
		t.Fatalf("%d bytes of metadata do not fit in %d-byte copies", len(metadata), hdr)
	}
	file := make([]byte, 2*hdr+0x40000+4096)
	for _, off := range []int{0, hdr} {
		b := file[off : off+hdr]
		if off == 0 {
			copy(b, magic[:])
		} else {
			copy(b, secondaryMagic[:])
		}
		be := binary.BigEndian
		be.PutUint16(b[l2OffVersion:], 2)
		be.PutUint64(b[l2OffHdrSize:], uint64(hdr))
		be.PutUint64(b[l2OffSeqID:], 1)
		copy(b[l2OffCsumAlg:], "sha256")
		copy(b[l2OffUUID:], "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b")
		be.PutUint64(b[l2OffHdrOffset:], uint64(off))
		copy(b[luks2BinSize:], metadata)
		sum := sha256.Sum256(b)
		copy(b[l2OffCsum:], sum[:])
	}
	return file
}

// edit replaces, in order, each old string of pairs (old, new, old, new,
// ...) with its new one, once.
func edit(t testing.TB, js string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(js, pairs[i]) {
			t.Fatalf("%q not found in %.80q...", pairs[i], js)
		}
		js = strings.Replace(js, pairs[i], pairs[i+1], 1)
	}
	return js
}

// sizedLUKS2 is minimalLUKS2 with copies of hdr bytes: json_size, the
// keyslot area and the data segment follow the second copy's end.
func sizedLUKS2(t testing.TB, hdr int) string {
	return edit(t, minimalLUKS2, `"json_size":"12288"`, fmt.Sprintf(`"json_size":"%d"`, hdr-luks2BinSize),
		`"offset":"32768"`, fmt.Sprintf(`"offset":"%d"`, 2*hdr), `"offset":"294912"`, fmt.Sprintf(`"offset":"%d"`, 2*hdr+0x40000))
}

// manyNames is n members "a0":0, "a1":0, ... of one object.
func manyNames(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"a%d":0`, i)
	}
	return b.String()
}

// nest is inner inside n pairs of left and right.
func nest(left, right string, n int, inner string) string {
	return strings.Repeat(left, n) + inner + strings.Repeat(right, n)
}

// hostileCases are the hostile inputs of issue 13: deep nesting, huge or
// negative numbers, duplicate names, invalid UTF-8, offsets that
// overflow, areas that overlap and copies that disagree. Where cryptimg
// refuses what cryptsetup reads (cs true, want not accepted), the comment
// says why.
func hostileCases(t testing.TB) []hostileCase {
	m := func(pairs ...string) string { return edit(t, minimalLUKS2, pairs...) }
	tok := `"tokens":{},`
	ks0 := minimalLUKS2[strings.Index(minimalLUKS2, `{"type":"luks2"`):strings.Index(minimalLUKS2, "},\n \"tokens\"")]
	// slot is keyslot 0 with a 256-bit key (material of 128000 bytes) at
	// the given area.
	slot := func(off, size int) string {
		return edit(t, ks0, `"key_size":64,`, `"key_size":32,`, `"offset":"32768","size":"258048"`, fmt.Sprintf(`"offset":"%d","size":"%d"`, off, size))
	}
	// twoSlots has two such keyslots, 0 and 1, in one digest.
	twoSlots := func(off0, size0, off1, size1 int) string {
		return m(ks0, slot(off0, size0), "},\n \"tokens\"", `,"1":`+slot(off1, size1)+"},\n \"tokens\"", `"keyslots":["0"]`, `"keyslots":["0","1"]`)
	}
	// segs replaces the data segment with segments of the given type,
	// offset, size and extra fields, all in the digest.
	segs := func(s ...[4]string) string {
		var body, names []string
		for i, s := range s {
			body = append(body, fmt.Sprintf(`"%d":{"type":%q,"offset":%q,"size":%q,"iv_tweak":"0","encryption":"aes-xts-plain64","sector_size":512%s}`, i, s[0], s[1], s[2], s[3]))
			names = append(names, strconv.Quote(strconv.Itoa(i)))
		}
		return m(minimalLUKS2[strings.Index(minimalLUKS2, `"segments":{`):strings.Index(minimalLUKS2, ",\n \"digests\"")], `"segments":{`+strings.Join(body, ",")+"}",
			`"segments":["0"]`, `"segments":[`+strings.Join(names, ",")+"]")
	}
	big := 0x40000 // 256 KiB copies: 100000 nested arrays fit
	huge := 0x400000
	// The copies: a has keyslot 0 only, b keyslots 0 and 1.
	a := m(ks0, slot(32768, 131072))
	b := twoSlots(32768, 131072, 163840, 131072)
	tooDeep := edit(t, b, tok, tok+`"x":`+nest("[", "]", 40, "")+",")
	emptied := edit(t, b, tok, tok+`"keyslots":{},`)

	slots := func(want ...int) func(*testing.T, *LUKS2) {
		return func(t *testing.T, h *LUKS2) {
			if got := slices.Sorted(maps.Keys(h.Keyslots)); !slices.Equal(got, want) {
				t.Errorf("keyslots %v, want %v", got, want)
			}
		}
	}
	chose := func(seqid uint64, warning string, want ...int) func(*testing.T, *LUKS2) {
		return func(t *testing.T, h *LUKS2) {
			slots(want...)(t, h)
			if h.SeqID() != seqid || (warning == "") != (h.Warning == "") || !strings.Contains(h.Warning, warning) {
				t.Errorf("seqid %d, warning %q; want seqid %d, a warning with %q", h.SeqID(), h.Warning, seqid, warning)
			}
		}
	}
	problem := func(want string) func(*testing.T, *LUKS2) {
		return func(t *testing.T, h *LUKS2) {
			got := strings.Join(h.Problems(), "\n")
			if (want == "") != (got == "") || !strings.Contains(got, want) {
				t.Errorf("Problems %q, want %q", got, want)
			}
		}
	}
	unreadable := func(t *testing.T, h *LUKS2) {
		if _, err := h.NewSectorCipher(make([]byte, 64)); !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), "2^63") {
			t.Errorf("NewSectorCipher: %v", err)
		}
	}
	return []hostileCase{
		// Deep nesting. json-c, as cryptsetup creates its tokener
		// (depth 32), reads a value inside at most 31 arrays and
		// objects, the top-level object included; deeper is "nesting
		// too deep". encoding/json alone would go to 10000.
		{name: "nesting: 31 arrays in an unknown member", js: m(tok, tok+`"x":`+nest("[", "]", 31, "")+","), want: accepted, cs: true},
		{name: "nesting: 32 arrays in an unknown member", js: m(tok, tok+`"x":`+nest("[", "]", 32, "")+","), want: corrupt},
		{name: "nesting: 30 arrays around a number", js: m(tok, tok+`"x":`+nest("[", "]", 30, "1")+","), want: accepted, cs: true},
		{name: "nesting: 31 arrays around a string", js: m(tok, tok+`"x":`+nest("[", "]", 31, `"s"`)+","), want: corrupt},
		{name: "nesting: 28 objects in a token", js: m(tok, `"tokens":{"0":{"type":"x","keyslots":[],"d":`+nest(`{"a":`, "}", 28, "1")+"}},"), want: accepted, cs: true},
		{name: "nesting: 29 objects in a token", js: m(tok, `"tokens":{"0":{"type":"x","keyslots":[],"d":`+nest(`{"a":`, "}", 29, "1")+"}},"), want: corrupt},
		{name: "nesting: 29 arrays in a keyslot", js: m(`"key_size":64,`, `"key_size":64,"x":`+nest("[", "]", 29, "")+","), want: accepted, cs: true},
		{name: "nesting: 30 arrays in a keyslot", js: m(`"key_size":64,`, `"key_size":64,"x":`+nest("[", "]", 30, "")+","), want: corrupt},
		{name: "nesting: 100000 arrays in an unknown member", hdr: big, js: edit(t, sizedLUKS2(t, big), tok, tok+`"x":`+nest("[", "]", 100000, "")+","), want: corrupt},
		{name: "nesting: 100000 arrays in a token", hdr: big, js: edit(t, sizedLUKS2(t, big), tok, `"tokens":{"0":{"type":"x","keyslots":[],"d":`+nest("[", "]", 100000, "")+"}},"), want: corrupt},
		{name: "nesting: 100000 objects in an unknown member", hdr: 0x100000, js: edit(t, sizedLUKS2(t, 0x100000), tok, tok+`"x":`+nest(`{"a":`, "}", 100000, "1")+","), want: corrupt},
		{name: "nesting: 2000000 arrays in 4 MiB of metadata", hdr: huge, js: edit(t, sizedLUKS2(t, huge), tok, tok+`"x":`+nest("[", "]", 2000000, "")+","), want: corrupt},
		{name: "nesting: 100000 unclosed arrays", hdr: big, js: edit(t, sizedLUKS2(t, big), tok, tok+`"x":`+strings.Repeat("[", 100000)+","), want: corrupt},

		// Huge and negative numbers. Where cryptsetup takes a number
		// cryptimg refuses, it truncates it to 32 bits or only checks it
		// when a keyslot is opened (stripes, kdf).
		{name: "number: keyslots_size 2^64-1", js: m(`"keyslots_size":"262144"`, `"keyslots_size":"18446744073709551615"`), want: corrupt},
		{name: "number: keyslots_size 2^64", js: m(`"keyslots_size":"262144"`, `"keyslots_size":"18446744073709551616"`), want: corrupt}, // cryptsetup: "Illegal config keyslot_size value"
		{name: "number: keyslots_size -4096", js: m(`"keyslots_size":"262144"`, `"keyslots_size":"-4096"`), want: corrupt},
		{name: "number: keyslots_size as a JSON number", js: m(`"keyslots_size":"262144"`, `"keyslots_size":262144`), want: corrupt},
		{name: "number: json_size 2^64-1", js: m(`"json_size":"12288"`, `"json_size":"18446744073709551615"`), want: corrupt},
		{name: "number: json_size 2^64+12288", js: m(`"json_size":"12288"`, `"json_size":"18446744073709563904"`), want: corrupt}, // cryptsetup: "Illegal config json_size value"
		{name: "number: key_size 2^40", js: m(`"key_size":64,`, `"key_size":1099511627776,`), want: corrupt},                      // cryptsetup: `Illegal field "key_size"`
		{name: "number: key_size 2^63", js: m(`"key_size":64,`, `"key_size":9223372036854775808,`), want: corrupt},
		{name: "number: key_size 2^64", js: m(`"key_size":64,`, `"key_size":18446744073709551616,`), want: corrupt},
		{name: "number: key_size 1e999", js: m(`"key_size":64,`, `"key_size":1e999,`), want: corrupt},
		{name: "number: key_size 64.0", js: m(`"key_size":64,`, `"key_size":64.0,`), want: corrupt}, // a double to json-c
		{name: "number: key_size -64", js: m(`"key_size":64,`, `"key_size":-64,`), want: corrupt},
		{name: "number: stripes 2^31", js: m(`"stripes":4000`, `"stripes":2147483648`), want: corrupt, cs: true},
		{name: "number: stripes -4000", js: m(`"stripes":4000`, `"stripes":-4000`), want: corrupt, cs: true},
		{name: "number: area size 2^64-1", js: m(`"size":"258048"`, `"size":"18446744073709551615"`), want: corrupt}, // cryptsetup: "Interval offset+length overflow"
		{name: "number: area size 2^63", js: m(`"size":"258048"`, `"size":"9223372036854775808"`), want: corrupt},
		{name: "number: area size 2^64", js: m(`"size":"258048"`, `"size":"18446744073709551616"`), want: corrupt},
		// The area key feeds the KDF's output length: 2^40 bytes would be
		// allocated at unlock (cryptsetup allocates it too, and fails).
		{name: "number: area key_size 2^40", js: m(`"aes-xts-plain64","key_size":64}`, `"aes-xts-plain64","key_size":1099511627776}`), want: corrupt, cs: true},
		{name: "number: area key_size 2^32+64", js: m(`"aes-xts-plain64","key_size":64}`, `"aes-xts-plain64","key_size":4294967360}`), want: corrupt, cs: true},
		{name: "number: area key_size 513", js: m(`"aes-xts-plain64","key_size":64}`, `"aes-xts-plain64","key_size":513}`), want: corrupt, cs: true},
		{name: "number: kdf iterations 2^32+1", js: m(`"iterations":1000,"salt"`, `"iterations":4294967297,"salt"`), want: corrupt, cs: true},
		{name: "number: kdf iterations -1", js: m(`"iterations":1000,"salt"`, `"iterations":-1,"salt"`), want: corrupt, cs: true},
		{name: "number: digest iterations 2^32+1", js: m(`"hash":"sha256",`+"\n"+`  "iterations":1000`, `"hash":"sha256",`+"\n"+`  "iterations":4294967297`), want: corrupt, cs: true},
		{name: "number: argon2 memory 2^40", js: m(`"type":"pbkdf2","hash":"sha256","iterations":1000,"salt"`, `"type":"argon2id","time":4,"memory":1099511627776,"cpus":1,"salt"`), want: corrupt, cs: true},
		{name: "number: argon2 cpus 2^31", js: m(`"type":"pbkdf2","hash":"sha256","iterations":1000,"salt"`, `"type":"argon2id","time":4,"memory":32,"cpus":2147483648,"salt"`), want: corrupt, cs: true},
		{name: "number: sector_size 2^32+512", js: m(`"sector_size":512`, `"sector_size":4294967808`), want: corrupt}, // cryptsetup: `Illegal field "sector_size"`
		{name: "number: iv_tweak 2^64-1", js: m(`"iv_tweak":"0"`, `"iv_tweak":"18446744073709551615"`), want: accepted, cs: true},
		{name: "number: iv_tweak 2^64", js: m(`"iv_tweak":"0"`, `"iv_tweak":"18446744073709551616"`), want: corrupt}, // cryptsetup: "Illegal iv_tweak value"
		{name: "number: priority 2^40", js: m(`"key_size":64,`, `"key_size":64,"priority":1099511627776,`), want: accepted, cs: true},
		{name: "number: 100000 digits in an unknown member", hdr: big, js: edit(t, sizedLUKS2(t, big), tok, tok+`"x":`+strings.Repeat("9", 100000)+","), want: accepted, cs: true},
		{name: "number: 1e999999 in an unknown member", js: m(tok, tok+`"x":-1e999999,`), want: accepted, cs: true},
		{name: "number: keyslot 4294967296", js: m(`"keyslots":{"0":`, `"keyslots":{"4294967296":`), want: corrupt},
		{name: "number: token 2^64", js: m(tok, `"tokens":{"18446744073709551616":{"type":"x","keyslots":[]}},`), want: corrupt, cs: true}, // cryptimg keeps tokens to 0..31, as cryptsetup's API does

		// Offsets that overflow: the data segment must start at an
		// addressable byte (an int64 file offset, as Linux's loff_t);
		// cryptsetup reads these headers but cannot open a device that
		// large.
		{name: "offset: segment at 2^63", js: m(`"offset":"294912"`, `"offset":"9223372036854775808"`), want: corrupt, cs: true},
		{name: "offset: segment at 2^64-512", js: m(`"offset":"294912"`, `"offset":"18446744073709551104"`), want: corrupt, cs: true},
		{name: "offset: segment at 2^63-1024, dynamic", js: m(`"offset":"294912"`, `"offset":"9223372036854774784"`), want: accepted, cs: true},
		// A size beyond them loads (tests/luks2-validation-test
		// "uint64-max-segment-size"); the data cannot be read.
		{name: "offset: segment size 2^63", js: m(`"size":"dynamic"`, `"size":"9223372036854775808"`), want: accepted, cs: true, check: unreadable},
		{name: "offset: segment offset+size wraps 2^64", js: m(`"size":"dynamic"`, `"size":"18446744073709551104"`), want: accepted, cs: true, check: unreadable},
		{name: "offset: segment at 2^64", js: m(`"offset":"294912"`, `"offset":"18446744073709551616"`), want: corrupt}, // cryptsetup: "Illegal segment offset value"
		{name: "offset: segment at -512", js: m(`"offset":"294912"`, `"offset":"-512"`), want: corrupt},                 // cryptsetup: "not in numbered form"
		{name: "offset: area offset+size wraps 2^64", js: m(`"offset":"32768","size":"258048"`, `"offset":"18446744073709547520","size":"8192"`), want: corrupt},
		{name: "offset: second segment wraps 2^64", js: segs([4]string{"crypt", "294912", "1048576"}, [4]string{"crypt", "18446744073709550592", "1048576"}), want: corrupt}, // cryptsetup: "Interval offset+length overflow"

		// Duplicate names: json-c keeps the last member of a name, whole
		// (encoding/json would merge two objects of one name).
		{name: "duplicate: keyslots, the second empty", js: m(tok, tok+`"keyslots":{},`), want: corrupt},
		{name: "duplicate: keyslots spelled with an escape, the second empty", js: m(tok, tok+`"key\u0073lots":{},`), want: corrupt},
		{name: "duplicate: segments, the first empty", js: m(tok, tok+`"segments":{},`), want: accepted, cs: true},
		{name: "duplicate: keyslot 0, the second broken", js: m("\"}}},\n \"tokens\"", `"}},"0":{"type":"luks2"}},`+"\n \"tokens\""), want: corrupt},
		{name: "duplicate: af, the second without stripes and hash", js: m(`"af":{"type":"luks1","stripes":4000,"hash":"sha256"},`, `"af":{"type":"luks1","stripes":4000,"hash":"sha256"},"af":{"type":"luks1"},`), want: corrupt},
		{name: "duplicate: af, the first without stripes and hash", js: m(`"af":{"type":"luks1","stripes":4000,"hash":"sha256"},`, `"af":{"type":"luks1"},"af":{"type":"luks1","stripes":4000,"hash":"sha256"},`), want: accepted, cs: true},
		{name: "duplicate: kdf, the second only a type", js: m(`"salt":"`+salt32+`"}}}`, `"salt":"`+salt32+`"},"kdf":{"type":"pbkdf2"}}}`), want: corrupt},
		{name: "duplicate: area, the second only a type", js: m(`"key_size":64},`, `"key_size":64},"area":{"type":"raw"},`), want: corrupt},
		{name: "duplicate: key_size -1 then 64", js: m(`"key_size":64,`, `"key_size":-1,"key_size":64,`), want: accepted, cs: true, check: func(t *testing.T, h *LUKS2) {
			if h.Keyslots[0].KeySize != 64 {
				t.Errorf("key_size %d", h.Keyslots[0].KeySize)
			}
		}},
		{name: "duplicate: key_size 64 then -1", js: m(`"key_size":64,`, `"key_size":64,"key_size":-1,`), want: corrupt},
		{name: "duplicate: digest keyslots [] then [0]", js: m(`"keyslots":["0"]`, `"keyslots":[],"keyslots":["0"]`), want: accepted, cs: true},
		{name: "duplicate: digest keyslots [0] then []", js: m(`"keyslots":["0"]`, `"keyslots":["0"],"keyslots":[]`), want: corrupt}, // cryptsetup: "Keyslot 0 is not assigned to exactly 1 digest"
		{name: "duplicate: config, the second without keyslots_size", js: m(`"keyslots_size":"262144"}`, `"keyslots_size":"262144"},"config":{"json_size":"12288"}`), want: corrupt},
		{name: "duplicate: requirements, the second empty", js: m(`"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{"mandatory":["online-reencrypt-v2"]},"requirements":{}}`), want: accepted, cs: true,
			check: func(t *testing.T, h *LUKS2) {
				if h.ReadOnly || h.unfinished() != nil {
					t.Error("the first requirements object counted")
				}
			}},
		{name: "duplicate: tokens, the second empty", js: m(tok, `"tokens":{"0":{"type":"x","keyslots":["0"]}},"tokens":{},`), want: accepted, cs: true,
			check: func(t *testing.T, h *LUKS2) {
				if len(h.Tokens) != 0 {
					t.Errorf("tokens %v", h.Tokens)
				}
			}},
		{name: "duplicate: tokens, the second naming keyslot 5", js: m(tok, `"tokens":{},"tokens":{"0":{"type":"x","keyslots":["5"]}},`), want: corrupt},
		{name: "duplicate: an unknown member", js: m(tok, tok+`"x":1,"x":[2],`), want: accepted, cs: true},
		{name: "duplicate: hash spelled with an escape", js: m(`"hash":"sha256"},`, `"hash":"sha256","h\u0061sh":"sha1"},`), want: accepted, cs: true, check: func(t *testing.T, h *LUKS2) {
			if h.Keyslots[0].AF.Hash != "sha1" {
				t.Errorf("af hash %q", h.Keyslots[0].AF.Hash)
			}
		}},
		{name: "duplicate: 4 MiB of one name", hdr: huge, js: edit(t, sizedLUKS2(t, huge), tok, tok+`"x":{`+strings.Repeat(`"a":0,`, 690000)+`"a":1},`), want: accepted, cs: true},
		{name: "duplicate: 256 KiB of names", hdr: big, js: edit(t, sizedLUKS2(t, big), tok, tok+`"x":{`+manyNames(20000)+`},`), want: accepted, cs: true},
		// encoding/json also matches names case-insensitively, json-c
		// only exactly: to json-c these are unknown members.
		{name: "case: Key_Size for key_size", js: m(`"key_size":64,`, `"Key_Size":64,`), want: corrupt},
		{name: "case: KEYSLOTS for keyslots", js: m(`{"keyslots":`, `{"KEYSLOTS":`), want: corrupt},
		{name: "case: Kelvin sign for k", js: m(`"key_size":64,`, "\"\u212aey_size\":64,"), want: corrupt},
		{name: "case: key_size 64, KEY_SIZE -1", js: m(`"key_size":64,`, `"key_size":64,"KEY_SIZE":-1,`), want: accepted, cs: true, check: func(t *testing.T, h *LUKS2) {
			if h.Keyslots[0].KeySize != 64 {
				t.Errorf("key_size %d", h.Keyslots[0].KeySize)
			}
		}},
		{name: "case: HASH as the last member", js: m(`"hash":"sha256"},`, `"hash":"sha256","HASH":"md5"},`), want: accepted, cs: true},
		{name: "case: MANDATORY as the only member", js: m(`"keyslots_size":"262144"}`, `"keyslots_size":"262144","requirements":{ "MANDATORY":["online-reencrypt-v2"] }}`), want: accepted, cs: true,
			check: func(t *testing.T, h *LUKS2) {
				if h.ReadOnly || h.unfinished() != nil {
					t.Error("MANDATORY counted")
				}
			}},
		{name: "case: a token's Type", js: m(tok, `"tokens":{"0":{"type":"x","keyslots":["0"],"Type":"y"}},`), want: accepted, cs: true, check: func(t *testing.T, h *LUKS2) {
			if h.Tokens[0].Type != "x" {
				t.Errorf("token type %q", h.Tokens[0].Type)
			}
		}},

		// Invalid UTF-8: json-c reads strings as bytes, encoding/json
		// turns bad bytes into U+FFFD; both read what follows the same.
		{name: "utf-8: 0xff in an unknown member", js: m(tok, tok+"\"x\":\"a\xffb\","), want: accepted, cs: true},
		{name: "utf-8: 0xff in an unknown member's name", js: m(tok, tok+"\"x\xff\":1,"), want: accepted, cs: true},
		{name: "utf-8: names differing only in bad bytes", js: m(tok, tok+"\"x\xfe\":1,\"x\xff\":2,"), want: accepted, cs: true},
		{name: "utf-8: overlong '/'", js: m(tok, tok+"\"x\":\"\xc0\xaf\","), want: accepted, cs: true},
		{name: "utf-8: encoded surrogate", js: m(tok, tok+"\"x\":\"\xed\xa0\x80\","), want: accepted, cs: true},
		{name: "utf-8: truncated sequence", js: m(tok, tok+"\"x\":\"\xe2\x82\","), want: accepted, cs: true},
		{name: "utf-8: escaped lone surrogate", js: m(tok, tok+`"x":"\ud800",`), want: accepted, cs: true},
		{name: "utf-8: lone continuation byte in a token", js: m(tok, "\"tokens\":{\"0\":{\"type\":\"x\",\"keyslots\":[\"0\"],\"note\":\"\x80\"}},"), want: accepted, cs: true},
		{name: "utf-8: 0xff in a token type", js: m(tok, "\"tokens\":{\"0\":{\"type\":\"x\xff\",\"keyslots\":[\"0\"]}},"), want: accepted, cs: true},
		{name: "utf-8: 0xff in the segment cipher", js: m(`"aes-xts-plain64","sector_size"`, "\"aes-xts-plain64\xff\",\"sector_size\""), want: accepted, cs: true},
		{name: "utf-8: 0xff in a requirement", js: m(`"keyslots_size":"262144"}`, "\"keyslots_size\":\"262144\",\"requirements\":{\"mandatory\":[\"online-reencrypt-v2\xff\"]}}"), want: accepted, cs: true,
			check: func(t *testing.T, h *LUKS2) {
				if !h.ReadOnly || h.unfinished() != nil {
					t.Error("not an unknown requirement")
				}
			}},
		{name: "utf-8: 0xff in a keyslot name", js: m(`"keyslots":{"0":`, "\"keyslots\":{\"0\xff\":"), want: corrupt},
		{name: "utf-8: 0xff in the segment offset", js: m(`"offset":"294912"`, "\"offset\":\"294912\xff\""), want: corrupt},
		{name: "utf-8: 0xff outside a string", js: m(tok, tok+"\xff"), want: corrupt},
		{name: "utf-8: byte order mark", js: m(`{"keyslots"`, "{\xef\xbb\xbf\"keyslots\""), want: corrupt},
		// cryptsetup reads these and fails at unlock.
		{name: "utf-8: 0xff in the digest hash", js: m(`"segments":["0"],"hash":"sha256"`, "\"segments\":[\"0\"],\"hash\":\"sha256\xff\""), want: badHash, cs: true},
		{name: "utf-8: 0xff in the kdf salt", js: m(`"iterations":1000,"salt":"`, "\"iterations\":1000,\"salt\":\"\xff"), want: corrupt, cs: true},

		// Areas that overlap.
		{name: "overlap: two keyslots in one area", js: twoSlots(32768, 131072, 32768, 131072), want: corrupt}, // cryptsetup: "Overlapping areas"
		{name: "overlap: keyslot 1 starts inside 0", js: twoSlots(32768, 131072, 159744, 131072), want: corrupt},
		{name: "overlap: keyslot 1 inside 0", js: twoSlots(32768, 258048, 65536, 131072), want: corrupt},
		{name: "overlap: keyslot 0 inside 1", js: twoSlots(65536, 131072, 32768, 258048), want: corrupt},
		{name: "overlap: by one byte", js: twoSlots(32768, 131072, 163839, 131072), want: corrupt},
		// cryptsetup checks every keyslot's area (hdr_validate_areas),
		// whatever its type.
		{name: "overlap: a keyslot of an unknown type over keyslot 0", js: edit(t, twoSlots(32768, 131072, 98304, 131072), `"1":{"type":"luks2"`, `"1":{"type":"luks3"`), want: corrupt},
		{name: "overlap: adjacent keyslots", js: twoSlots(32768, 131072, 163840, 131072), want: accepted, cs: true, check: slots(0, 1)},
		{name: "overlap: area over the secondary copy", js: m(`"offset":"32768"`, `"offset":"28672"`), want: corrupt}, // cryptsetup: "Illegal area offset"
		{name: "overlap: area at 0", js: m(`"offset":"32768"`, `"offset":"0"`), want: corrupt},
		{name: "overlap: area a byte past the keyslots area", js: m(`"size":"258048"`, `"size":"262145"`), want: corrupt},
		{name: "overlap: keyslots_size under the area", js: m(`"keyslots_size":"262144"`, `"keyslots_size":"131072"`), want: corrupt},
		{name: "overlap: area of 0 bytes", js: m(`"size":"258048"`, `"size":"0"`), want: corrupt},
		{name: "overlap: segment inside the keyslots area", js: m(`"offset":"294912"`, `"offset":"32768"`), want: corrupt},
		{name: "overlap: segment a sector before the keyslots end", js: m(`"offset":"294912"`, `"offset":"294400"`), want: corrupt},
		// cryptsetup 2.6.1 hdr_validate_segments: segments 0..n-1 without
		// gaps, backups after the others, only the last one dynamic, none
		// overlapping.
		{name: "overlap: two segments", js: segs([4]string{"crypt", "294912", "1048576"}, [4]string{"crypt", "819200", "dynamic"}), want: corrupt}, // cryptsetup: "Overlapping segments"
		{name: "overlap: two segments at one offset", js: segs([4]string{"crypt", "294912", "1048576"}, [4]string{"crypt", "294912", "dynamic"}), want: corrupt},
		{name: "overlap: linear segment over the crypt one", js: segs([4]string{"crypt", "294912", "1048576"}, [4]string{"linear", "294912", "dynamic"}), want: corrupt},
		{name: "overlap: dynamic segment before another", js: segs([4]string{"crypt", "294912", "dynamic"}, [4]string{"crypt", "1343488", "1048576"}), want: corrupt}, // cryptsetup: "Only last regular segment is allowed to have 'dynamic' size"
		{name: "overlap: adjacent segments", js: segs([4]string{"crypt", "294912", "1048576"}, [4]string{"crypt", "1343488", "dynamic"}), want: accepted, cs: true},
		{name: "overlap: segment 1 before segment 0", js: segs([4]string{"crypt", "1343488", "1048576"}, [4]string{"crypt", "294912", "1048576"}), want: accepted, cs: true},
		{name: "overlap: a gap in the segment numbers", js: edit(t, segs([4]string{"crypt", "294912", "1048576"}, [4]string{"crypt", "1343488", "dynamic"}), `"1":{`, `"2":{`, `"segments":["0","1"]`, `"segments":["0","2"]`), want: corrupt}, // cryptsetup: "Gap at key 1 in segments object"
		{name: "overlap: a backup before the data", js: segs([4]string{"crypt", "294912", "1048576", `,"flags":["backup-previous"]`}, [4]string{"crypt", "1343488", "dynamic"}), want: corrupt},
		{name: "overlap: a backup over the data", js: segs([4]string{"crypt", "294912", "dynamic"}, [4]string{"crypt", "294912", "dynamic", `,"flags":["backup-final"]`}), want: accepted, cs: true},

		// Parts cryptimg does not know load, as in cryptsetup
		// (docs/LUKS2-VALIDATION.md), and are named by Problems.
		{name: "unknown: keyslot type", js: edit(t, b, `"1":{"type":"luks2"`, `"1":{"type":"luks3"`), want: accepted, cs: true, check: problem(`keyslot 1: type "luks3"`)},
		{name: "unknown: keyslot kdf", js: m(`"type":"pbkdf2","hash":"sha256","iterations":1000,"salt"`, `"type":"argon2","time":4,"memory":32,"cpus":1,"salt"`), want: accepted, cs: true, check: problem(`kdf "argon2"`)},
		{name: "unknown: segment type", js: segs([4]string{"some_type", "294912", "dynamic"}), want: accepted, cs: true, check: problem(`segment 0: type "some_type"`)},
		{name: "unknown: second segment type", js: segs([4]string{"crypt", "294912", "512"}, [4]string{"some", "295424", "dynamic"}), want: accepted, cs: true, check: problem(`segment 1: type "some"`)},
		{name: "unknown: digest type", js: m(`"type":"pbkdf2","keyslots"`, `"type":"pbkdf3","keyslots"`), want: accepted, cs: true, check: problem(`digest 0: type "pbkdf3"`)},
		{name: "unknown: token type", js: m(tok, `"tokens":{"0":{"type":"x-future","keyslots":["0"]}},`), want: accepted, cs: true, check: problem("")},
		{name: "hostile: keyslot cipher_null", js: m(`"encryption":"aes-xts-plain64","key_size":64}`, `"encryption":"cipher_null-ecb","key_size":64}`), want: accepted, cs: true, check: problem("keyslot 0 is not encrypted")},
		{name: "hostile: segment cipher_null", js: m(`"encryption":"aes-xts-plain64","sector_size"`, `"encryption":"cipher_null","sector_size"`), want: accepted, cs: true, check: problem("segment 0 is not encrypted")},
		{name: "hostile: segment capi", js: m(`"encryption":"aes-xts-plain64","sector_size"`, `"encryption":"capi:xts(aes)-plain64","sector_size"`), want: accepted, cs: true, check: problem("kernel crypto API")},

		// Copies that disagree (a: keyslot 0; b: keyslots 0 and 1): the
		// valid copy with the higher seqid wins, the primary on a tie;
		// a copy that fails is read around with a warning. (cryptsetup
		// also rewrites the losing copy; a read here writes nothing.)
		{name: "copies: newer secondary", js: a, js2: b, seq: [2]uint64{5, 6}, want: accepted, cs: true, check: chose(6, "differ", 0, 1)},
		{name: "copies: newer primary", js: a, js2: b, seq: [2]uint64{6, 5}, want: accepted, cs: true, check: chose(6, "differ", 0)},
		{name: "copies: same seqid, primary a", js: a, js2: b, seq: [2]uint64{5, 5}, want: accepted, cs: true, check: chose(5, "", 0)},
		{name: "copies: same seqid, primary b", js: b, js2: a, seq: [2]uint64{5, 5}, want: accepted, cs: true, check: chose(5, "", 0, 1)},
		{name: "copies: seqid 2^64-1 against 0", js: a, js2: b, seq: [2]uint64{1<<64 - 1, 0}, want: accepted, cs: true, check: chose(1<<64-1, "differ", 0)},
		{name: "copies: seqid 0 against 2^64-1", js: a, js2: b, seq: [2]uint64{0, 1<<64 - 1}, want: accepted, cs: true, check: chose(1<<64-1, "differ", 0, 1)},
		{name: "copies: seqid 2^63 against 2^63-1", js: a, js2: b, seq: [2]uint64{1 << 63, 1<<63 - 1}, want: accepted, cs: true, check: chose(1<<63, "differ", 0)},
		{name: "copies: newer secondary nested too deep", js: a, js2: tooDeep, seq: [2]uint64{1, 2}, want: accepted, cs: true, check: chose(1, "secondary", 0)},
		{name: "copies: newer primary nested too deep", js: tooDeep, js2: a, seq: [2]uint64{2, 1}, want: accepted, cs: true, check: chose(1, "primary", 0)},
		{name: "copies: newer secondary emptied by a duplicate", js: a, js2: emptied, seq: [2]uint64{1, 2}, want: accepted, cs: true, check: chose(1, "secondary", 0)},
		{name: "copies: both nested too deep", js: tooDeep, js2: tooDeep, seq: [2]uint64{1, 2}, want: corrupt},
	}
}

// TestLUKS2HostileJSON: Read refuses hostile metadata with ErrCorrupt (the
// CLI's exit 4), or reads it as cryptsetup does, without panicking, in
// well under a second and 64 MiB of allocations each, also for 4 MiB of
// metadata.
func TestLUKS2HostileJSON(t *testing.T) {
	for _, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			file := c.file(t)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			h, err := func() (h *LUKS2, err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				return readL2(file)
			}()
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if got := errClass(err); got != c.want {
				t.Fatalf("Read: %s, want %s (%v)", got, c.want, err)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
				t.Errorf("Read of %d bytes allocated %d MiB", len(file), alloc>>20)
			}
			if took > time.Second {
				t.Errorf("Read took %v", took)
			}
			t.Logf("%d bytes read in %v with %d KiB allocated", len(file), took, (after.TotalAlloc-before.TotalAlloc)>>10)
			if err != nil {
				return
			}
			i := h.Info()
			if i.PayloadOffset < 0 || i.PayloadSize < 0 || i.PayloadOffset+i.PayloadSize < 0 {
				t.Errorf("payload at %d, %d bytes", i.PayloadOffset, i.PayloadSize)
			}
			for s := -1; s <= 32; s++ {
				h.SlotActive(s)
			}
			h.FirstFreeSlot()
			h.UnlockCost(-1)
			h.Problems()
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}

// TestLUKS2HostileJSONCryptsetup checks the cs verdicts against the real
// cryptsetup luksDump and, where both read a file, that they read the
// same copy: its seqid (cryptsetup's epoch) and keyslots.
func TestLUKS2HostileJSONCryptsetup(t *testing.T) {
	bin := cryptsetupPath(t)
	dir := t.TempDir()
	for i, c := range hostileCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			file := c.file(t)
			path := filepath.Join(dir, strconv.Itoa(i))
			if err := os.WriteFile(path, file, 0o600); err != nil {
				t.Fatal(err)
			}
			out, code := runCryptsetup(t, bin, "luksDump", path)
			if (code == 0) != c.cs {
				t.Fatalf("cryptsetup luksDump exit %d, recorded as reading it: %v\n%s", code, c.cs, out)
			}
			h, err := readL2(file)
			if code != 0 || err != nil {
				return
			}
			epoch, slots := dumpSummary(out)
			var want []string
			for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
				want = append(want, strconv.Itoa(n))
			}
			if epoch != strconv.FormatUint(h.SeqID(), 10) || !slices.Equal(slots, want) {
				t.Errorf("cryptsetup read epoch %s, keyslots %v; cryptimg seqid %d, keyslots %v", epoch, slots, h.SeqID(), want)
			}
		})
	}
}

// dumpSummary returns the epoch and the keyslot numbers that a cryptsetup
// luksDump lists.
func dumpSummary(out string) (epoch string, slots []string) {
	section := ""
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			section = line
			if v, ok := strings.CutPrefix(line, "Epoch:"); ok {
				epoch = strings.TrimSpace(v)
			}
			continue
		}
		if n, _, ok := strings.Cut(strings.TrimSpace(line), ": "); ok && section == "Keyslots:" && strings.Trim(n, "0123456789") == "" {
			slots = append(slots, n)
		}
	}
	return epoch, slots
}

// FuzzLUKS2JSONC: jsonc drops exactly the members json-c does not keep:
// decoded into Go values (where the last of a name wins, as in json-c),
// its output equals its input without the case-folded field names, and a
// second pass changes nothing.
func FuzzLUKS2JSONC(f *testing.F) {
	f.Add(minimalLUKS2)
	f.Add(`{"a":1,"b":{"a":2,"a":[3,{"a":4,"a":5}]},"a":6}`)
	f.Add(`{"Key_Size":1,"key_size":2, "TYPE" : 3 }`)
	f.Add(`{"x":{"Type":1},"x":{"a\u0062":1,"ab":2,"\ud83d\ude00":1,"😀":2}}`)
	f.Add(`{"a":[[[{"b":1,"b":2}]]],"c":"\"}"}`)
	f.Fuzz(func(t *testing.T, js string) {
		out, err := jsonc([]byte(js))
		if err != nil || !json.Valid([]byte(js)) {
			if err == nil && string(out) != js {
				t.Fatalf("invalid JSON rewritten: %q", out)
			}
			return
		}
		decode := func(b []byte) (v any) {
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			if err := d.Decode(&v); err != nil {
				t.Fatalf("%q: %v", b, err)
			}
			return v
		}
		var dropFolded func(v any, depth int)
		dropFolded = func(v any, depth int) {
			switch v := v.(type) {
			case map[string]any:
				for k, e := range v {
					if depth <= 4 && foldsToField([]byte(k)) {
						delete(v, k)
						continue
					}
					dropFolded(e, depth+1)
				}
			case []any:
				for _, e := range v {
					dropFolded(e, depth+1)
				}
			}
		}
		want := decode([]byte(js))
		dropFolded(want, 1)
		if got := decode(out); !reflect.DeepEqual(got, want) {
			t.Fatalf("%q became %q", js, out)
		}
		if again, err := jsonc(out); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("%q: second pass gave %q, %v", out, again, err)
		}
	})
}
