package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/spf13/cobra"
)

func newVerityFormatCommand(g *globalOptions) *cobra.Command {
	var o verityOptions
	var po verityPartitionOptions
	cmd := &cobra.Command{
		Use:   "format [flags] DATA HASH | --partition N [flags] IMAGE",
		Short: "Build the dm-verity hash tree of DATA into HASH",
		Long: `Build the dm-verity hash tree of DATA and write it, after a veritysetup
superblock, into HASH, as "veritysetup format" does, on every core; print
the parameters and the root hash as veritysetup does (--json: as JSON).

HASH is a new file (written under a temporary name and renamed at the end)
or an existing one, written in place: the superblock at --hash-offset and
the tree from the next hash block, nothing else. HASH may be DATA itself
with --data-blocks and a --hash-offset past the data. Without --salt the
salt is 32 random bytes and without --uuid the UUID is random, as
veritysetup's.
` + verityPartitionHelp + exitStatusHelp,
		Example: `  cryptimg verity format root.img root.verity --root-hash-file root.hash
  cryptimg verity format disk.img disk.img --data-blocks 25600 --hash-offset 104857600
  cryptimg verity format --partition 2 disk.img --root-hash-file root.hash`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("partition") {
				return runVerityFormatPartition(cmd, g, &o, &po, args)
			}
			if len(args) != 2 {
				return usagef("give DATA and HASH, or --partition N and IMAGE")
			}
			return runVerityFormat(cmd, g, &o, args[0], args[1])
		},
	}
	addTreeFlags(cmd, &o)
	cmd.Flags().StringVar(&o.uuid, "uuid", "", "UUID of the superblock (default: random)")
	cmd.Flags().StringVar(&o.rootHashFile, "root-hash-file", "", "also write the root hash, in hex, to this file")
	addVerityPartitionFlags(cmd, &po)
	return cmd
}

func runVerityFormat(cmd *cobra.Command, g *globalOptions, o *verityOptions, dataPath, hashPath string) error {
	p, err := paramsFromFlags(cmd, o)
	if err != nil {
		return err
	}
	data, hash, out, err := openVerityFiles(dataPath, hashPath, true)
	if err != nil {
		return err
	}
	defer data.Close()
	defer hash.Close()
	if out != nil {
		defer out.Abort()
	}
	size, err := statSize(data)
	if err != nil {
		return err
	}
	if err := p.SetDataSize(size); err != nil {
		return fmt.Errorf("%s: %w", dataPath, err)
	}
	geo, err := p.Geometry()
	if err != nil {
		return usagef("%w", err)
	}
	root, err := verity.Format(cmd.Context(), data, hash, p, verityRun(g))
	if err != nil {
		return fmt.Errorf("%s: %w", hashPath, err)
	}
	if out != nil {
		if err := out.Commit(); err != nil {
			return err
		}
	} else if err := hash.Sync(); err != nil {
		return err
	}
	if err := writeRootHashFile(o.rootHashFile, root); err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(newVerityJSON(dataPath, hashPath, &p, &geo, root))
	}
	if !g.quiet {
		printVerityHeader(g.stdout, hashPath, &p, &geo, root)
	}
	return nil
}

// writeRootHashFile writes root, in hex, to path (temp+rename), if path is
// not empty.
func writeRootHashFile(path string, root []byte) error {
	if path == "" {
		return nil
	}
	rf, err := image.CreateOutput(path, true)
	if err != nil {
		return err
	}
	defer rf.Abort()
	if _, err := rf.WriteString(hex.EncodeToString(root)); err != nil {
		return err
	}
	if err := rf.Chmod(0o644); err != nil {
		return err
	}
	return rf.Commit()
}
