package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type dumpOptions struct {
	json          bool
	dumpVolumeKey bool
	dumpJSON      bool
	key           keyOptions
}

func newDumpCommand(g *globalOptions) *cobra.Command {
	var o dumpOptions
	cmd := &cobra.Command{
		Use:   "dump [--json] IMAGE",
		Short: "Show the LUKS header of an encrypted image",
		Long: `Show the LUKS header of an encrypted image, as "cryptsetup luksDump" does.
No key is needed and nothing secret is shown. --json prints one object whose
schema is documented in the README.

--dump-volume-key instead prints the volume key, which opens the image
without any passphrase: it needs a key (--key-file or the prompt) and an
explicit confirmation, typed on a terminal or given with --batch-mode.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDump(g, o, args[0])
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON")
	cmd.Flags().BoolVar(&o.dumpVolumeKey, "dump-volume-key", false, "print the volume key (needs a key and confirmation)")
	cmd.Flags().BoolVar(&o.dumpVolumeKey, "dump-master-key", false, "alias of --dump-volume-key")
	cmd.Flags().BoolVar(&o.dumpJSON, "dump-json-metadata", false, "print a LUKS2 header's JSON metadata")
	o.key.addFlags(cmd.Flags())
	return cmd
}

// dumpJSON is the stable --json schema of dump; see README.md.
type dumpJSON struct {
	Path               string        `json:"path"`
	Format             string        `json:"format"`
	Version            int           `json:"version"`
	UUID               string        `json:"uuid"`
	Cipher             string        `json:"cipher"`
	CipherName         string        `json:"cipher_name"`
	CipherMode         string        `json:"cipher_mode"`
	Hash               string        `json:"hash"`
	KeyBits            int           `json:"key_bits"`
	HeaderOffset       int64         `json:"header_offset"`
	PayloadOffset      int64         `json:"payload_offset"`
	PayloadOffsetBytes int64         `json:"payload_offset_bytes"`
	PayloadSize        int64         `json:"payload_size"`
	MKDigest           string        `json:"mk_digest"`
	MKDigestSalt       string        `json:"mk_digest_salt"`
	MKDigestIterations uint32        `json:"mk_digest_iterations"`
	KeySlots           []keySlotJSON `json:"key_slots"`
	Qcow2              *qcow2JSON    `json:"qcow2,omitempty"`
}

// qcow2JSON describes the qcow2 container of a qcow2+LUKS image.
type qcow2JSON struct {
	Version      int   `json:"version"`
	ClusterSize  int64 `json:"cluster_size"`
	VirtualSize  int64 `json:"virtual_size"`
	CryptOffset  int64 `json:"crypt_offset"`
	CryptLength  int64 `json:"crypt_length"`
	ExtendedL2   bool  `json:"extended_l2"`
	RefcountBits int   `json:"refcount_bits"`
}

type keySlotJSON struct {
	Slot              int    `json:"slot"`
	Active            bool   `json:"active"`
	Iterations        uint32 `json:"iterations"`
	Salt              string `json:"salt"`
	KeyMaterialOffset uint32 `json:"key_material_offset"`
	Stripes           uint32 `json:"stripes"`
}

func runDump(g *globalOptions, o dumpOptions, path string) error {
	f, e, err := openImage(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if g.header != "" {
		path = g.header // the header's file, as luksDump --header names it
	}
	if o.dumpVolumeKey {
		return runDumpVolumeKey(g, o, path, e)
	}
	if o.key.keyFile != "" {
		return usagef("--key-file is only used with --dump-volume-key")
	}
	if l2, ok := e.Header.(*header.LUKS2); ok {
		return dumpLUKS2(g, o, path, e, l2)
	}
	if o.dumpJSON {
		return usagef("--dump-json-metadata needs a LUKS2 header; %s is LUKS1", path)
	}
	h, ok := e.Header.(*header.LUKS1)
	if !ok {
		return fmt.Errorf("dump of a LUKS%d header is not supported", e.Header.Info().Version)
	}
	if o.json {
		d := dumpJSON{
			Path: path, Format: string(e.Format), Version: int(h.Version), UUID: h.UUID,
			Cipher: h.CipherSpec(), CipherName: h.CipherName, CipherMode: h.CipherMode, Hash: h.HashSpec,
			KeyBits: int(h.KeyBytes) * 8, HeaderOffset: e.HeaderOffset,
			PayloadOffset: int64(h.PayloadOffset), PayloadOffsetBytes: e.PayloadOffset, PayloadSize: e.PayloadSize,
			MKDigest: hex.EncodeToString(h.MKDigest[:]), MKDigestSalt: hex.EncodeToString(h.MKDigestSalt[:]),
			MKDigestIterations: h.MKDigestIter, KeySlots: []keySlotJSON{},
		}
		for i, s := range h.Slots {
			d.KeySlots = append(d.KeySlots, keySlotJSON{
				Slot: i, Active: s.Active(), Iterations: s.Iterations, Salt: hex.EncodeToString(s.Salt[:]),
				KeyMaterialOffset: s.KeyMaterialOffset, Stripes: s.Stripes,
			})
		}
		if q := e.Qcow2; q != nil {
			d.Qcow2 = &qcow2JSON{Version: q.Version, ClusterSize: q.ClusterSize, VirtualSize: q.Size,
				CryptOffset: q.CryptOffset, CryptLength: q.CryptLength, ExtendedL2: q.ExtendedL2, RefcountBits: q.RefcountBits}
		}
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	writeDump(g.stdout, path, e, h)
	return nil
}

func writeDump(w io.Writer, path string, e *image.Encrypted, h *header.LUKS1) {
	if q := e.Qcow2; q != nil {
		fmt.Fprintf(w, "qcow2 image information for %s\n\n", path)
		fmt.Fprintf(w, "Version:       \t%d\n", q.Version)
		fmt.Fprintf(w, "Virtual size:  \t%d bytes\n", q.Size)
		fmt.Fprintf(w, "Cluster size:  \t%d\n", q.ClusterSize)
		fmt.Fprintf(w, "Extended L2:   \t%v\n", q.ExtendedL2)
		fmt.Fprintf(w, "Encryption:    \tLUKS, header at offset %d, %d bytes\n\n", q.CryptOffset, q.CryptLength)
	}
	fmt.Fprintf(w, "LUKS header information for %s\n\n", path)
	fmt.Fprintf(w, "Version:       \t%d\n", h.Version)
	fmt.Fprintf(w, "Cipher name:   \t%s\n", h.CipherName)
	fmt.Fprintf(w, "Cipher mode:   \t%s\n", h.CipherMode)
	fmt.Fprintf(w, "Hash spec:     \t%s\n", h.HashSpec)
	fmt.Fprintf(w, "Payload offset:\t%d\n", h.PayloadOffset)
	fmt.Fprintf(w, "Payload size:  \t%d bytes\n", e.PayloadSize)
	fmt.Fprintf(w, "MK bits:       \t%d\n", h.KeyBytes*8)
	fmt.Fprintf(w, "MK digest:     \t%s\n", spacedHex(h.MKDigest[:]))
	fmt.Fprintf(w, "MK salt:       \t%s\n", spacedHex(h.MKDigestSalt[:16]))
	fmt.Fprintf(w, "               \t%s\n", spacedHex(h.MKDigestSalt[16:]))
	fmt.Fprintf(w, "MK iterations: \t%d\n", h.MKDigestIter)
	fmt.Fprintf(w, "UUID:          \t%s\n\n", h.UUID)
	for i, s := range h.Slots {
		if !s.Active() {
			fmt.Fprintf(w, "Key Slot %d: DISABLED\n", i)
			continue
		}
		fmt.Fprintf(w, "Key Slot %d: ENABLED\n", i)
		fmt.Fprintf(w, "\tIterations:         \t%d\n", s.Iterations)
		fmt.Fprintf(w, "\tSalt:               \t%s\n", spacedHex(s.Salt[:16]))
		fmt.Fprintf(w, "\t                    \t%s\n", spacedHex(s.Salt[16:]))
		fmt.Fprintf(w, "\tKey material offset:\t%d\n", s.KeyMaterialOffset)
		fmt.Fprintf(w, "\tAF stripes:         \t%d\n", s.Stripes)
	}
}

func spacedHex(b []byte) string {
	parts := make([]string, len(b))
	for i, c := range b {
		parts[i] = hex.EncodeToString([]byte{c})
	}
	return strings.Join(parts, " ")
}

// volumeKeyJSON is the --json --dump-volume-key schema; see README.md.
type volumeKeyJSON struct {
	Path      string          `json:"path"`
	UUID      string          `json:"uuid"`
	Cipher    string          `json:"cipher"`
	KeyBits   int             `json:"key_bits"`
	KeySlot   int             `json:"key_slot"`
	VolumeKey json.RawMessage `json:"volume_key"`
}

// runDumpVolumeKey prints the volume key as cryptsetup luksDump
// --dump-volume-key does, after a confirmation and with a key.
func runDumpVolumeKey(g *globalOptions, o dumpOptions, path string, e *image.Encrypted) error {
	if err := mustConfirm(g, "dump --dump-volume-key"); err != nil {
		return err
	}
	if err := confirm(g, "The volume key opens the image without any passphrase.\nStore this dump encrypted, in a safe place."); err != nil {
		return err
	}
	k, err := unlockImage(g, e, o.key, path, passPrompt(path), -1)
	if err != nil {
		return err
	}
	defer k.Clear()
	vk := k.VolumeKey()
	h := e.Header.Info()
	if o.json {
		raw := make([]byte, 2+hex.EncodedLen(len(vk)))
		defer clear(raw)
		raw[0], raw[len(raw)-1] = '"', '"'
		hex.Encode(raw[1:], vk)
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(volumeKeyJSON{Path: path, UUID: h.UUID, Cipher: h.Cipher,
			KeyBits: len(vk) * 8, KeySlot: k.Slot, VolumeKey: raw})
	}
	w := g.stdout
	fmt.Fprintf(w, "LUKS header information for %s\n", path)
	name, mode, _ := strings.Cut(h.Cipher, "-")
	fmt.Fprintf(w, "Cipher name:   \t%s\n", name)
	fmt.Fprintf(w, "Cipher mode:   \t%s\n", mode)
	fmt.Fprintf(w, "Payload offset:\t%d\n", h.PayloadOffset/image.SectorSize)
	fmt.Fprintf(w, "UUID:          \t%s\n", h.UUID)
	fmt.Fprintf(w, "MK bits:       \t%d\n", len(vk)*8)
	// The hex goes through a buffer cleared afterwards, not a string.
	buf := make([]byte, 0, 16*3+8)
	defer clear(buf[:cap(buf)])
	for i := 0; i < len(vk); i += 16 {
		buf = buf[:0]
		if i == 0 {
			buf = append(buf, "MK dump:\t"...)
		} else {
			buf = append(buf, "\t\t"...)
		}
		for _, c := range vk[i:min(i+16, len(vk))] {
			buf = hex.AppendEncode(buf, []byte{c})
			buf = append(buf, ' ')
		}
		buf = append(buf, '\n')
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}
