package main

import (
	"errors"
	"fmt"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

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
