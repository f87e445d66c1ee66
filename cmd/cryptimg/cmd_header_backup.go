package main

import (
	"encoding/json"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

func newHeaderBackupCommand(g *globalOptions) *cobra.Command {
	var asJSON, force bool
	cmd := &cobra.Command{
		Use:   "header-backup IMAGE FILE",
		Short: "Save the LUKS header and key slots to a file",
		Long: `Save the LUKS header and key slot area of IMAGE to FILE, in the format of
"cryptsetup luksHeaderBackup": the bytes from the header start to the end
of the last key slot, rounded up to 4096 bytes, with the unused bytes
592..4095 zeroed. cryptsetup luksHeaderRestore accepts the file, and
header-restore accepts cryptsetup's.

FILE holds key material: it is created with mode 0600, through a temporary
file renamed when complete. An existing FILE is refused, as cryptsetup
refuses it, unless --force, which replaces it by the same rename.
` + exitStatusHelp,
		Example: `  cryptimg header-backup disk.luks disk.hdr`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, out := args[0], args[1]
			if image.SameFile(path, out) {
				return usagef("%s: %w", out, image.ErrSameFile)
			}
			f, e, err := openImage(g, path)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := e.HeaderBackup(out, force); err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(g.stdout).Encode(headerBackupJSON{"header-backup", path, out, e.Header.BackupSize()})
			}
			info(g, "header of %s saved to %s (%d bytes)", path, out, e.Header.BackupSize())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the backup's file and size as JSON on stdout")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "replace an existing FILE")
	return cmd
}

// headerBackupJSON is the output of header-backup --json.
type headerBackupJSON struct {
	MessageType string `json:"message_type"`
	Image       string `json:"image"`
	File        string `json:"file"`
	Bytes       int64  `json:"bytes"`
}
