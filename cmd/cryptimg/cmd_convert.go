package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type convertOptions struct {
	typ     string
	resume  bool
	jsonOut bool
}

func newConvertCommand(g *globalOptions) *cobra.Command {
	var o convertOptions
	cmd := &cobra.Command{
		Use:   "convert --type luks1|luks2 IMAGE",
		Short: "Convert the header of a raw LUKS image between LUKS1 and LUKS2, in place",
		Long: `Rewrite the header of a raw LUKS image in the other LUKS version, as cryptsetup
convert does: the volume key, the passphrases and the data stay; the key
material moves by 28672 bytes (LUKS1 keeps it from 4 KiB, LUKS2 from 32 KiB).
No passphrase is needed. It asks for confirmation unless --batch-mode.

LUKS2 → LUKS1 works only when LUKS1 can hold everything the header says, and
is refused otherwise, with cryptsetup's reasons: PBKDF2 key slots (argon2 ones
must be changed first with change-key --pbkdf ` + header.PBKDF2 + `), ` + strconv.Itoa(header.SectorSize) + `-byte sectors, no
tokens, key slots 0-` + strconv.Itoa(header.SlotCount(1)-1) + ` only, one digest and one data segment. The label, the
subsystem, key slot priorities and flags are dropped. A qcow2 image's header
stays as it is: ` + image.ErrLUKS2Qcow2.Error() + `.

The move overlaps the old key material, so it is crash-safe the way reencrypt
is: the new header area goes to IMAGE.cryptimg-journal first, and the image is
marked (LUKS\xde\xad) while it is written, so that cryptsetup refuses it. If
the run is interrupted, run the same command again, or with --resume.
` + exitStatusHelp + `  5    busy: the image has an unfinished reencrypt, in-place operation or conversion
`,
		Example: `  cryptimg convert --type luks2 disk.luks
  cryptimg convert --type luks1 -q disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(cmd, g, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.typ, "type", "", "LUKS version to convert to: luks1 or luks2 (required, except with --resume)")
	f.BoolVar(&o.resume, "resume", false, "only continue an interrupted conversion; fail if there is none")
	f.BoolVar(&o.jsonOut, "json", false, "print a JSON summary on stdout")
	return cmd
}

func runConvert(cmd *cobra.Command, g *globalOptions, o convertOptions, path string) error {
	version := map[string]int{luksType(1): 1, luksType(2): 2}[o.typ]
	if version == 0 && (o.typ != "" || !o.resume) {
		return usagef("--type must be %s", orList(luksTypes()))
	}
	// A detached header converts in its own file, as with cryptsetup's
	// --header; the data is not touched.
	path, err := headerPath(g, path)
	if err != nil {
		return err
	}
	f, resuming, err := lockOp(path, image.OpConvert, o.resume)
	if err != nil {
		return err
	}
	defer f.Close()
	if resuming {
		info(g, "resuming the unfinished conversion of %s", path)
	} else {
		var e *image.Encrypted
		if g.header != "" {
			e, err = image.OpenHeader(f)
		} else {
			e, err = image.Open(f)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if e.Header.Info().Version != version {
			if err := mustConfirm(g, "convert"); err != nil {
				return err
			}
			if err := confirm(g, fmt.Sprintf("This converts the header of %s from LUKS%d to LUKS%d in place.", path, e.Header.Info().Version, version)); err != nil {
				return err
			}
		}
	}
	r, err := image.Convert(cmd.Context(), f, image.Sidecar(path), image.ConvertOptions{Version: version, Resume: o.resume})
	if err != nil {
		return interrupted(path, "convert --type "+o.typ, err)
	}
	i := r.Header.Info()
	if o.jsonOut {
		return json.NewEncoder(g.stdout).Encode(struct {
			MessageType string `json:"message_type"`
			Op          string `json:"op"`
			Image       string `json:"image"`
			Type        string `json:"type"`
			UUID        string `json:"uuid"`
			Resumed     bool   `json:"resumed"`
		}{"summary", "convert", path, fmt.Sprintf("luks%d", i.Version), i.UUID, r.Resumed})
	}
	info(g, "converted %s to LUKS%d", path, i.Version)
	return nil
}
