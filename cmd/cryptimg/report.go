package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// info prints a status line for humans on stderr unless --quiet.
func info(g *globalOptions, format string, a ...any) {
	if !g.quiet {
		fmt.Fprintf(g.stderr, "cryptimg: "+format+"\n", a...)
	}
}

// summary is the result of encrypt or decrypt, printed as one line for
// people or as a JSON object on stdout with --json.
type summary struct {
	MessageType string  `json:"message_type"`
	Op          string  `json:"op"`
	Input       string  `json:"input"`
	Output      string  `json:"output"`
	Format      string  `json:"format"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`     // the data's, after the key derivation
	KDFSeconds  float64 `json:"kdf_seconds"` // the key derivation's: unlocking, or making the key slot
	volumeJSON
	// Corrupt lists the sectors that failed their integrity check
	// (decrypt --allow-corrupt).
	Corrupt *corruptJSON `json:"corrupt,omitempty"`
	// Verity is encrypt --verity's tree (cmd_encrypt_verity.go).
	Verity *verityJSON `json:"verity,omitempty"`
}

// volumeJSON is what a summary says of the header: cipher, key, UUID, the
// slot used and the payload offset in 512-byte sectors.
type volumeJSON struct {
	Cipher        string `json:"cipher"`
	KeyBits       int    `json:"key_bits"`
	Hash          string `json:"hash"`
	UUID          string `json:"uuid"`
	KeySlot       int    `json:"key_slot"`
	PayloadOffset int64  `json:"payload_offset"`
	Integrity     string `json:"integrity,omitempty"`
}

func volumeOf(h header.Header, slot int) volumeJSON {
	i := h.Info()
	return volumeJSON{Cipher: i.Cipher, KeyBits: i.KeyBytes * 8, Hash: i.Hash, UUID: i.UUID,
		KeySlot: slot, PayloadOffset: i.PayloadOffset / image.SectorSize, Integrity: i.Integrity}
}

// kdfDone returns a HeaderMade hook for an operation that started at
// *start: the time up to the call goes to g.kdf, and *start moves to the
// call, where the data's time starts.
func (g *globalOptions) kdfDone(start *time.Time) func() {
	return func() {
		now := time.Now()
		g.kdf += now.Sub(*start)
		*start = now
	}
}

func (g *globalOptions) report(asJSON bool, s summary) error {
	s.MessageType = "summary"
	s.KDFSeconds = g.kdf.Seconds()
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	if g.quiet {
		return nil
	}
	verb := map[string]string{"encrypt": "encrypted", "decrypt": "decrypted"}[s.Op]
	fmt.Fprintf(g.stderr, "cryptimg: %s %s to %s (%s, %s, %d-bit key, key slot %d) in %.2fs, plus %.2fs of key derivation\n",
		verb, inName(s.Input), outName(s.Output), humanBytes(s.Bytes), s.Cipher, s.KeyBits, s.KeySlot, s.Seconds, s.KDFSeconds)
	return nil
}

// warnZeroed warns, unless quiet, that the sectors of bad, which failed
// their integrity check in in, were written as zeros to out
// (--allow-corrupt).
func (g *globalOptions) warnZeroed(bad *image.CorruptError, in, out string) {
	if g.quiet {
		return
	}
	fmt.Fprintf(g.stderr, "cryptimg: warning: %s the integrity check in %s, written as zeros to %s: %s\n",
		failing(bad), in, out, corruptOf(bad).list())
}
