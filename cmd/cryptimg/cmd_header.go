package main

import (
	"encoding/json"
	"errors"
	"fmt"

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

type headerRestoreOptions struct {
	force bool
}

func newHeaderRestoreCommand(g *globalOptions) *cobra.Command {
	var o headerRestoreOptions
	cmd := &cobra.Command{
		Use:   "header-restore [flags] IMAGE FILE",
		Short: "Write a saved LUKS header and key slots back into an image",
		Long: `Write the header backup FILE (from header-backup or "cryptsetup
luksHeaderBackup") back into IMAGE, replacing its header and all its key
slots: keys added since the backup are lost, keys removed since come back.
For a qcow2 image the area goes to the image's LUKS area.

If IMAGE still has a readable header, the backup must have the same UUID,
payload offset and key size, unless --force. The key slot area is written
and synced first, then the header. The operation asks for confirmation on a
terminal unless --batch-mode is given, and is refused on a non-terminal
without --batch-mode.
` + exitStatusHelp,
		Example: `  cryptimg header-restore -q disk.luks disk.hdr`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHeaderRestore(g, o, args[0], args[1])
		},
	}
	cmd.Flags().BoolVarP(&o.force, "force", "f", false, "restore even if the backup's UUID, payload offset or key size differ from the image's")
	return cmd
}

func runHeaderRestore(g *globalOptions, o headerRestoreOptions, path, backup string) error {
	if image.SameFile(path, backup) {
		return usagef("%s: %w", backup, image.ErrSameFile)
	}
	if err := mustConfirm(g, "header-restore"); err != nil {
		return err
	}
	// As cryptsetup's --header: the backup goes into the header file.
	path, err := headerPath(g, path)
	if err != nil {
		return err
	}
	f, err := openLocked(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := image.PrepareRestore(f, backup)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer r.Discard()
	if r.Mismatch != nil && !o.force {
		return fmt.Errorf("%s: %w (pass --force to restore anyway)", path, r.Mismatch)
	}
	warning := fmt.Sprintf("%s has no valid LUKS header (%v).\nWriting the backup over it can destroy data.", path, r.CurrentErr)
	if r.Current != nil {
		warning = fmt.Sprintf("%s already has a LUKS header.\nReplacing it destroys its current key slots.", path)
	}
	if err := confirm(g, warning); err != nil {
		return err
	}
	if err := r.Apply(o.force); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	info(g, "header of %s restored from %s", path, backup)
	return nil
}

type uuidOptions struct {
	uuid string
	json bool
}

// uuidJSON is the output of uuid --json: the UUID read, or the one set.
type uuidJSON struct {
	MessageType string `json:"message_type"`
	Image       string `json:"image"`
	UUID        string `json:"uuid"`
}

func newUUIDCommand(g *globalOptions) *cobra.Command {
	var o uuidOptions
	cmd := &cobra.Command{
		Use:   "uuid [--uuid NEW] IMAGE",
		Short: "Print or set the LUKS UUID",
		Long: `Print the UUID of the image's LUKS header on stdout, or with --uuid set it,
as "cryptsetup luksUUID" does. NEW must be in xxxxxxxx-xxxx-xxxx-xxxx-
xxxxxxxxxxxx form; it is stored lower-case. Setting asks for confirmation
on a terminal unless --batch-mode is given (as cryptsetup does; it touches
no key).
` + exitStatusHelp,
		Example: `  cryptimg uuid disk.luks
  cryptimg uuid -q --uuid 01234567-89ab-4cde-8f01-23456789abcd disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runUUID(g, o, args[0])
		},
	}
	cmd.Flags().StringVar(&o.uuid, "uuid", "", "set this UUID")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the UUID (with --uuid, the one set) as JSON on stdout")
	return cmd
}

func runUUID(g *globalOptions, o uuidOptions, path string) error {
	if o.uuid == "" {
		f, e, err := openImage(g, path)
		if err != nil {
			return err
		}
		defer f.Close()
		if o.json {
			return json.NewEncoder(g.stdout).Encode(uuidJSON{"uuid", path, e.Header.Info().UUID})
		}
		fmt.Fprintln(g.stdout, e.Header.Info().UUID)
		return nil
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !g.batch && g.stdinIsTerminal() {
		if err := confirm(g, fmt.Sprintf("This changes the UUID of %s from %s to %s.", path, e.Header.Info().UUID, o.uuid)); err != nil {
			return err
		}
	}
	if err := e.SetUUID(o.uuid); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(uuidJSON{"uuid", path, e.Header.Info().UUID})
	}
	return nil
}

type isLUKSOptions struct {
	verbose  bool
	luksType string
}

func newIsLUKSCommand(g *globalOptions) *cobra.Command {
	var o isLUKSOptions
	cmd := &cobra.Command{
		Use:   "is-luks [-v] IMAGE",
		Short: "Check whether a file is a LUKS or qcow2+LUKS image",
		Long: `Exit 0 if IMAGE is a LUKS1 or LUKS2 image, or a qcow2+LUKS image, whose header
is valid, 1 otherwise, as "cryptsetup isLuks" does; --type luks1 or luks2
also requires that version. -v says what was found on stdout, or why the
check failed.
` + exitStatusHelp,
		Example: `  cryptimg is-luks disk.luks && echo encrypted`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := headerPath(g, args[0])
			if err != nil {
				return err
			}
			f, err := openForRead(path)
			if err != nil {
				return err
			}
			defer f.Close()
			e, err := image.Open(f)
			if errors.Is(err, image.ErrDetached) || (err != nil && g.header != "") {
				// A detached header is LUKS, as cryptsetup isLuks says.
				e, err = image.OpenHeader(f)
			}
			if err != nil {
				if o.verbose {
					// %v, not %w: a non-LUKS file is exit 1 here, not 4.
					return fmt.Errorf("%s is not a LUKS image: %v", path, err)
				}
				return fmt.Errorf("%s is not a LUKS image", path)
			}
			v := e.Header.Info().Version
			if o.luksType != "" && o.luksType != fmt.Sprintf("luks%d", v) {
				return fmt.Errorf("%s is LUKS%d, not %s", path, v, o.luksType)
			}
			if o.verbose {
				fmt.Fprintf(g.stdout, "%s: LUKS%d (%s), UUID %s\n", path, v, e.Format, e.Header.Info().UUID)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "say what was found, or why the check failed")
	cmd.Flags().StringVar(&o.luksType, "type", "", "succeed only for this version: luks1 or luks2")
	return cmd
}
