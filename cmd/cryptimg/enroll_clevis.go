package main

import (
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/header/token/clevis"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/pflag"
)

// clevisFlags are enroll's clevis flags. They are cryptimg's own:
// systemd-cryptenroll enrolls no clevis tokens, and clevis luks bind takes
// a pin name and its config, which --clevis-config follows (the pin told
// by the config: "pins" is sss, else tang).
type clevisFlags struct {
	advFile, url, config string
}

func (c *clevisFlags) addFlags(f *pflag.FlagSet) {
	f.StringVar(&c.advFile, "tang-adv", "", "enroll a clevis tang binding from this saved advertisement of the server (curl -f URL/adv > FILE), with --tang-url")
	f.StringVar(&c.url, "tang-url", "", "the URL of the tang server of --tang-adv, which unlocking asks")
	f.StringVar(&c.config, "clevis-config", "", `enroll a clevis binding from clevis's pin config: tang {"url":URL,"adv":FILE}, or sss {"t":N,"pins":{"tang":[{...},{...}]}}`)
}

// pin is the clevis pin the flags describe, nil without them.
func (c clevisFlags) pin() (clevis.Pin, error) {
	switch {
	case c.config != "" && (c.advFile != "" || c.url != ""):
		return nil, usagef("--clevis-config does not go with --tang-adv and --tang-url (give the tang config in it)")
	case c.config != "":
		p, err := clevis.ParseConfig([]byte(c.config), os.ReadFile)
		if err != nil {
			return nil, fmt.Errorf("--clevis-config: %w", err)
		}
		return p, nil
	case c.advFile == "" && c.url == "":
		return nil, nil
	case c.advFile == "" || c.url == "":
		return nil, usagef("--tang-adv and --tang-url go together")
	}
	adv, err := os.ReadFile(c.advFile)
	if err != nil {
		return nil, fmt.Errorf("--tang-adv: %w", err)
	}
	return clevis.NewTang(c.url, adv, "")
}

// enrollClevis unlocks e and binds it to pin (image.EnrollClevis).
func enrollClevis(g *globalOptions, e *image.Encrypted, o enrollOptions, pin clevis.Pin, path string) (*image.Clevis, error) {
	k, err := unlockImage(g, e, o.key, path, passPrompt(path), o.keySlot)
	if err != nil {
		return nil, err
	}
	defer k.Clear()
	c, err := e.EnrollClevis(k, pin, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
