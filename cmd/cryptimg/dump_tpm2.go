package main

// What luksDump prints of a systemd-tpm2 token: cryptsetup hands the token
// to systemd's token plugin, whose dump Debian 12's (systemd 252)
// cryptsetup-token-systemd-tpm2.so writes as below
// (src/cryptsetup/cryptsetup-tokens/cryptsetup-token-systemd-tpm2.c
// cryptsetup_token_dump, cryptsetup-token-util.c
// crypt_dump_buffer_to_hex_string, src/shared/tpm2-util.c
// pcr_mask_to_string). Newer plugins print more fields.

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// writeDumpTPM2 writes the plugin's lines for a systemd-tpm2 token; nothing
// when the plugin could not parse it (it logs only at debug level).
func writeDumpTPM2(w io.Writer, raw []byte) {
	var t struct {
		PCRs       *[]int  `json:"tpm2-pcrs"`
		Bank       *string `json:"tpm2-pcr-bank"`
		PrimaryAlg *string `json:"tpm2-primary-alg"`
		Blob       *string `json:"tpm2-blob"`
		PolicyHash *string `json:"tpm2-policy-hash"`
		PIN        bool    `json:"tpm2-pin"`
		PubkeyPCRs []int   `json:"tpm2_pubkey_pcrs"`
		Pubkey     []byte  `json:"tpm2_pubkey"`
	}
	if json.Unmarshal(raw, &t) != nil || t.PCRs == nil || t.Blob == nil || t.PolicyHash == nil {
		return
	}
	blob, err1 := base64.StdEncoding.DecodeString(*t.Blob)
	policy, err2 := hex.DecodeString(*t.PolicyHash)
	if err1 != nil || err2 != nil {
		return
	}
	// A missing bank means "pick at unlock": no name; a missing primary
	// algorithm means ECC (tpm2_parse_luks2_json).
	bank, alg := "n/a", "ecc"
	if t.Bank != nil {
		bank = *t.Bank
	}
	if t.PrimaryAlg != nil {
		alg = *t.PrimaryAlg
	}
	const sep = "\n\t            "
	fmt.Fprintf(w, "\ttpm2-hash-pcrs:   %s\n", pcrList(*t.PCRs))
	fmt.Fprintf(w, "\ttpm2-pcr-bank:    %s\n", bank)
	fmt.Fprintf(w, "\ttpm2-pubkey:"+sep+"%s\n", pluginHex(t.Pubkey, sep))
	fmt.Fprintf(w, "\ttpm2-pubkey-pcrs: %s\n", pcrList(t.PubkeyPCRs))
	fmt.Fprintf(w, "\ttpm2-primary-alg: %s\n", alg)
	fmt.Fprintf(w, "\ttpm2-blob:        %s\n", pluginHex(blob, sep))
	fmt.Fprintf(w, "\ttpm2-policy-hash:"+sep+"%s\n", pluginHex(policy, sep))
	fmt.Fprintf(w, "\ttpm2-pin:         %t\n", t.PIN)
}

// pcrList joins the PCRs in ascending order with "+", "n/a" for none.
func pcrList(pcrs []int) string {
	var mask uint32
	for _, p := range pcrs {
		if p >= 0 && p < 24 {
			mask |= 1 << p
		}
	}
	var s []string
	for i := range 24 {
		if mask&(1<<i) != 0 {
			s = append(s, fmt.Sprint(i))
		}
	}
	if s == nil {
		return "n/a"
	}
	return strings.Join(s, "+")
}

// pluginHex is hex bytes joined by spaces, sep after every 16th; an empty
// buffer prints as the C library prints a NULL string.
func pluginHex(b []byte, sep string) string {
	if len(b) == 0 {
		return "(null)"
	}
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			if i%16 == 0 {
				s.WriteString(sep)
			} else {
				s.WriteByte(' ')
			}
		}
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}
