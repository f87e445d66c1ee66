package header

// LUKS2 JSON metadata, validated the way cryptsetup 2.6 to 2.8's
// LUKS2_hdr_validate does (lib/luks2/luks2_json_metadata.c), as summarised
// in docs/LUKS2-VALIDATION.md.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"hash"
	"hash/maphash"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// u64s is a JSON string holding a decimal unsigned 64-bit number, as LUKS2
// stores offsets and sizes.
type u64s uint64

func (u *u64s) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a decimal string, got %s", b)
	}
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return fmt.Errorf("%q is not an unsigned decimal", s)
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%q does not fit in 64 bits", s)
	}
	*u = u64s(v)
	return nil
}

// MarshalJSON writes the decimal string.
func (u u64s) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.FormatUint(uint64(u), 10)) }

// Keyslot is a LUKS2 keyslot object.
type Keyslot struct {
	Type      string `json:"type"`
	KeySize   int    `json:"key_size"`
	Priority  *int   `json:"priority,omitempty"`
	Mode      string `json:"mode,omitempty"`      // reencrypt keyslots
	Direction string `json:"direction,omitempty"` // reencrypt keyslots
	AF        struct {
		Type    string `json:"type"`
		Stripes int    `json:"stripes"`
		Hash    string `json:"hash"`
	} `json:"af"`
	Area struct {
		Type       string `json:"type"`
		Offset     u64s   `json:"offset"`
		Size       u64s   `json:"size"`
		Encryption string `json:"encryption,omitempty"`
		KeySize    int    `json:"key_size,omitempty"`
		Hash       string `json:"hash,omitempty"`        // checksum resilience
		SectorSize int    `json:"sector_size,omitempty"` // checksum resilience
		ShiftSize  u64s   `json:"shift_size,omitempty"`  // datashift resilience
	} `json:"area"`
	KDF struct {
		Type       string `json:"type"`
		Hash       string `json:"hash,omitempty"`
		Iterations uint32 `json:"iterations,omitempty"`
		Time       uint32 `json:"time,omitempty"`
		Memory     uint32 `json:"memory,omitempty"`
		CPUs       uint32 `json:"cpus,omitempty"`
		Salt       []byte `json:"salt"`
	} `json:"kdf"`
	rawObject
}

// rawObject keeps an object's JSON as read, so that a rewrite keeps the
// fields cryptimg does not know: an object read and not changed is written
// back byte for byte, a changed one has its known fields replaced and the
// others kept (overlay).
type rawObject struct {
	raw     json.RawMessage
	changed bool
}

func (r *rawObject) setRaw(b json.RawMessage) { r.raw = b }

// overlay is v's JSON over the object's original: v's fields replace
// theirs (a field v omits is dropped), fields v does not know stay.
func overlay(r rawObject, v any) (json.RawMessage, error) {
	if r.raw != nil && !r.changed {
		return r.raw, nil
	}
	b, err := json.Marshal(v)
	if err != nil || r.raw == nil {
		return b, err
	}
	var orig, ours map[string]json.RawMessage
	if err := json.Unmarshal(r.raw, &orig); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &ours); err != nil {
		return nil, err
	}
	t := reflect.TypeOf(v).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" {
			delete(orig, name)
		}
	}
	maps.Copy(orig, ours)
	return json.Marshal(orig)
}

// Segment is a LUKS2 segment object.
type Segment struct {
	Type       string            `json:"type"`
	Offset     u64s              `json:"offset"`
	Size       string            `json:"size"` // decimal or "dynamic"
	IVTweak    u64s              `json:"iv_tweak"`
	Encryption string            `json:"encryption"`
	SectorSize int               `json:"sector_size"`
	Integrity  json.RawMessage   `json:"integrity,omitempty"`
	Flags      []string          `json:"flags,omitempty"`
	size       uint64            // Size as a number; 0 for dynamic
	beyond     bool              // offset+size reach beyond 2^63 bytes
	integrity  *SegmentIntegrity // Integrity parsed, or nil
	rawObject
}

// Digest is a LUKS2 digest object.
type Digest struct {
	Type       string   `json:"type"`
	Keyslots   []string `json:"keyslots"`
	Segments   []string `json:"segments"`
	Hash       string   `json:"hash"`
	Iterations uint32   `json:"iterations"`
	Salt       []byte   `json:"salt"`
	Digest     []byte   `json:"digest"`
	rawObject
}

// Token is a LUKS2 token: its type and keyslots, and the whole object.
type Token struct {
	Type     string          `json:"type"`
	Keyslots []string        `json:"keyslots"`
	Raw      json.RawMessage `json:"-"`
}

// Config is the LUKS2 config object.
type Config struct {
	JSONSize     u64s     `json:"json_size"`
	KeyslotsSize u64s     `json:"keyslots_size"`
	Flags        []string `json:"flags,omitempty"`
	Requirements *struct {
		Mandatory []string `json:"mandatory"`
	} `json:"requirements,omitempty"`
	rawObject
}

// LUKS2 is a LUKS2 header: the copy in use and its metadata.
type LUKS2 struct {
	bin      *luks2Bin
	Keyslots map[int]*Keyslot
	Segments map[int]*Segment
	Digests  map[int]*Digest
	Tokens   map[int]*Token
	Config   Config
	// Warning, when not empty, says that a header copy is damaged or out
	// of date; the read uses the good one and writes nothing (Repair, or
	// any update, writes both copies again).
	Warning string
	// ReadOnly is set by an unknown mandatory requirement: cryptsetup then
	// refuses every metadata change.
	ReadOnly bool

	extra     map[string]json.RawMessage // top-level members cryptimg does not know
	seg       int                        // the data segment
	digest    int                        // its digest
	reencrypt string                     // the reencryption requirement, if any
	allowNull bool                       // AllowNullCipher
	busy      bool                       // marked by an unfinished cryptimg operation (busyRequirement)
}

// unfinished refuses access to the data of an image in mid-reencryption.
func (h *LUKS2) unfinished() error {
	if h.reencrypt != "" {
		return fmt.Errorf("%w (requirement %q)", ErrLUKS2Reencrypt, h.reencrypt)
	}
	return nil
}

// reencryptRequirements mark an unfinished cryptsetup reencryption.
var reencryptRequirements = []string{"offline-reencrypt", "online-reencrypt", "online-reencrypt-v2", "online-reencrypt-v3"}

// objects decodes a section whose keys are decimal object numbers below
// max into decode's results.
func objects[T any](raw map[string]json.RawMessage, section string, max int, decode func(json.RawMessage) (T, error)) (map[int]T, error) {
	out := map[int]T{}
	for k, v := range raw {
		n, err := strconv.Atoi(k)
		if err != nil || n < 0 || n >= max || strconv.Itoa(n) != k {
			return nil, parseErrorf(section, "object name %q is not a number from 0 to %d", k, max-1)
		}
		t, err := decode(v)
		if err != nil {
			return nil, parseErrorf(section+" "+k, "%v", err)
		}
		out[n] = t
	}
	return out, nil
}

func decodeObject[T any](v json.RawMessage) (*T, error) {
	t := new(T)
	if err := json.Unmarshal(v, t); err != nil {
		return nil, err
	}
	if r, ok := any(t).(interface{ setRaw(json.RawMessage) }); ok {
		r.setRaw(v)
	}
	return t, nil
}

// parseLUKS2 decodes and validates one copy's metadata. size is the number
// of bytes readable from the header start.
func parseLUKS2(b *luks2Bin, size int64) (*LUKS2, error) {
	var top struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
		Tokens   map[string]json.RawMessage `json:"tokens"`
		Segments map[string]json.RawMessage `json:"segments"`
		Digests  map[string]json.RawMessage `json:"digests"`
		Config   json.RawMessage            `json:"config"`
	}
	js, err := jsonc(b.JSON)
	if err != nil {
		return nil, parseErrorf("LUKS2 metadata", "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&top); err != nil {
		return nil, parseErrorf("LUKS2 metadata", "invalid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, parseErrorf("LUKS2 metadata", "data after the JSON object")
	}
	for name, present := range map[string]bool{"keyslots": top.Keyslots != nil, "tokens": top.Tokens != nil,
		"segments": top.Segments != nil, "digests": top.Digests != nil, "config": top.Config != nil} {
		if !present {
			return nil, parseErrorf("LUKS2 metadata", "no %q object", name)
		}
	}
	h := &LUKS2{bin: b}
	if err := json.Unmarshal(top.Config, &h.Config); err != nil {
		return nil, parseErrorf("config", "%v", err)
	}
	h.Config.setRaw(top.Config)
	var all map[string]json.RawMessage
	if err := json.Unmarshal(js, &all); err != nil {
		return nil, parseErrorf("LUKS2 metadata", "invalid JSON: %v", err)
	}
	for _, k := range []string{"keyslots", "tokens", "segments", "digests", "config"} {
		delete(all, k)
	}
	if len(all) > 0 {
		h.extra = all
	}
	if h.Keyslots, err = objects(top.Keyslots, "keyslot", luks2MaxSlots, decodeObject[Keyslot]); err != nil {
		return nil, err
	}
	if h.Segments, err = objects(top.Segments, "segment", luks2MaxSlots, decodeObject[Segment]); err != nil {
		return nil, err
	}
	if h.Digests, err = objects(top.Digests, "digest", luks2MaxSlots, decodeObject[Digest]); err != nil {
		return nil, err
	}
	if h.Tokens, err = objects(top.Tokens, "token", luks2MaxSlots, func(v json.RawMessage) (*Token, error) {
		t, err := decodeObject[Token](v)
		if err == nil {
			t.Raw = v
		}
		return t, err
	}); err != nil {
		return nil, err
	}
	if err := h.validate(size); err != nil {
		return nil, err
	}
	return h, nil
}

// validate applies cryptsetup's checks, in its order: requirements, tokens,
// digests, segments, keyslots, config and areas.
func (h *LUKS2) validate(size int64) error {
	if r := h.Config.Requirements; r != nil {
		for _, m := range r.Mandatory {
			if m == busyRequirement {
				h.busy = true
				continue
			}
			if slices.Contains(reencryptRequirements, m) {
				h.reencrypt = m
			}
			h.ReadOnly = true
		}
	}
	for n, t := range h.Tokens {
		if t.Type == "" {
			return parseErrorf(fmt.Sprintf("token %d", n), "no type")
		}
		for _, k := range t.Keyslots {
			if h.keyslot(k) == nil {
				return parseErrorf(fmt.Sprintf("token %d", n), "names keyslot %q, which does not exist", k)
			}
		}
	}
	for n, d := range h.Digests {
		where := fmt.Sprintf("digest %d", n)
		// cryptsetup checks only a digest's type string and its lists when
		// it loads a header (hdr_validate_digests); a digest of another type
		// loads, and its keyslots cannot be opened (unusableDigest).
		if d.Type == "pbkdf2" {
			hf, err := luks2Hash(where, d.Hash)
			if err != nil {
				return err
			}
			if d.Iterations == 0 || len(d.Salt) != 32 || (len(d.Digest) != 20 && len(d.Digest) != hf().Size()) {
				return parseErrorf(where, "bad iterations, salt or digest length")
			}
		}
		for _, k := range d.Keyslots {
			if h.keyslot(k) == nil {
				return parseErrorf(where, "names keyslot %q, which does not exist", k)
			}
		}
		for _, s := range d.Segments {
			if h.segment(s) == nil {
				return parseErrorf(where, "names segment %q, which does not exist", s)
			}
		}
	}
	h.seg = -1
	for _, n := range slices.Sorted(maps.Keys(h.Segments)) {
		s := h.Segments[n]
		where := fmt.Sprintf("segment %d", n)
		if s.Offset%512 != 0 {
			return parseErrorf(where, "offset %d is not a multiple of 512", s.Offset)
		}
		if s.Size != "dynamic" {
			var v u64s
			if err := v.UnmarshalJSON([]byte(strconv.Quote(s.Size))); err != nil || v%512 != 0 || v == 0 {
				return parseErrorf(where, "size %q is neither \"dynamic\" nor a non-zero multiple of 512", s.Size)
			}
			s.size = uint64(v)
		}
		// Files and devices end before 2^63 bytes (an int64 offset): a
		// segment starting there is refused, one whose size reaches there
		// loads (as in cryptsetup, whose tests/luks2-validation-test
		// loads a size of 2^64-512) and cannot be read (dataErr).
		if s.Offset > math.MaxInt64 {
			return parseErrorf(where, "offset %d lies beyond 2^63 bytes", s.Offset)
		}
		s.beyond = s.size > math.MaxInt64-uint64(s.Offset)
		if s.Type != "crypt" {
			// linear, hw-opal and unknown types pass as long as their
			// common fields do (cryptsetup hdr_validate_segments;
			// tests/luks2-validation-test "segment-unknown-type").
			continue
		}
		if s.Encryption == "" || !cipher.ValidSectorSize(s.SectorSize) {
			return parseErrorf(where, "bad encryption %q or sector size %d", s.Encryption, s.SectorSize)
		}
		if s.size%uint64(s.SectorSize) != 0 {
			return parseErrorf(where, "size is not a multiple of the sector size %d", s.SectorSize)
		}
		var err error
		if s.integrity, err = parseIntegrity(where, s.Integrity); err != nil {
			return err
		}
		if h.digestOf("segments", n) < 0 {
			return parseErrorf(where, "not covered by any digest")
		}
		if !slices.Contains(s.Flags, "backup-previous") && !slices.Contains(s.Flags, "backup-final") && h.seg < 0 {
			h.seg = n
		}
	}
	if len(h.Segments) == 0 {
		return parseErrorf("segments", "no segment")
	}
	if err := h.checkSegmentLayout(); err != nil {
		return err
	}
	if h.seg < 0 {
		// No crypt segment: the data segment is the first regular one,
		// which cryptimg cannot read (dataErr).
		for _, n := range slices.Sorted(maps.Keys(h.Segments)) {
			if !slices.ContainsFunc(h.Segments[n].Flags, func(f string) bool { return strings.HasPrefix(f, "backup-") }) {
				h.seg = n
				break
			}
		}
	}
	h.digest = h.digestOf("segments", h.seg)
	hdr := uint64(h.bin.HdrSize)
	if uint64(h.Config.JSONSize) != hdr-luks2BinSize {
		return parseErrorf("config", "json_size %d does not match the metadata size %d", h.Config.JSONSize, hdr)
	}
	ks := uint64(h.Config.KeyslotsSize)
	if ks%4096 != 0 || ks > 128<<20 {
		return parseErrorf("config", "keyslots_size %d is not a multiple of 4096 up to 128 MiB", ks)
	}
	for _, s := range h.Segments {
		if uint64(s.Offset) < 2*hdr+ks && uint64(s.Offset) != 0 {
			return parseErrorf("config", "keyslots area ends at %d, past segment offset %d", 2*hdr+ks, s.Offset)
		}
	}
	type span struct{ lo, hi uint64 }
	var areas []span
	for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
		k := h.Keyslots[n]
		where := fmt.Sprintf("keyslot %d", n)
		lo, hi := uint64(k.Area.Offset), uint64(k.Area.Offset)+uint64(k.Area.Size)
		if k.Area.Size == 0 || lo < 2*hdr || hi > 2*hdr+ks || hi < lo {
			return parseErrorf(where, "area %d+%d lies outside the keyslots area", lo, k.Area.Size)
		}
		for _, a := range areas {
			if lo < a.hi && a.lo < hi {
				return parseErrorf(where, "area overlaps another keyslot's")
			}
		}
		areas = append(areas, span{lo, hi})
		if k.Type != "luks2" {
			continue
		}
		if k.KeySize <= 0 || k.KeySize > MaxKeyBytes || k.AF.Type != "luks1" || k.AF.Stripes != Stripes || k.Area.Type != "raw" || k.Area.KeySize <= 0 || k.Area.KeySize > MaxKeyBytes {
			return parseErrorf(where, "unsupported key size, AF or area")
		}
		if _, err := luks2Hash(where, k.AF.Hash); err != nil {
			return err
		}
		if afSectors(uint64(k.KeySize), Stripes)*SectorSize > uint64(k.Area.Size) {
			return parseErrorf(where, "area of %d bytes is too small for its key material", k.Area.Size)
		}
		// cryptsetup checks the fields of the KDFs it knows and lets
		// another type load (luks2_keyslot_luks2.c luks2_keyslot_validate);
		// such a keyslot cannot be opened (slotErr).
		switch k.KDF.Type {
		case "pbkdf2":
			if _, err := luks2Hash(where, k.KDF.Hash); err != nil {
				return err
			}
			if k.KDF.Iterations == 0 {
				return parseErrorf(where, "pbkdf2 with 0 iterations")
			}
		case "argon2i", "argon2id":
			if k.KDF.Time == 0 || k.KDF.Memory < 32 || k.KDF.Memory > argon2MaxMemory || k.KDF.CPUs == 0 || k.KDF.CPUs > 255 {
				return parseErrorf(where, "argon2 time %d, memory %d KiB, cpus %d out of range", k.KDF.Time, k.KDF.Memory, k.KDF.CPUs)
			}
		}
		in := 0
		for _, d := range h.Digests {
			if slices.Contains(d.Keyslots, strconv.Itoa(n)) {
				in++
			}
		}
		if in != 1 {
			return parseErrorf(where, "in %d digests, want exactly one", in)
		}
	}
	if end := int64(2*hdr + ks); end > size {
		return parseErrorf("keyslots", "keyslots area ends at byte %d, beyond the end of the %d-byte area", end, size)
	}
	return nil
}

// checkSegmentLayout applies cryptsetup 2.6.1's checks across segments
// (hdr_validate_segments, validate_segment_intervals): they are numbered
// from 0 without gaps, the backups (a "backup-" flag) after the others, and
// of the others only the last is dynamic and none overlaps another.
func (h *LUKS2) checkSegmentLayout() error {
	n := len(h.Segments)
	regular := n
	for i := range n {
		s := h.Segments[i]
		switch {
		case s == nil:
			return parseErrorf("segments", "no segment %d of %d", i, n)
		case slices.ContainsFunc(s.Flags, func(f string) bool { return strings.HasPrefix(f, "backup-") }):
			regular = min(regular, i)
		case i > regular:
			return parseErrorf(fmt.Sprintf("segment %d", i), "follows backup segment %d", regular)
		}
	}
	if n > 0 && regular == 0 {
		return parseErrorf("segments", "only backup segments")
	}
	for i := range regular {
		a := h.Segments[i]
		if regular > 1 && a.Size != "dynamic" && a.size > math.MaxUint64-uint64(a.Offset) {
			return parseErrorf(fmt.Sprintf("segment %d", i), "offset %d and size %d wrap 2^64", a.Offset, a.size)
		}
	}
	for i := range regular {
		a := h.Segments[i]
		if a.Size == "dynamic" && i != regular-1 {
			return parseErrorf(fmt.Sprintf("segment %d", i), "dynamic, but not the last segment")
		}
		for j := range regular {
			b := h.Segments[j]
			if i != j && a.Offset >= b.Offset && (b.Size == "dynamic" || uint64(a.Offset) < uint64(b.Offset)+b.size) {
				return parseErrorf(fmt.Sprintf("segment %d", i), "overlaps segment %d", j)
			}
		}
	}
	return nil
}

// luks2Hash is hashFunc for the hash field of object where: a missing hash
// is corrupt (cryptsetup refuses the header), an unknown one unsupported
// (cryptsetup reads the header and fails to unlock).
func luks2Hash(where, name string) (func() hash.Hash, error) {
	if name == "" {
		return nil, parseErrorf(where, "no hash")
	}
	return hashFunc(name)
}

// argon2MaxMemory is cryptsetup's argon2 memory limit, 4 GiB in KiB.
const argon2MaxMemory = 4 << 20

func (h *LUKS2) keyslot(name string) *Keyslot {
	n, err := strconv.Atoi(name)
	if err != nil || strconv.Itoa(n) != name {
		return nil
	}
	return h.Keyslots[n]
}

func (h *LUKS2) segment(name string) *Segment {
	n, err := strconv.Atoi(name)
	if err != nil || strconv.Itoa(n) != name {
		return nil
	}
	return h.Segments[n]
}

// digestOf returns the lowest digest whose field ("keyslots" or
// "segments") names object n, or -1.
func (h *LUKS2) digestOf(field string, n int) int {
	for _, d := range slices.Sorted(maps.Keys(h.Digests)) {
		list := h.Digests[d].Segments
		if field == "keyslots" {
			list = h.Digests[d].Keyslots
		}
		if slices.Contains(list, strconv.Itoa(n)) {
			return d
		}
	}
	return -1
}

// jsonMaxDepth is how deeply json-c, with the tokener cryptsetup 2.6.1
// makes (json_tokener_new: JSON_TOKENER_DEFAULT_DEPTH, 32), lets a value
// be nested: inside at most 31 arrays and objects, the top-level object
// included. cryptsetup refuses deeper metadata ("nesting too deep",
// measured); encoding/json alone would read 10000 levels.
const jsonMaxDepth = 31

// jsonMember is an object member seen by jsonc: where its name starts,
// and the name's hash, or 0 for a name that is a LUKS2 field name only
// case-insensitively.
type jsonMember struct {
	hash  uint32
	start int32
}

// jsonc returns JSON text as json-c, and so cryptsetup, reads it, where
// encoding/json reads it differently. Nesting deeper than jsonMaxDepth is
// an error. Of an object's members sharing a name only the last counts
// (json-c replaces the value; encoding/json would merge two objects into
// one map or struct), and a member whose name is a LUKS2 field name only
// case-insensitively, such as "Key_Size", is an unknown member to json-c
// (encoding/json would fill the field with it): text with such members
// comes back without them, other text as it is. Invalid JSON also comes
// back as it is, for the decoder to refuse.
//
// It allocates 8 bytes per member and, when it drops some, a bit per byte
// and the text without them.
func jsonc(js []byte) ([]byte, error) {
	if !json.Valid(js) || len(js) > 1<<30 {
		return js, nil
	}
	n := 0
	for i := 0; i < len(js); i++ {
		switch js[i] {
		case '"':
			i = jsonStringEnd(js, i)
		case ':':
			n++
		}
	}
	seed := maphash.MakeSeed()
	var (
		open    []int                      // per open array -1, per open object the index of its first member
		members = make([]jsonMember, 0, n) // the members of the open objects
		gone    []uint64                   // bit i: json-c does not keep byte i
		a, b    []byte
	)
	drop := func(m jsonMember) {
		start, end := int(m.start), jsonMemberEnd(js, int(m.start))
		if p := bytes.TrimRight(js[:start], " \t\n\r"); js[end] == '}' && p[len(p)-1] == ',' {
			start = len(p) - 1 // the last member goes with the comma before it
		}
		if gone == nil {
			gone = make([]uint64, len(js)/64+1)
		}
		for i := start; i < end; i++ {
			gone[i/64] |= 1 << (i % 64)
		}
	}
	for i := 0; i < len(js); i++ {
		c := js[i]
		switch c {
		case ' ', '\t', '\n', '\r', ',', ':':
			continue
		case ']', '}':
			first := open[len(open)-1]
			open = open[:len(open)-1]
			if first < 0 {
				continue
			}
			obj := members[first:]
			members = members[:first]
			slices.SortFunc(obj, func(x, y jsonMember) int { return cmp.Or(cmp.Compare(x.hash, y.hash), cmp.Compare(x.start, y.start)) })
			for k, m := range obj {
				if m.hash == 0 {
					drop(m)
					continue
				}
				for _, later := range obj[k+1:] {
					if later.hash != m.hash {
						break
					}
					if a, b = jsonName(a, js, m.start), jsonName(b, js, later.start); bytes.Equal(a, b) {
						drop(m)
						break
					}
				}
			}
			continue
		}
		if len(open) > jsonMaxDepth {
			return nil, fmt.Errorf("nested deeper than %d arrays and objects", jsonMaxDepth)
		}
		switch c {
		case '[':
			open = append(open, -1)
		case '{':
			open = append(open, len(members))
		case '"':
			end := jsonStringEnd(js, i)
			if len(open) > 0 && open[len(open)-1] >= 0 && bytes.TrimLeft(js[end+1:], " \t\n\r")[0] == ':' {
				a = jsonName(a, js, int32(i))
				h := uint32(maphash.Bytes(seed, a)) | 1
				// Only the objects down to a keyslot's af, area and kdf
				// are decoded into structs.
				if len(open) <= 4 && foldsToField(a) {
					h = 0
				}
				members = append(members, jsonMember{h, int32(i)})
			}
			i = end
		}
	}
	if gone == nil {
		return js, nil
	}
	out := make([]byte, 0, len(js))
	for i, c := range js {
		if gone[i/64]&(1<<(i%64)) == 0 {
			out = append(out, c)
		}
	}
	return out, nil
}

// jsonStringEnd returns the index of the closing quote of the string
// whose opening quote is js[i], in valid JSON.
func jsonStringEnd(js []byte, i int) int {
	for i++; js[i] != '"'; i++ {
		if js[i] == '\\' {
			i++
		}
	}
	return i
}

// jsonName appends to dst[:0] the member name starting at js[start],
// unescaped.
func jsonName(dst, js []byte, start int32) []byte {
	return jsonUnquote(dst[:0], js[start+1:jsonStringEnd(js, int(start))])
}

// jsonMemberEnd returns where the member whose name starts at js[i] ends:
// at the next member's name, or at the closing brace after the last.
func jsonMemberEnd(js []byte, i int) int {
	depth := 0
	for i = jsonStringEnd(js, i) + 1; ; i++ {
		switch js[i] {
		case '"':
			i = jsonStringEnd(js, i)
		case '[', '{':
			depth++
		case ']':
			depth--
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return len(js) - len(bytes.TrimLeft(js[i+1:], " \t\n\r"))
			}
		}
	}
}

// jsonUnquote appends the text of a valid JSON string (without its
// quotes) to dst, unescaped.
func jsonUnquote(dst, s []byte) []byte {
	hex4 := func(h []byte) (r rune) {
		for _, c := range h {
			switch {
			case c >= 'a':
				c -= 'a' - 10
			case c >= 'A':
				c -= 'A' - 10
			default:
				c -= '0'
			}
			r = r<<4 | rune(c)
		}
		return r
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) && i+6 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if p := utf16.DecodeRune(r, hex4(s[i+3:i+7])); p != utf8.RuneError {
					r, i = p, i+6
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // " \ /
			dst = append(dst, s[i])
		}
	}
	return dst
}

// foldsToField reports whether name is a LUKS2 field name only
// case-insensitively (encoding/json also matches names so; json-c only
// exactly). The field names are lower-case ASCII.
func foldsToField(name []byte) bool {
	if !slices.ContainsFunc(name, func(c byte) bool { return 'A' <= c && c <= 'Z' || c >= utf8.RuneSelf }) {
		return false
	}
	s := string(name)
	for n := range luks2Names {
		if strings.EqualFold(n, s) {
			return true
		}
	}
	return false
}

// luks2Names are the member names cryptimg decodes into its structs.
var luks2Names = func() map[string]bool {
	names := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
				names[name] = true
			}
			if ft := f.Type; ft.Kind() == reflect.Struct {
				walk(ft)
			} else if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
				walk(ft.Elem())
			}
		}
	}
	for _, v := range []any{Keyslot{}, Segment{}, Digest{}, Token{}, Config{}} {
		walk(reflect.TypeOf(v))
	}
	for _, s := range []string{"keyslots", "tokens", "segments", "digests", "config"} {
		names[s] = true
	}
	return names
}()
