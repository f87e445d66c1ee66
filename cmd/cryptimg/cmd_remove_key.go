package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newRemoveKeyCommand(g *globalOptions) *cobra.Command {
	var o removeOptions
	cmd := &cobra.Command{
		Use:   "remove-key [flags] IMAGE",
		Short: "Remove the key slot a passphrase opens",
		Long: `Remove the key slot that the given key opens, as "cryptsetup luksRemoveKey"
does: the slot is disabled in the header, then its key material is
overwritten with random bytes.

The operation asks for confirmation on a terminal unless --batch-mode is
given, and is refused on a non-terminal without --batch-mode. Removing the
last active key slot also needs --allow-last-slot.
` + exitStatusHelp,
		Example: `  cryptimg remove-key -q -d old.key disk.luks`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRemoveKey(g, o, args[0])
		},
	}
	o.key.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.allowLast, "allow-last-slot", false, allowLastHelp)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the removed key slot as JSON on stdout")
	return cmd
}

func runRemoveKey(g *globalOptions, o removeOptions, path string) error {
	if err := mustConfirm(g, "remove-key"); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := readKey(g, o.key, "Enter passphrase to be deleted: ", false)
	if err != nil {
		return err
	}
	slot, err := e.TestKey(key, -1)
	clear(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return killSlot(g, e, path, slot, o, "remove-key")
}
