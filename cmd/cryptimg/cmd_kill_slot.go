package main

import (
	"errors"
	"fmt"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

func newKillSlotCommand(g *globalOptions) *cobra.Command {
	var o removeOptions
	cmd := &cobra.Command{
		Use:   "kill-slot [flags] IMAGE SLOT",
		Short: "Remove a key slot by number",
		Long: `Remove key slot SLOT (` + slotRange() + `), as "cryptsetup luksKillSlot" does: the slot is
disabled in the header, then its key material is overwritten with random
bytes.

A remaining key must be given (--key-file, or the prompt) and must open
another active slot (or SLOT itself if it is the last one); with
--batch-mode and no --key-file the check is skipped, as in cryptsetup.
The operation asks for confirmation on a terminal unless --batch-mode is
given, and is refused on a non-terminal without --batch-mode. Removing the
last active key slot also needs --allow-last-slot.
` + exitStatusHelp,
		Example: `  cryptimg kill-slot -q -d remaining.key disk.luks 3`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKillSlot(g, o, args[0], args[1])
		},
	}
	o.key.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.allowLast, "allow-last-slot", false, allowLastHelp)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the removed key slot as JSON on stdout")
	return cmd
}

func runKillSlot(g *globalOptions, o removeOptions, path, slotArg string) error {
	var slot int
	if _, err := fmt.Sscan(slotArg, &slot); err != nil || slot < 0 || slot >= header.MaxSlots || fmt.Sprint(slot) != slotArg {
		return usagef("invalid key slot %q (want 0 to %d)", slotArg, header.MaxSlots-1)
	}
	if err := mustConfirm(g, "kill-slot"); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !e.Header.SlotActive(slot) {
		return fmt.Errorf("%s: key slot %d: %w", path, slot, image.ErrSlotInactive)
	}
	last := e.Header.ActiveSlots() == 1
	if last && !o.allowLast {
		return usagef("%s: key slot %d is the last active one: removing it makes the image permanently undecryptable (pass --allow-last-slot to do it anyway)", path, slot)
	}
	if !g.batch || o.key.keyFile != "" {
		key, err := readKey(g, o.key, "Enter any remaining passphrase: ", false)
		if err != nil {
			return err
		}
		err = checkRemaining(e, key, slot, last)
		clear(key)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return killSlot(g, e, path, slot, o, "kill-slot")
}

// checkRemaining checks that key opens an active slot other than slot, or
// slot itself when it is the last one (cryptsetup verify_keyslot).
func checkRemaining(e *image.Encrypted, key []byte, slot int, last bool) error {
	if last {
		_, err := e.TestKey(key, slot)
		return err
	}
	for i := range e.Header.NumSlots() {
		if i == slot || !e.Header.SlotActive(i) {
			continue
		}
		_, err := e.TestKey(key, i)
		if err == nil {
			return nil
		}
		if !errors.Is(err, header.ErrNoMatchingKeyslot) {
			return err
		}
	}
	return header.ErrNoMatchingKeyslot
}
