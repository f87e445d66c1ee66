package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/spf13/cobra"
)

func newVerityVerifyCommand(g *globalOptions) *cobra.Command {
	var o verityOptions
	var po verityPartitionOptions
	cmd := &cobra.Command{
		Use:   "verify [flags] DATA HASH [ROOTHASH] | --partition N [flags] IMAGE [ROOTHASH]",
		Short: "Check DATA and its dm-verity hash tree against a root hash",
		Long: `Recompute the dm-verity hash tree of DATA and compare it with HASH and the
root hash (ROOTHASH in hex, or --root-hash-file), as "veritysetup verify"
does, on every core. The parameters come from HASH's superblock, or with
--no-superblock from the flags, which must then repeat format's.

Exit status 4 names the first bad block: the one nearest the root (a hash
block and its level, level 0 holding the data blocks' digests), else the
first data block.

With --partition N, IMAGE is a raw GPT disk image and N the data partition;
the hash partition is M with --hash-partition M, else the one whose UUID is
the root hash's last 128 bits, and then N's UUID must be its first 128 bits,
as systemd finds them (exit 4 if not).
` + exitStatusHelp,
		Example: `  cryptimg verity verify root.img root.verity $(cat root.hash)
  cryptimg verity verify root.img root.verity --root-hash-file root.hash`,
		Args: cobra.RangeArgs(1, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("partition") {
				return runVerityVerifyPartition(cmd, g, &o, &po, args)
			}
			if len(args) < 2 {
				return usagef("give DATA and HASH, or --partition N and IMAGE")
			}
			return runVerityVerify(cmd, g, &o, args)
		},
	}
	addTreeFlags(cmd, &o)
	cmd.Flags().StringVar(&o.rootHashFile, "root-hash-file", "", "read the root hash, in hex, from this file")
	cmd.Flags().IntVar(&po.data, "partition", 0, "IMAGE is a GPT disk: check its partition N")
	cmd.Flags().IntVar(&po.hash, "hash-partition", 0, "with --partition: the tree is in partition M (default: the partition whose UUID is the root hash's last 128 bits)")
	return cmd
}

func runVerityVerify(cmd *cobra.Command, g *globalOptions, o *verityOptions, args []string) error {
	dataPath, hashPath := args[0], args[1]
	root, err := rootHashArg(o, args, 2)
	if err != nil {
		return err
	}
	if !o.noSuperblock {
		for _, name := range []string{"hash", "data-block-size", "hash-block-size", "data-blocks", "salt", "format"} {
			if cmd.Flags().Changed(name) {
				return usagef("--%s is for --no-superblock: the superblock holds it", name)
			}
		}
	}
	data, hash, _, err := openVerityFiles(dataPath, hashPath, false)
	if err != nil {
		return err
	}
	defer data.Close()
	defer hash.Close()
	var p verity.Params
	if o.noSuperblock {
		if p, err = paramsFromFlags(cmd, o); err != nil {
			return err
		}
		if !cmd.Flags().Changed("salt") {
			p.Salt = nil
		}
	} else if p, err = verity.ReadSuperblock(hash, o.hashOffset); err != nil {
		return fmt.Errorf("%s: %w", hashPath, err)
	}
	if p.DataBlocks == 0 {
		// --no-superblock without --data-blocks: all of DATA, as format.
		size, err := statSize(data)
		if err != nil {
			return err
		}
		if err := p.SetDataSize(size); err != nil {
			return fmt.Errorf("%s: %w", dataPath, err)
		}
	}
	geo, err := p.Geometry()
	if err != nil {
		return err
	}
	if err := verity.Verify(cmd.Context(), data, hash, p, root, verityRun(g)); err != nil {
		var ce *verity.CorruptError
		var se *verity.SizeError
		if errors.As(err, &ce) && ce.Level < 0 || errors.As(err, &se) && se.Data {
			return fmt.Errorf("%s: %w", dataPath, err)
		}
		return fmt.Errorf("%s: %w", hashPath, err)
	}
	if o.json {
		j := newVerityJSON(dataPath, hashPath, &p, &geo, root)
		j.OK = true
		return json.NewEncoder(g.stdout).Encode(j)
	}
	return nil
}

// rootHashArg is the root hash: args[i] if given, else --root-hash-file.
func rootHashArg(o *verityOptions, args []string, i int) ([]byte, error) {
	var rootHex string
	switch {
	case len(args) > i && o.rootHashFile != "":
		return nil, usagef("give the root hash as ROOTHASH or --root-hash-file, not both")
	case len(args) > i:
		rootHex = args[i]
	case o.rootHashFile != "":
		b, err := os.ReadFile(o.rootHashFile)
		if err != nil {
			return nil, err
		}
		rootHex = strings.TrimSpace(string(b))
	default:
		return nil, usagef("give the root hash as ROOTHASH or --root-hash-file")
	}
	root, err := hex.DecodeString(rootHex)
	if err != nil {
		return nil, usagef("root hash %q is not hex", rootHex)
	}
	return root, nil
}
