package main

import (
	"os"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/header/token/tpm2"
	"github.com/spf13/pflag"
)

// systemd-tpm2 tokens unseal through the TPM --tpm2-device names, as
// systemd-cryptsetup's tpm2-device= option: none by default, so that a
// build machine's own TPM is never asked unless the command says so.
func init() {
	unsealerTypes[tpm2.Type] = func(f *pflag.FlagSet) func() (token.Unsealer, error) {
		var device, pinFile string
		f.StringVar(&device, "tpm2-device", "", "unseal systemd-tpm2 tokens with this TPM: a device (/dev/tpmrm0, or auto), swtpm:host=H,port=P or swtpm:path=SOCK")
		f.StringVar(&pinFile, "tpm2-pin-file", "", "read the PIN of a systemd-tpm2 token that needs one from FILE (default: asked on the terminal)")
		return func() (token.Unsealer, error) {
			if pinFile != "" && device == "" {
				return nil, usagef("--tpm2-pin-file needs --tpm2-device")
			}
			if device == "auto" {
				device = "/dev/tpmrm0"
			}
			return &tpm2.Unsealer{Device: device, PIN: func() ([]byte, error) { return tpm2PIN(pinFile) }}, nil
		}
	}
}

// tpm2PIN reads a token's PIN from file, as raw bytes as enroll's
// --tpm2-pin-file takes it, or with none from the terminal.
func tpm2PIN(file string) ([]byte, error) {
	if file == "" {
		tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
		if err != nil {
			return nil, usagef("the TPM2 token needs a PIN: give --tpm2-pin-file, or run on a terminal")
		}
		defer tty.Close()
		return promptOnce(tty, "Enter TPM2 PIN: ")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	return secmem.Clone(b), nil
}
