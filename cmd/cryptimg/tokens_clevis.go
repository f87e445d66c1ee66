package main

import (
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/header/token/clevis"
	"github.com/spf13/pflag"
)

// Tokens of clevis (tang and sss pins) unseal by asking their tang servers;
// they need no flags.
func init() {
	unsealerTypes[clevis.Type] = func(*pflag.FlagSet) func() (token.Unsealer, error) {
		return func() (token.Unsealer, error) { return clevis.Unsealer{}, nil }
	}
}
