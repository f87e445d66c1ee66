package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

func newRepairCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "repair IMAGE",
		Short: "Rewrite a damaged or stale LUKS2 header copy from the good one",
		Long: `A LUKS2 header has two copies. When one fails its checksum or is older than the
other, or the primary is lost (its first 4 KiB overwritten), every cryptimg
command warns and reads the good one (the secondary is found at any metadata
size from 16 KiB to 4 MiB, as cryptsetup finds it), and none writes but to
commit a change of the header, which writes both copies. "repair" writes the
good copy over both (with the next seqid), each synced, as cryptsetup repair
does; with both copies good it does nothing.

For an image with integrity protection, repair first puts the writes left in
its dm-integrity journal (after a crash of the kernel that had it open) in
place, as the kernel does when it next opens the image, and empties the
journal.
` + exitStatusHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			// The header (or the image) and the data, whose integrity
			// journal is replayed, stay locked for the whole repair.
			hpath, err := headerPath(g, path)
			if err != nil {
				return err
			}
			hf, err := openLocked(hpath)
			if err != nil {
				return err
			}
			defer hf.Close()
			data := hf
			if g.header != "" {
				if data, err = openForWrite(path); err != nil {
					return err
				}
				defer data.Close()
			}
			if err := replayIntegrityJournal(g, data, hf, path); err != nil {
				return err
			}
			_, e, h, err := openLUKS2(g, path, readEncrypted, func(string) (*os.File, error) { return hf, nil })
			if err != nil {
				return err
			}
			if h.Warning == "" {
				info(g, "%s: both LUKS2 header copies are good; nothing to repair", path)
				return nil
			}
			if err := e.Apply(h.Repair()); err != nil {
				return err
			}
			info(g, "%s: repaired (%s)", path, h.Warning)
			return nil
		},
	}
}

// replayIntegrityJournal puts the pending writes of an authenticated
// image's dm-integrity journal (in f, named path, with its header in hdr)
// in place; other images are left alone.
func replayIntegrityJournal(g *globalOptions, f, hdr *os.File, path string) error {
	n, err := image.ReplayJournal(f, hdr)
	switch {
	case errors.Is(err, header.ErrNotAuthenticated):
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	case n > 0:
		info(g, "%s: put %d blocks from the integrity journal in place", path, n)
	}
	return nil
}
