package token

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
)

// recoveryRE is a recovery key: 8 groups of 8 modhex characters joined by
// dashes.
var recoveryRE = regexp.MustCompile(`^[cbdefghijklnrtuv]{8}(-[cbdefghijklnrtuv]{8}){7}$`)

// TestRecoveryKeyFormat: new keys have systemd's form and decode to 32
// bytes that format back to them; a fixed input gives the nibble mapping
// of systemd's alphabet; a key systemd-cryptenroll 252 printed decodes and
// formats back unchanged; other spellings are refused.
func TestRecoveryKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		k, err := NewRecoveryKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(k) != RecoveryKeyLen || !recoveryRE.Match(k) {
			t.Fatalf("recovery key %q has the wrong form", k)
		}
		raw, err := DecodeRecoveryKey(k)
		if err != nil || len(raw) != 32 {
			t.Fatalf("decode %q: %d bytes, %v", k, len(raw), err)
		}
		if !bytes.Equal(FormatRecoveryKey(raw), k) {
			t.Fatalf("%q does not format back", k)
		}
		seen[string(k)] = true
	}
	if len(seen) != 20 {
		t.Fatal("recovery keys repeat")
	}
	var raw [32]byte
	for i := range raw {
		raw[i] = byte(i * 0x11 / 2) // 0x00, 0x08, 0x11, 0x19, ...
	}
	raw[0], raw[1], raw[2], raw[3] = 0x01, 0x23, 0x45, 0x67
	raw[4], raw[5], raw[6], raw[7] = 0x89, 0xab, 0xcd, 0xef
	got := string(FormatRecoveryKey(raw[:]))
	if want := "cbdefghi-jklnrtuv-"; got[:18] != want {
		t.Errorf("0123456789abcdef formats as %q, want %q...", got[:18], want)
	}
	// Printed by systemd-cryptenroll 252 --recovery-key.
	sd := []byte("jblllfkh-inrjvkji-hgiggevu-iveltvrh-hgjnurgi-ukkcjije-evbcufcb-fffebbjb")
	r, err := DecodeRecoveryKey(sd)
	if err != nil || !bytes.Equal(FormatRecoveryKey(r), sd) {
		t.Errorf("systemd's key %q: %v", sd, err)
	}
	if r[0] != 0x81 || r[31] != 0x81 || r[28] != 0x44 || r[29] != 0x43 {
		t.Errorf("systemd's key decodes to % x", r)
	}
	for _, bad := range []string{
		"JBLLLFKH-inrjvkji-hgiggevu-iveltvrh-hgjnurgi-ukkcjije-evbcufcb-fffebbjb",
		"jblllfkhinrjvkjihgiggevuiveltvrhhgjnurgiukkcjijeevbcufcbfffebbjb",
		"jblllfkh-inrjvkji-hgiggevu-iveltvrh-hgjnurgi-ukkcjije-evbcufcb-fffebbja",
		"jblllfkh-inrjvkji-hgiggevu-iveltvrh_hgjnurgi-ukkcjije-evbcufcb-fffebbjb",
	} {
		if _, err := DecodeRecoveryKey([]byte(bad)); err == nil {
			t.Errorf("%q decodes", bad)
		}
	}
}

// TestRecoveryJSON: the token is exactly systemd's two fields.
func TestRecoveryJSON(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(RecoveryJSON(7), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["type"] != "systemd-recovery" || len(m["keyslots"].([]any)) != 1 || m["keyslots"].([]any)[0] != "7" {
		t.Errorf("token %v", m)
	}
}
