package main

import (
	"fmt"

	"github.com/cryptimg/cryptimg/image"
)

type removeOptions struct {
	key       keyOptions
	allowLast bool
	json      bool
}

const allowLastHelp = "allow removing the last active key slot, which makes the image permanently undecryptable"

// killSlot checks the last-slot rule, confirms, removes the slot and
// reports it as command op.
func killSlot(g *globalOptions, e *image.Encrypted, path string, slot int, o removeOptions, op string) error {
	allowLast := o.allowLast
	warning := fmt.Sprintf("This removes key slot %d of %s.", slot, path)
	if e.Header.ActiveSlots() == 1 {
		if !allowLast {
			return usagef("%s: key slot %d is the last active one: removing it makes the image permanently undecryptable (pass --allow-last-slot to do it anyway)", path, slot)
		}
		warning += "\nThis is the last key slot: the image becomes permanently undecryptable."
	}
	if err := confirm(g, warning); err != nil {
		return err
	}
	if err := e.KillSlot(slot, image.RemoveOptions{AllowLast: allowLast}); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return reportSlot(g, o.json, slotJSON{MessageType: op, Image: path, KeySlot: slot}, "key slot %d removed", slot)
}
