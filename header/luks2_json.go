package header

// LUKS2 JSON metadata, validated the way cryptsetup 2.6.1's
// LUKS2_hdr_validate does (lib/luks2/luks2_json_metadata.c), as summarised
// in reference/luks.md §10.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	Type       string          `json:"type"`
	Offset     u64s            `json:"offset"`
	Size       string          `json:"size"` // decimal or "dynamic"
	IVTweak    u64s            `json:"iv_tweak"`
	Encryption string          `json:"encryption"`
	SectorSize int             `json:"sector_size"`
	Integrity  json.RawMessage `json:"integrity,omitempty"`
	Flags      []string        `json:"flags,omitempty"`
	size       uint64          // Size as a number; 0 for dynamic
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
	// of date; cryptimg reads the good one and writes nothing.
	Warning string
	// ReadOnly is set by an unknown mandatory requirement: cryptsetup then
	// refuses every metadata change.
	ReadOnly bool

	extra     map[string]json.RawMessage // top-level members cryptimg does not know
	seg       int                        // the data segment
	digest    int                        // its digest
	reencrypt string                     // the reencryption requirement, if any
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
	dec := json.NewDecoder(bytes.NewReader(b.JSON))
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
	var err error
	if err := json.Unmarshal(top.Config, &h.Config); err != nil {
		return nil, parseErrorf("config", "%v", err)
	}
	h.Config.setRaw(top.Config)
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b.JSON, &all); err != nil {
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
		if d.Type != "pbkdf2" {
			return parseErrorf(where, "unsupported type %q", d.Type)
		}
		hf, err := hashFunc(d.Hash)
		if err != nil {
			return err
		}
		if d.Iterations == 0 || len(d.Salt) != 32 || (len(d.Digest) != 20 && len(d.Digest) != hf().Size()) {
			return parseErrorf(where, "bad iterations, salt or digest length")
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
		if s.Type != "crypt" {
			continue // linear and hw-opal segments pass as long as their common fields do
		}
		if s.Encryption == "" || s.SectorSize < 512 || s.SectorSize > 4096 || s.SectorSize&(s.SectorSize-1) != 0 {
			return parseErrorf(where, "bad encryption %q or sector size %d", s.Encryption, s.SectorSize)
		}
		if s.size%uint64(s.SectorSize) != 0 {
			return parseErrorf(where, "size is not a multiple of the sector size %d", s.SectorSize)
		}
		if h.digestOf("segments", n) < 0 {
			return parseErrorf(where, "not covered by any digest")
		}
		if !slices.Contains(s.Flags, "backup-previous") && !slices.Contains(s.Flags, "backup-final") && h.seg < 0 {
			h.seg = n
		}
	}
	if h.seg < 0 {
		return parseErrorf("segments", "no crypt segment")
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
		if k.KeySize <= 0 || k.KeySize > 512 || k.AF.Type != "luks1" || k.AF.Stripes != Stripes || k.Area.Type != "raw" || k.Area.KeySize <= 0 {
			return parseErrorf(where, "unsupported key size, AF or area")
		}
		if _, err := hashFunc(k.AF.Hash); err != nil {
			return err
		}
		if afSectors(uint64(k.KeySize), Stripes)*SectorSize > uint64(k.Area.Size) {
			return parseErrorf(where, "area of %d bytes is too small for its key material", k.Area.Size)
		}
		switch k.KDF.Type {
		case "pbkdf2":
			if _, err := hashFunc(k.KDF.Hash); err != nil {
				return err
			}
			if k.KDF.Iterations == 0 {
				return parseErrorf(where, "pbkdf2 with 0 iterations")
			}
		case "argon2i", "argon2id":
			if k.KDF.Time == 0 || k.KDF.Memory < 32 || k.KDF.Memory > argon2MaxMemory || k.KDF.CPUs == 0 || k.KDF.CPUs > 255 {
				return parseErrorf(where, "argon2 time %d, memory %d KiB, cpus %d out of range", k.KDF.Time, k.KDF.Memory, k.KDF.CPUs)
			}
		default:
			return parseErrorf(where, "unsupported kdf %q", k.KDF.Type)
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
