package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

type testKeyOptions struct {
	key     keyOptions
	keySlot int
	json    bool
}

func newTestKeyCommand(g *globalOptions) *cobra.Command {
	var o testKeyOptions
	cmd := &cobra.Command{
		Use:   "test-key [flags] IMAGE",
		Short: "Check a passphrase or key file without decrypting anything",
		Long: `Check that a key opens a key slot of the image, as "cryptsetup open
--test-passphrase" does. Nothing is decrypted or written. Exits 0 if the key
matches, 2 if it does not, 1 if no active slot could be tried.
` + exitStatusHelp,
		Example: `  cryptimg test-key -d key.bin disk.luks && echo ok`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTestKey(g, o, args[0])
		},
	}
	o.key.addFlags(cmd.Flags())
	o.key.tokens = addTokenFlags(cmd.Flags())
	cmd.Flags().IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot ("+slotRange()+")")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the key slot the key opens as JSON on stdout")
	return cmd
}

func runTestKey(g *globalOptions, o testKeyOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	f, e, err := openImage(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := readKeyFor(g, e, o.key, path, passPrompt(path), o.keySlot)
	if err != nil {
		return err
	}
	slot, err := e.TestKey(key, o.keySlot)
	clear(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return reportSlot(g, o.json, slotJSON{MessageType: "test-key", Image: path, KeySlot: slot}, "key slot %d unlocked", slot)
}
