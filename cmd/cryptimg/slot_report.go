package main

import "encoding/json"

// slotJSON is the --json output of the key commands: the image and the key
// slot that add-key created, remove-key or kill-slot removed, test-key
// unlocked, or change-key put the new key in.
type slotJSON struct {
	MessageType string `json:"message_type"` // the command's name
	Image       string `json:"image"`
	KeySlot     int    `json:"key_slot"`
	// OldKeySlot, change-key only: the slot the old key was in (equal to
	// KeySlot when it was overwritten in place).
	OldKeySlot *int `json:"old_key_slot,omitempty"`
}

// reportSlot prints the outcome of a key command: s as JSON on stdout with
// --json, else the status line for people on stderr (unless --quiet).
func reportSlot(g *globalOptions, asJSON bool, s slotJSON, format string, a ...any) error {
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	info(g, format, a...)
	return nil
}
