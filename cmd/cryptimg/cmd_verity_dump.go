package main

import (
	"encoding/json"
	"fmt"

	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/spf13/cobra"
)

func newVerityDumpCommand(g *globalOptions) *cobra.Command {
	var hashOffset int64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dump [flags] HASH",
		Short: "Print the parameters in a dm-verity superblock",
		Long: `Print the parameters in the veritysetup superblock of HASH (at
--hash-offset), as "veritysetup dump" does (--json: as JSON). The superblock
holds no root hash.
` + exitStatusHelp,
		Example: `  cryptimg verity dump root.verity
  cryptimg verity dump --hash-offset 104857600 disk.img`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			f, err := openForRead(path)
			if err != nil {
				return err
			}
			defer f.Close()
			p, err := verity.ReadSuperblock(f, hashOffset)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			geo, err := p.Geometry()
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if asJSON {
				return json.NewEncoder(g.stdout).Encode(newVerityJSON("", path, &p, &geo, nil))
			}
			printVerityHeader(g.stdout, path, &p, &geo, nil)
			return nil
		},
	}
	cmd.Flags().Int64Var(&hashOffset, "hash-offset", 0, "byte offset of the superblock in HASH")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the parameters as JSON on stdout")
	return cmd
}
