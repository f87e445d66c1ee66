package token

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"strconv"
)

// RecoveryType is the LUKS2 token type of a recovery key.
const RecoveryType = "systemd-recovery"

// A recovery key is 32 random bytes written in modhex, two characters a
// byte (high nibble first), with a dash after every 8 characters: 8
// groups, 71 characters (systemd src/shared/recovery-key.c
// make_recovery_key). The keyslot's passphrase is exactly that text:
// systemd and cryptsetup do not normalise case or dashes when unlocking.
const (
	RecoveryKeyBytes = 32
	RecoveryKeyLen   = 2*RecoveryKeyBytes + RecoveryKeyBytes/4 - 1
)

// modhex is the Yubico alphabet for the nibbles 0 to 15 (systemd
// modhex_alphabet).
const modhex = "cbdefghijklnrtuv"

// Recovery keyslots use the minimal KDF: the key has 256 bits of entropy,
// so no stretching is needed (systemd src/shared/cryptsetup-util.c
// cryptsetup_set_minimal_pbkdf: pbkdf2, sha512, 1000 iterations, no
// benchmark).
const (
	RecoveryPBKDF      = "pbkdf2"
	RecoveryHash       = "sha512"
	RecoveryIterations = 1000
)

// NewRecoveryKey returns a new recovery key, from rnd (nil: crypto/rand).
// The caller clears it after use.
func NewRecoveryKey(rnd io.Reader) ([]byte, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	var raw [RecoveryKeyBytes]byte
	defer clear(raw[:])
	if _, err := io.ReadFull(rnd, raw[:]); err != nil {
		return nil, err
	}
	return FormatRecoveryKey(raw[:]), nil
}

// FormatRecoveryKey writes 32 bytes as a recovery key.
func FormatRecoveryKey(raw []byte) []byte {
	if len(raw) != RecoveryKeyBytes {
		panic("token: recovery key of the wrong size")
	}
	out := make([]byte, 0, RecoveryKeyLen)
	for i, b := range raw {
		if i > 0 && i%4 == 0 {
			out = append(out, '-')
		}
		out = append(out, modhex[b>>4], modhex[b&15])
	}
	return out
}

// ErrRecoveryKey reports text that is not a recovery key.
var ErrRecoveryKey = errors.New("not a recovery key: want 8 groups of 8 modhex characters (cbdefghijklnrtuv) joined by dashes")

// DecodeRecoveryKey returns the 32 bytes of a recovery key in the exact
// form NewRecoveryKey writes (lower case, dashes); other forms would not
// open the keyslot.
func DecodeRecoveryKey(key []byte) ([]byte, error) {
	if len(key) != RecoveryKeyLen {
		return nil, ErrRecoveryKey
	}
	raw := make([]byte, 0, RecoveryKeyBytes)
	for i := 0; i < len(key); {
		if i%9 == 8 {
			if key[i] != '-' {
				return nil, ErrRecoveryKey
			}
			i++
			continue
		}
		hi, lo := nibble(key[i]), nibble(key[i+1])
		if hi < 0 || lo < 0 {
			clear(raw)
			return nil, ErrRecoveryKey
		}
		raw = append(raw, byte(hi<<4|lo))
		i += 2
	}
	return raw, nil
}

func nibble(c byte) int {
	for i := range len(modhex) {
		if modhex[i] == c {
			return i
		}
	}
	return -1
}

// RecoveryJSON is the token of a recovery key in keyslot slot:
// {"type":"systemd-recovery","keyslots":["N"]}, nothing else (systemd
// enroll_recovery).
func RecoveryJSON(slot int) []byte {
	js, err := json.Marshal(struct {
		Type     string   `json:"type"`
		Keyslots []string `json:"keyslots"`
	}{RecoveryType, []string{strconv.Itoa(slot)}})
	if err != nil {
		panic(err)
	}
	return js
}
