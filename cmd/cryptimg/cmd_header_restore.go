package main

import (
	"fmt"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

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
