package main

import (
	"fmt"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/spf13/cobra"
)

// encryptVerity is encrypt --verity: the dm-verity tree of the output,
// made in the encryption's pass, into a hash file of its own.
type encryptVerity struct {
	hashPath, rootHashFile string

	out  *image.Output
	done func()
	ev   *image.EncryptVerity
}

const encryptVerityHelp = `
--verity HASH also builds the dm-verity hash tree of OUTPUT as it is
written, in the same pass (no second read), into the new file HASH: a
veritysetup superblock (sha256, 4096-byte blocks, random salt and UUID, as
"veritysetup format" makes them) and the tree. The tree covers the whole
raw LUKS image, header and ciphertext, for a stack of verity then crypt:
dm-verity opens OUTPUT with HASH and the root hash, and dm-crypt opens the
verity device. The root hash is printed ("Root hash:"), is in --json's
"verity" object, and goes to --root-hash-file. "veritysetup verify OUTPUT
HASH ROOT" and "cryptimg verity verify" check it without the key. Raw
outputs only, not with --integrity; OUTPUT must be whole 4096-byte blocks
(the payload offset and the input size).
`

// withEncryptVerity adds --verity and --root-hash-file to the encrypt
// command, and refuses them with the forms that make no new raw file.
func withEncryptVerity(cmd *cobra.Command, o *encryptOptions) *cobra.Command {
	cmd.Flags().StringVar(&o.verity.hashPath, "verity", "", "also write the dm-verity tree of OUTPUT (header and ciphertext), made in the same pass, to this new file")
	cmd.Flags().StringVar(&o.verity.rootHashFile, "root-hash-file", "", "with --verity: also write the root hash, in hex, to this file")
	cmd.Long += encryptVerityHelp
	cmd.Example += "\n  cryptimg encrypt -d key.bin --verity disk.verity --root-hash-file disk.roothash disk.raw disk.luks"
	next := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		v := &o.verity
		if v.hashPath == "" {
			if v.rootHashFile != "" {
				return usagef("--root-hash-file needs --verity")
			}
			return next(c, args)
		}
		switch {
		case c.Flags().Changed("partition"):
			return usagef("--verity covers a whole LUKS image: it excludes --partition")
		case o.inPlace || o.resume:
			return usagef("--verity builds the tree of a new image: it excludes --in-place and --resume")
		case len(args) == 2 && (args[0] == stdio || args[1] == stdio):
			return usagef("--verity needs INPUT and OUTPUT files, not standard input or output")
		}
		return next(c, args)
	}
	return cmd
}

// start checks --verity's files and creates the hash file: called by
// runEncrypt once the output is known (format, header parameters).
func (v *encryptVerity) start(g *globalOptions, in, out string, format image.Format, p *header.Params, force bool) error {
	if v.hashPath == "" {
		return nil
	}
	if format != image.Raw {
		return usagef("--verity makes the tree of a raw image: the output format is %s", format)
	}
	if p.Integrity != "" {
		return usagef("--verity excludes --integrity: dm-integrity already authenticates every sector")
	}
	for _, other := range []string{in, out, g.header} {
		if other != "" && (other == v.hashPath || image.SameFile(other, v.hashPath)) {
			return usagef("--verity %s: the hash file must be a file of its own", v.hashPath)
		}
	}
	if err := checkOutputPath(in, v.hashPath, force); err != nil {
		return err
	}
	params, err := verity.NewParams(0)
	if err != nil {
		return err
	}
	hf, done, err := createOutput(g, v.hashPath, force)
	if err != nil {
		return err
	}
	v.out, v.done = hf, done
	v.ev = &image.EncryptVerity{Hash: hf.File, Params: params, Options: verityRun(g)}
	return nil
}

// close removes an uncommitted hash file.
func (v *encryptVerity) close() {
	if v.done != nil {
		v.done()
	}
}

// commit renames the hash file into place, writes --root-hash-file and
// returns --json's verity object; it prints the root hash unless json or
// quiet.
func (v *encryptVerity) commit(g *globalOptions, out string, asJSON bool) (*verityJSON, error) {
	if v.ev == nil {
		return nil, nil
	}
	if err := v.out.Commit(); err != nil {
		return nil, err
	}
	root := v.ev.Root
	if err := writeRootHashFile(v.rootHashFile, root); err != nil {
		return nil, err
	}
	p := v.ev.Params
	geo, err := p.Geometry()
	if err != nil {
		return nil, err
	}
	j := newVerityJSON(out, v.hashPath, &p, &geo, root)
	if !asJSON && !g.quiet {
		fmt.Fprintf(g.stdout, "Root hash:      \t%x\n", root)
	}
	return &j, nil
}
