// Package clevis makes clevis's LUKS2 tokens offline (the tang pin's JWE
// from a saved advertisement, and sss's Shamir shares of other pins) and
// unseals them at unlock as clevis does (the McCallum-Relyea exchange with
// a tang server), after latchset/clevis src/luks/ and src/pins/.
//
// The formats, and the clevis source files they come from:
//   - token and keyslot: src/luks/clevis-luks-common-functions.in
//     (clevis_luks2_save_slot, clevis_luks_add_key, clevis_luks_get_hash,
//     clevis_luks_generate_key) and src/luks/clevis-luks-bind;
//   - tang pin: src/pins/tang/clevis-encrypt-tang, clevis-decrypt-tang;
//   - sss pin: src/pins/sss/sss.c, clevis-encrypt-sss.c,
//     clevis-decrypt-sss.c.
package clevis

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Type is the LUKS2 token type clevis writes.
const Type = "clevis"

// A clevis keyslot has pbkdf2 with 1000 iterations: the passphrase has 320
// bits of entropy (clevis_luks_add_key: --pbkdf pbkdf2
// --pbkdf-force-iterations 1000). Its hash is that of the image's first
// pbkdf2 keyslot, as clevis_luks_get_hash reads it from luksDump (the
// caller picks it; cryptsetup's default, sha256, without one).
const (
	PBKDF       = "pbkdf2"
	Iterations  = 1000
	DefaultHash = "sha256"
)

// passphraseBytes is JOSE_PASSWORD_LENGTH in
// clevis-luks-common-functions.in: clevis_luks_generate_key takes the "k"
// of `jose jwk gen {"kty":"oct","bytes":40}`, base64url without padding.
const passphraseBytes = 40

// NewPassphrase returns a keyslot passphrase as clevis luks bind makes
// one: 40 random bytes (rnd; nil: crypto/rand) in base64url without
// padding, 54 characters. (clevis 19, as in Debian 12, used pwmake
// instead; both are plain ASCII and the token carries the passphrase
// itself, so either opens the same way.) The caller clears it.
func NewPassphrase(rnd io.Reader) ([]byte, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var raw [passphraseBytes]byte
	defer clear(raw[:])
	if _, err := io.ReadFull(rnd, raw[:]); err != nil {
		return nil, err
	}
	out := make([]byte, base64.RawURLEncoding.EncodedLen(len(raw)))
	base64.RawURLEncoding.Encode(out, raw[:])
	return out, nil
}

// A Pin encrypts a secret as one of clevis's pins does, offline.
type Pin interface {
	// Name is the pin's name in clevis ("tang", "sss").
	Name() string
	// Encrypt returns the compact JWE clevis encrypt PIN would write.
	Encrypt(plaintext []byte, rnd io.Reader) (string, error)
}

// ErrConfig reports a pin configuration cryptimg cannot use.
var ErrConfig = errors.New("clevis configuration")

// ParseConfig reads clevis's pin configuration: a tang pin's
// {"url":...,"adv":...} or an sss pin's {"t":N,"pins":{"tang":[...],
// "sss":...}} (the pin is told by the "pins" member). A tang advertisement
// ("adv") is needed, either the JWS object or the name of a file holding
// it (readFile reads it): cryptimg enrolls offline and fetches nothing.
// Other pins (tpm2, ...) are refused.
func ParseConfig(cfg []byte, readFile func(string) ([]byte, error)) (Pin, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(cfg, &probe); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrConfig, err)
	}
	if _, ok := probe["pins"]; ok {
		return parsePin("sss", cfg, readFile)
	}
	return parsePin("tang", cfg, readFile)
}

func parsePin(name string, cfg []byte, readFile func(string) ([]byte, error)) (Pin, error) {
	switch name {
	case "tang":
		var c struct {
			URL string          `json:"url"`
			Thp string          `json:"thp"`
			Adv json.RawMessage `json:"adv"`
		}
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("%w: tang: %v", ErrConfig, err)
		}
		if c.URL == "" {
			return nil, fmt.Errorf("%w: tang: no \"url\"", ErrConfig)
		}
		var adv []byte
		var file string
		switch {
		case len(c.Adv) == 0:
			return nil, fmt.Errorf("%w: tang %s: no \"adv\": give the saved advertisement (curl URL/adv), as a file name or the JWS object; cryptimg fetches nothing", ErrConfig, c.URL)
		case json.Unmarshal(c.Adv, &file) == nil:
			b, err := readFile(file)
			if err != nil {
				return nil, fmt.Errorf("%w: tang %s: advertisement: %v", ErrConfig, c.URL, err)
			}
			adv = b
		default:
			adv = c.Adv
		}
		return NewTang(c.URL, adv, c.Thp)
	case "sss":
		var c struct {
			T    *int                       `json:"t"`
			Pins map[string]json.RawMessage `json:"pins"`
		}
		if err := json.Unmarshal(cfg, &c); err != nil {
			return nil, fmt.Errorf("%w: sss: %v", ErrConfig, err)
		}
		t := 1 // clevis-encrypt-sss.c main: "t" is optional, 1 by default
		if c.T != nil {
			t = *c.T
		}
		// Children in the order of the config's members, as jansson's
		// json_object_foreach walks them (insertion order).
		var pins []Pin
		for _, name := range memberOrder(cfg, "pins") {
			if name != "tang" && name != "sss" {
				return nil, fmt.Errorf("%w: sss: pin %q is not supported (cryptimg makes tang and sss pins only)", ErrConfig, name)
			}
			raw := c.Pins[name]
			var list []json.RawMessage
			if err := json.Unmarshal(raw, &list); err != nil {
				list = []json.RawMessage{raw}
			}
			for _, child := range list {
				p, err := parsePin(name, child, readFile)
				if err != nil {
					return nil, err
				}
				pins = append(pins, p)
			}
		}
		return NewSSS(t, pins)
	}
	return nil, fmt.Errorf("%w: pin %q is not supported", ErrConfig, name)
}

// memberOrder lists the member names of the object at key of js, in the
// order they are written (encoding/json maps lose it).
func memberOrder(js []byte, key string) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(js, &top) != nil {
		return nil
	}
	d := json.NewDecoder(strings.NewReader(string(top[key])))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var names []string
	seen := map[string]bool{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return names
		}
		name, _ := t.(string)
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return names
		}
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// flatJWE is a JWE in the flattened JSON form `jose jwe fmt` writes and
// clevis stores in the token (clevis_luks2_save_slot): the members sorted,
// encrypted_key present and empty for the direct algorithms.
type flatJWE struct {
	Ciphertext   string `json:"ciphertext"`
	EncryptedKey string `json:"encrypted_key"`
	IV           string `json:"iv"`
	Protected    string `json:"protected"`
	Tag          string `json:"tag"`
}

func (f flatJWE) compact() string {
	return strings.Join([]string{f.Protected, f.EncryptedKey, f.IV, f.Ciphertext, f.Tag}, ".")
}

func parseCompact(s string) (flatJWE, error) {
	p := strings.Split(s, ".")
	if len(p) != 5 {
		return flatJWE{}, errors.New("not a compact JWE")
	}
	return flatJWE{Protected: p[0], EncryptedKey: p[1], IV: p[2], Ciphertext: p[3], Tag: p[4]}, nil
}

// tokenJSON is the clevis token.
type tokenJSON struct {
	Type     string          `json:"type"`
	Keyslots []string        `json:"keyslots"`
	JWE      json.RawMessage `json:"jwe"`
}

// TokenJSON is the LUKS2 token clevis luks bind stores for a JWE (compact)
// that unlocks keyslot slot: {"type":"clevis","keyslots":["N"],"jwe":{...}}
// with the JWE in flattened JSON (clevis_luks2_save_slot).
func TokenJSON(slot int, compact string) ([]byte, error) {
	f, err := parseCompact(compact)
	if err != nil {
		return nil, err
	}
	jwe, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return json.Marshal(tokenJSON{Type: Type, Keyslots: []string{strconv.Itoa(slot)}, JWE: jwe})
}

// tokenCompact returns the compact JWE of a clevis token's JSON; the jwe
// member is flattened JSON (as clevis writes it) or a compact string.
func tokenCompact(js []byte) (string, error) {
	var t tokenJSON
	if err := json.Unmarshal(js, &t); err != nil {
		return "", fmt.Errorf("clevis token: %v", err)
	}
	if t.Type != Type {
		return "", fmt.Errorf("token type %q is not %q", t.Type, Type)
	}
	var s string
	if json.Unmarshal(t.JWE, &s) == nil {
		return s, nil
	}
	var f flatJWE
	if err := json.Unmarshal(t.JWE, &f); err != nil || f.Protected == "" {
		return "", errors.New("clevis token: no JWE")
	}
	return f.compact(), nil
}

// protectedHeader decodes the protected header of a compact JWE.
func protectedHeader(compact string, v any) error {
	p, _, _ := strings.Cut(compact, ".")
	b, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return fmt.Errorf("JWE protected header: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("JWE protected header: %v", err)
	}
	return nil
}
