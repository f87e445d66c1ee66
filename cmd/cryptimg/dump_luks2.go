package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

// luks2JSON is dump --json of a LUKS2 header; see README.md.
type luks2JSON struct {
	Path         string             `json:"path"`
	Format       string             `json:"format"`
	Version      int                `json:"version"`
	UUID         string             `json:"uuid"`
	Label        string             `json:"label"`
	Subsystem    string             `json:"subsystem"`
	Epoch        uint64             `json:"epoch"`
	MetadataSize int64              `json:"metadata_size"`
	KeyslotsSize uint64             `json:"keyslots_size"`
	Cipher       string             `json:"cipher"`
	KeyBits      int                `json:"key_bits"`
	SectorSize   int                `json:"sector_size"`
	Offset       int64              `json:"payload_offset_bytes"`
	PayloadSize  int64              `json:"payload_size"`
	ReadOnly     bool               `json:"metadata_read_only"`
	Warning      string             `json:"warning,omitempty"`
	Unusable     []string           `json:"unusable,omitempty"`
	Metadata     json.RawMessage    `json:"metadata"`
	Keyslots     []luks2KeyslotJSON `json:"keyslots"`
	Tokens       map[string]string  `json:"tokens"`
	Requirements []string           `json:"requirements"`
	Flags        []string           `json:"flags"`
}

type luks2KeyslotJSON struct {
	Slot     int    `json:"slot"`
	Type     string `json:"type"`
	KeyBits  int    `json:"key_bits"`
	Priority string `json:"priority"`
	KDF      string `json:"kdf"`
}

var priorityNames = map[int]string{0: "ignored", 1: "normal", 2: "preferred"}

func priorityName(k *header.Keyslot) string {
	if k.Priority == nil {
		return "normal"
	}
	if s, ok := priorityNames[*k.Priority]; ok {
		return s
	}
	return fmt.Sprint(*k.Priority)
}

// dumpLUKS2 prints a LUKS2 header as cryptsetup luksDump does, or its JSON
// metadata, or (--json) a summary with the metadata inside. A damaged
// header copy is left as it is (openImage warned about it).
func dumpLUKS2(g *globalOptions, o dumpOptions, path string, e *image.Encrypted, h *header.LUKS2) error {
	// Parts cryptsetup loads and cryptimg keeps, shows and will not use:
	// one warning line each, on stderr, so that the dump stays luksDump's.
	problems := h.Problems()
	for _, p := range problems {
		fmt.Fprintf(g.stderr, "cryptimg: warning: %s: %s\n", path, p)
	}
	if o.dumpJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, h.JSON(), "", "  "); err != nil {
			return err
		}
		buf.WriteByte('\n')
		_, err := g.stdout.Write(buf.Bytes())
		return err
	}
	i := h.Info()
	if o.json {
		d := luks2JSON{
			Path: path, Format: string(e.Format), Version: 2, UUID: i.UUID, Label: h.Label(), Subsystem: h.Subsystem(),
			Epoch: h.SeqID(), MetadataSize: h.MetadataSize(), KeyslotsSize: uint64(h.Config.KeyslotsSize),
			Cipher: i.Cipher, KeyBits: i.KeyBytes * 8, SectorSize: i.SectorSize, Offset: i.PayloadOffset,
			PayloadSize: e.PayloadSize, ReadOnly: h.ReadOnly, Warning: h.Warning, Unusable: problems, Metadata: h.JSON(),
			Keyslots: []luks2KeyslotJSON{}, Tokens: map[string]string{}, Requirements: []string{}, Flags: []string{},
		}
		for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
			k := h.Keyslots[n]
			d.Keyslots = append(d.Keyslots, luks2KeyslotJSON{Slot: n, Type: k.Type, KeyBits: k.KeySize * 8, Priority: priorityName(k), KDF: k.KDF.Type})
		}
		for n, t := range h.Tokens {
			d.Tokens[fmt.Sprint(n)] = t.Type
		}
		if r := h.Config.Requirements; r != nil {
			d.Requirements = append(d.Requirements, r.Mandatory...)
		}
		d.Flags = append(d.Flags, h.Config.Flags...)
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	writeDumpLUKS2(g.stdout, h)
	return nil
}

// writeDumpLUKS2 writes cryptsetup 2.6.1's luksDump layout.
func writeDumpLUKS2(w io.Writer, h *header.LUKS2) {
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	list := func(l []string, none, end string) string {
		if len(l) == 0 {
			return none
		}
		return strings.Join(l, " ") + end
	}
	i := h.Info()
	fmt.Fprintf(w, "LUKS header information\n")
	fmt.Fprintf(w, "Version:       \t2\n")
	fmt.Fprintf(w, "Epoch:         \t%d\n", h.SeqID())
	fmt.Fprintf(w, "Metadata area: \t%d [bytes]\n", h.MetadataSize())
	fmt.Fprintf(w, "Keyslots area: \t%d [bytes]\n", uint64(h.Config.KeyslotsSize))
	fmt.Fprintf(w, "UUID:          \t%s\n", i.UUID)
	fmt.Fprintf(w, "Label:         \t%s\n", or(h.Label(), "(no label)"))
	fmt.Fprintf(w, "Subsystem:     \t%s\n", or(h.Subsystem(), "(no subsystem)"))
	// cryptsetup ends each flag and requirement with a space.
	fmt.Fprintf(w, "Flags:       \t%s\n", list(h.Config.Flags, "(no flags)", " "))
	if r := h.Config.Requirements; r != nil && len(r.Mandatory) > 0 {
		fmt.Fprintf(w, "Requirements:\t%s\n", list(r.Mandatory, "", " "))
	}
	fmt.Fprintf(w, "\nData segments:\n")
	for j, n := range slices.Sorted(maps.Keys(h.Segments)) {
		s := h.Segments[n]
		if j > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "  %d: %s\n", n, s.Type)
		fmt.Fprintf(w, "\toffset: %d [bytes]\n", uint64(s.Offset))
		if s.Size == "dynamic" {
			fmt.Fprintf(w, "\tlength: (whole device)\n")
		} else {
			fmt.Fprintf(w, "\tlength: %s [bytes]\n", s.Size)
		}
		// cryptsetup prints the cipher and sector size of a segment of
		// any type that has them.
		if s.Type == "crypt" || s.Encryption != "" {
			fmt.Fprintf(w, "\tcipher: %s\n", s.Encryption)
		}
		if s.Type == "crypt" || s.SectorSize != 0 {
			fmt.Fprintf(w, "\tsector: %d [bytes]\n", s.SectorSize)
		}
		if si := s.IntegrityObject(); si != nil {
			fmt.Fprintf(w, "\tintegrity: %s\n", si.Type)
		}
		if len(s.Flags) > 0 {
			fmt.Fprintf(w, "\tflags : %s\n", strings.Join(s.Flags, ", "))
		}
	}
	fmt.Fprintf(w, "\nKeyslots:\n")
	for _, n := range slices.Sorted(maps.Keys(h.Keyslots)) {
		k := h.Keyslots[n]
		unbound := ""
		if !h.Bound(n) {
			unbound = " (unbound)"
		}
		fmt.Fprintf(w, "  %d: %s%s\n", n, k.Type, unbound)
		fmt.Fprintf(w, "\tKey:        %d bits\n", k.KeySize*8)
		fmt.Fprintf(w, "\tPriority:   %s\n", priorityName(k))
		switch k.Type {
		case "luks2":
			writeLUKS2Keyslot(w, k)
		case "reencrypt":
			fmt.Fprintf(w, "\tMode:       %s\n", k.Mode)
			fmt.Fprintf(w, "\tDirection:  %s\n", k.Direction)
			fmt.Fprintf(w, "\tResilience: %s\n", k.Area.Type)
			if k.Area.Hash != "" {
				fmt.Fprintf(w, "\tHash:       %s\n", k.Area.Hash)
				fmt.Fprintf(w, "\tHash data:  %d [bytes]\n", k.Area.SectorSize)
			}
			if k.Area.ShiftSize != 0 {
				fmt.Fprintf(w, "\tShift size: %d [bytes]\n", uint64(k.Area.ShiftSize))
			}
		}
		if k.Type == "luks2" || k.Type == "reencrypt" {
			fmt.Fprintf(w, "\tArea offset:%d [bytes]\n", uint64(k.Area.Offset))
			fmt.Fprintf(w, "\tArea length:%d [bytes]\n", uint64(k.Area.Size))
		}
		// A keyslot of a type cryptsetup has no handler for shows its
		// type, key size, priority and digest only.
		for _, d := range slices.Sorted(maps.Keys(h.Digests)) {
			if slices.Contains(h.Digests[d].Keyslots, fmt.Sprint(n)) {
				fmt.Fprintf(w, "\tDigest ID:  %d\n", d)
			}
		}
	}
	writeDumpLUKS2Tail(w, h)
}

// writeLUKS2Keyslot writes the lines of a luks2 keyslot between its
// priority and its area.
func writeLUKS2Keyslot(w io.Writer, k *header.Keyslot) {
	fmt.Fprintf(w, "\tCipher:     %s\n", k.Area.Encryption)
	fmt.Fprintf(w, "\tCipher key: %d bits\n", k.Area.KeySize*8)
	fmt.Fprintf(w, "\tPBKDF:      %s\n", k.KDF.Type)
	if k.KDF.Type == header.PBKDF2 {
		fmt.Fprintf(w, "\tHash:       %s\n", k.KDF.Hash)
		fmt.Fprintf(w, "\tIterations: %d\n", k.KDF.Iterations)
	} else {
		fmt.Fprintf(w, "\tTime cost:  %d\n", k.KDF.Time)
		fmt.Fprintf(w, "\tMemory:     %d\n", k.KDF.Memory)
		fmt.Fprintf(w, "\tThreads:    %d\n", k.KDF.CPUs)
	}
	writeHexLines(w, "\tSalt:       ", "\t            ", k.KDF.Salt)
	fmt.Fprintf(w, "\tAF stripes: %d\n", k.AF.Stripes)
	fmt.Fprintf(w, "\tAF hash:    %s\n", k.AF.Hash)
}

// writeDumpLUKS2Tail writes the tokens and digests.
func writeDumpLUKS2Tail(w io.Writer, h *header.LUKS2) {
	fmt.Fprintf(w, "Tokens:\n")
	for _, n := range slices.Sorted(maps.Keys(h.Tokens)) {
		t := h.Tokens[n]
		fmt.Fprintf(w, "  %d: %s\n", n, t.Type)
		if t.Type == "luks2-keyring" {
			var k struct {
				Desc string `json:"key_description"`
			}
			json.Unmarshal(t.Raw, &k)
			fmt.Fprintf(w, "\tKey description: %s\n", k.Desc)
		}
		for _, k := range t.Keyslots {
			fmt.Fprintf(w, "\tKeyslot:    %s\n", k)
		}
	}
	fmt.Fprintf(w, "Digests:\n")
	for _, n := range slices.Sorted(maps.Keys(h.Digests)) {
		d := h.Digests[n]
		fmt.Fprintf(w, "  %d: %s\n", n, d.Type)
		if d.Type != header.PBKDF2 {
			continue // cryptsetup has no handler to print another type's fields
		}
		fmt.Fprintf(w, "\tHash:       %s\n", d.Hash)
		fmt.Fprintf(w, "\tIterations: %d\n", d.Iterations)
		writeHexLines(w, "\tSalt:       ", "\t            ", d.Salt)
		writeHexLines(w, "\tDigest:     ", "\t            ", d.Digest)
	}
}

// writeHexLines writes b as spaced hex, 16 bytes a line, with cryptsetup's
// trailing space.
func writeHexLines(w io.Writer, first, next string, b []byte) {
	for i := 0; i < len(b); i += 16 {
		p := next
		if i == 0 {
			p = first
		}
		fmt.Fprintf(w, "%s%s \n", p, spacedHex(b[i:min(i+16, len(b))]))
	}
}
