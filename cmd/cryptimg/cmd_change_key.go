package main

import (
	"fmt"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type changeKeyOptions struct {
	key, newKey keyOptions
	keySlot     int
	pbkdf       pbkdfOptions
	json        bool
}

func newChangeKeyCommand(g *globalOptions) *cobra.Command {
	var o changeKeyOptions
	cmd := &cobra.Command{
		Use:   "change-key [flags] IMAGE [NEW_KEY_FILE]",
		Short: "Replace a passphrase or key file",
		Long: `Replace a key, as "cryptsetup luksChangeKey" does for LUKS1: the new key goes
into the first free key slot, the image is reopened and unlocked with it,
and only then is the old slot disabled and its key material overwritten
with random bytes. A crash at any moment leaves the old key working until
the new one is durable. --key-slot restricts which slot the old key is
tried against.

If all eight slots are in use, the old slot is overwritten in place, as
cryptsetup does; a crash in the middle of that loses the key, so it asks
for confirmation on a terminal, and is refused on a non-terminal unless
--batch-mode is given.
` + exitStatusHelp,
		Example: `  cryptimg change-key -d old.key --new-key-file new.key disk.luks`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newKeyArg(&o.newKey, args); err != nil {
				return err
			}
			return runChangeKey(g, o, args[0])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	addNewKeyFlags(f, &o.newKey)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try the old key only against this slot ("+slotRange()+")")
	f.BoolVar(&o.json, "json", false, "print the old and the new key slot as JSON on stdout")
	o.pbkdf.addFlags(f)
	return cmd
}

func runChangeKey(g *globalOptions, o changeKeyOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	so, err := o.pbkdf.slotOptions(-1)
	if err != nil {
		return err
	}
	if err := checkKeySources(o.key, o.newKey); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	inPlace := e.Header.FirstFreeSlot() < 0
	if inPlace {
		if err := mustConfirm(g, "change-key with all key slots in use (an in-place overwrite)"); err != nil {
			return err
		}
	}
	k, err := unlockImage(g, e, o.key, path, "Enter passphrase to be changed: ", o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	if inPlace {
		if err := confirm(g, fmt.Sprintf("All key slots of %s are in use, so key slot %d is overwritten in place.\nIf the process dies in the middle, that key is lost.", path, k.Slot)); err != nil {
			return err
		}
	}
	newKey, err := readKey(g, o.newKey, "Enter new passphrase: ", !g.batch)
	if err != nil {
		return err
	}
	defer clear(newKey)
	to, err := e.ChangeKey(k, newKey, image.ChangeOptions{SlotOptions: so, InPlace: inPlace})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	from := k.Slot
	s := slotJSON{MessageType: "change-key", Image: path, KeySlot: to, OldKeySlot: &from}
	if to == from {
		return reportSlot(g, o.json, s, "key slot %d changed", to)
	}
	return reportSlot(g, o.json, s, "key slot %d changed: the new key is in key slot %d", from, to)
}
