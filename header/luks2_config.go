package header

// LUKS2-only changes: label and subsystem, keyslot priorities, tokens, and
// repair (cryptsetup config, token, repair). Each is an Update of both
// copies, as in luks2_update.go.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrTokenExists reports a token number already in use.
var ErrTokenExists = errors.New("token already exists")

// WithLabel sets the label and the subsystem; nil leaves one as it is.
func (h *LUKS2) WithLabel(label, subsystem *string) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	n := h.clone()
	for _, f := range []struct {
		v    *string
		dst  *string
		name string
	}{{label, &n.bin.Label, "label"}, {subsystem, &n.bin.Subsystem, "subsystem"}} {
		if f.v == nil {
			continue
		}
		if len(*f.v) >= l2LabelSize || strings.IndexByte(*f.v, 0) >= 0 {
			return nil, fmt.Errorf("%s %q is longer than %d bytes or holds a NUL", f.name, *f.v, l2LabelSize-1)
		}
		*f.dst = *f.v
	}
	return h.commit(n, nil, nil, nil)
}

// Priorities, as cryptsetup names them.
const (
	PriorityIgnore = 0
	PriorityNormal = 1
	PriorityPrefer = 2
)

// WithPriority sets keyslot slot's priority: PriorityIgnore (tried only
// when named), PriorityNormal or PriorityPrefer (tried first).
func (h *LUKS2) WithPriority(slot, priority int) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	if priority < PriorityIgnore || priority > PriorityPrefer {
		return nil, fmt.Errorf("invalid priority %d", priority)
	}
	k := h.Keyslots[slot]
	if k == nil {
		return nil, fmt.Errorf("key slot %d is not active", slot)
	}
	n := h.clone()
	c := *k
	c.changed = true
	if priority == PriorityNormal {
		c.Priority = nil // cryptsetup writes no priority for normal
	} else {
		c.Priority = &priority
	}
	n.Keyslots[slot] = &c
	return h.commit(n, nil, nil, nil)
}

// TokenJSON returns token id as stored, or false.
func (h *LUKS2) TokenJSON(id int) ([]byte, bool) {
	t := h.Tokens[id]
	if t == nil {
		return nil, false
	}
	return bytes.Clone(t.Raw), true
}

// ImportToken stores the JSON object js as token id (-1: the lowest free
// number), as cryptsetup token import does: it needs a string "type" that
// does not start with the reserved "luks2-" and a "keyslots" array of
// existing keyslots; slot, unless -1, is added to that array.
func (h *LUKS2) ImportToken(id int, js []byte, slot int) (*Update, int, error) {
	return h.putToken(id, js, slot, false)
}

// AddKeyringToken adds a luks2-keyring token for the kernel keyring key
// description (cryptsetup token add --key-description).
func (h *LUKS2) AddKeyringToken(id int, description string, slot int) (*Update, int, error) {
	if description == "" {
		return nil, -1, fmt.Errorf("empty key description")
	}
	js, err := json.Marshal(map[string]any{"type": "luks2-keyring", "keyslots": []string{}, "key_description": description})
	if err != nil {
		return nil, -1, err
	}
	return h.putToken(id, js, slot, true)
}

func (h *LUKS2) putToken(id int, js []byte, slot int, builtin bool) (*Update, int, error) {
	if err := h.writable(); err != nil {
		return nil, -1, err
	}
	n, id, err := h.withToken(id, js, slot, builtin)
	if err != nil {
		return nil, -1, err
	}
	u, err := h.commit(n, nil, nil, nil)
	return u, id, err
}

// withToken is h with the token js stored as id (-1: the lowest free
// number), checked against h's keyslots, and the number it got.
func (h *LUKS2) withToken(id int, js []byte, slot int, builtin bool) (*LUKS2, int, error) {
	if id == -1 {
		id = luks2MaxSlots // none free, unless the loop finds one
		for i := range luks2MaxSlots {
			if h.Tokens[i] == nil {
				id = i
				break
			}
		}
	}
	if id < 0 || id >= luks2MaxSlots {
		return nil, -1, fmt.Errorf("token number %d out of range (0 to %d), or no free token", id, luks2MaxSlots-1)
	}
	if h.Tokens[id] != nil {
		return nil, -1, fmt.Errorf("token %d: %w", id, ErrTokenExists)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(js, &m); err != nil || m == nil {
		return nil, -1, fmt.Errorf("token JSON is not an object")
	}
	// In the metadata the token lies inside the top-level object and the
	// tokens object: refuse here what the header would be refused for
	// (jsonMaxDepth), rather than write a header cryptsetup cannot read.
	if _, err := jsonc(slices.Concat([]byte(`{"tokens":{"0":`), js, []byte("}}"))); err != nil {
		return nil, -1, fmt.Errorf("token JSON is too deeply nested for LUKS2 metadata (with the two objects around it, %v)", err)
	}
	t, err := decodeObject[Token](js)
	if err != nil || t.Type == "" || m["keyslots"] == nil {
		return nil, -1, fmt.Errorf("a token needs a string \"type\" and a \"keyslots\" array")
	}
	if strings.HasPrefix(t.Type, "luks2-") && !builtin {
		return nil, -1, fmt.Errorf("token type %q: the luks2- prefix is reserved for cryptsetup's own tokens", t.Type)
	}
	if slot != -1 {
		if h.Keyslots[slot] == nil {
			return nil, -1, fmt.Errorf("key slot %d is not active", slot)
		}
		if s := strconv.Itoa(slot); !slices.Contains(t.Keyslots, s) {
			t.Keyslots = append(t.Keyslots, s)
		}
	}
	for _, s := range t.Keyslots {
		if h.keyslot(s) == nil {
			return nil, -1, fmt.Errorf("token names keyslot %q, which does not exist", s)
		}
	}
	if m["keyslots"], err = json.Marshal(t.Keyslots); err != nil {
		return nil, -1, err
	}
	if t.Raw, err = json.Marshal(m); err != nil {
		return nil, -1, err
	}
	n := h.clone()
	n.Tokens[id] = t
	return n, id, nil
}

// RemoveToken deletes token id.
func (h *LUKS2) RemoveToken(id int) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	if h.Tokens[id] == nil {
		return nil, fmt.Errorf("token %d does not exist", id)
	}
	n := h.clone()
	delete(n.Tokens, id)
	return h.commit(n, nil, nil, nil)
}

// Repair writes the copy in use over both, when one was damaged or out of
// date (Warning); with both good it returns nil and nothing to do.
func (h *LUKS2) Repair() (*Update, error) {
	if h.Warning == "" {
		return nil, nil
	}
	return h.Rewrite()
}
