package main

// enroll --tpm2-device-key: a systemd-tpm2 token sealed offline to a target
// TPM's storage root key (header/token/tpm2), with systemd-cryptenroll's
// flag names.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header/token/tpm2"
	"github.com/spf13/pflag"
)

type tpm2EnrollOptions struct {
	deviceKey     string
	pcrs          string
	sealHandle    string
	withPIN       bool
	pinFile       string
	publicKey     string
	publicKeyPCRs string
}

const tpm2EnrollHelp = `
  --tpm2-device-key FILE [--tpm2-pcrs LIST] [--tpm2-with-pin]
      seal a new random secret offline to a TPM's storage root key and add a
      key slot opened by its base64 (systemd's minimal KDF) with the
      systemd-tpm2 token that holds it, as systemd-cryptenroll
      --tpm2-device-key= does; no TPM is contacted. FILE is the key's public
      area as a marshalled TPM2B_PUBLIC (systemd-analyze srk >FILE, or
      tpm2_readpublic -c 0x81000001 -o FILE on the target), or a PEM public
      key of an SRK made from systemd's template (ECC P-256 or RSA-2048;
      /var/lib/systemd/tpm2-srk-public-key.pem). The key is the persistent
      one at 0x81000001 unless --tpm2-seal-key-handle says otherwise.
      --tpm2-pcrs binds the secret to literal PCR values, INDEX:BANK=HEX
      joined by +, all in one bank (7:sha256=HEX+11:sha256=HEX; indexes may
      be systemd's PCR names); without it no PCR policy. --tpm2-with-pin
      also requires a PIN (read from --tpm2-pin-file, or asked twice on the
      terminal; salted as systemd 253 and later do). --tpm2-public-key PEM
      with --tpm2-public-key-pcrs LIST (default 11) makes a signed PCR
      policy. Only systemd 255 and later can unseal such a token (earlier
      versions have no import step at unlock): for older targets enroll a
      recovery key instead.
`

func (o *tpm2EnrollOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.deviceKey, "tpm2-device-key", "", "seal to this TPM's storage root key offline: FILE holds its TPM2B_PUBLIC (or PEM); needs systemd >= 255 on the target")
	f.StringVar(&o.pcrs, "tpm2-pcrs", "", "bind to these literal PCR values: INDEX:BANK=HEX joined by + (e.g. 7:sha256=HEX+11:sha256=HEX)")
	f.StringVar(&o.sealHandle, "tpm2-seal-key-handle", "", "persistent handle of the key on the target, in hex (default 0x81000001, the SRK)")
	f.BoolVar(&o.withPIN, "tpm2-with-pin", false, "also require a PIN to unseal (asked on the terminal, or --tpm2-pin-file)")
	f.StringVar(&o.pinFile, "tpm2-pin-file", "", "read the --tpm2-with-pin PIN from FILE (- for stdin), as raw bytes")
	f.StringVar(&o.publicKey, "tpm2-public-key", "", "PEM public key of a signed PCR policy")
	f.StringVar(&o.publicKeyPCRs, "tpm2-public-key-pcrs", "", "PCRs the signed policy covers, joined by + (default 11)")
}

// params reads the files and flags into what tpm2.Seal takes. The caller
// clears the PIN (secmem.Free).
func (o *tpm2EnrollOptions) params(g *globalOptions) (*tpm2.Params, error) {
	raw, err := os.ReadFile(o.deviceKey)
	if err != nil {
		return nil, err
	}
	p := &tpm2.Params{}
	if p.Parent, err = tpm2.ParseParent(raw); err != nil {
		return nil, fmt.Errorf("--tpm2-device-key %s: %w", o.deviceKey, err)
	}
	if p.PCRs, err = tpm2.ParsePCRs(o.pcrs); err != nil {
		return nil, usagef("--tpm2-pcrs: %v", err)
	}
	if o.sealHandle != "" {
		h, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(o.sealHandle), "0x"), 16, 32)
		if err != nil {
			return nil, usagef("--tpm2-seal-key-handle: %q is not a hex handle", o.sealHandle)
		}
		p.Handle = uint32(h)
	}
	if o.publicKey != "" {
		if p.PublicKey, err = os.ReadFile(o.publicKey); err != nil {
			return nil, err
		}
		s := o.publicKeyPCRs
		if s == "" {
			s = "11" // systemd-cryptenroll's default: kernel-boot
		}
		if p.PublicKeyPCRs, err = tpm2.ParsePCRIndexes(s); err != nil {
			return nil, usagef("--tpm2-public-key-pcrs: %v", err)
		}
	} else if o.publicKeyPCRs != "" {
		return nil, usagef("--tpm2-public-key-pcrs needs --tpm2-public-key")
	}
	if o.pinFile != "" && !o.withPIN {
		return nil, usagef("--tpm2-pin-file needs --tpm2-with-pin")
	}
	if o.withPIN {
		pin, err := readKey(g, keyOptions{keyFile: o.pinFile}, "Enter TPM2 PIN: ", true)
		if err != nil {
			return nil, err
		}
		// The PIN is typed at boot and used up to its first NUL (strlen in
		// systemd): refuse what cannot be typed the same way.
		if bytes.ContainsAny(pin, "\x00\n") {
			secmem.Free(pin)
			return nil, usagef("the TPM2 PIN must not contain a newline or NUL byte")
		}
		p.PIN = pin
	}
	return p, nil
}
