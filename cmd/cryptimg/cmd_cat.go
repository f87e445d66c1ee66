package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

func newCatCommand(g *globalOptions) *cobra.Command {
	var o lsOptions
	cmd := &cobra.Command{
		Use:   "cat [flags] IMAGE PART:PATH",
		Short: "Print a file from inside an encrypted image",
		Long: `Print the file at PATH in the filesystem of partition PART (0 = the whole
disk) inside an encrypted image to stdout. With --json, print one JSON object
with the content in base64.

The image is decrypted in memory as it is read: no plaintext is written to
disk, and the image is opened read-only.

With --verity-hash FILE (or --verity-hash-offset N, the tree inside the
image) and --root-hash, every block read is checked against the dm-verity
tree, as the kernel does: a bad block exits 4 naming it. The tree may cover
the plaintext, the encrypted image file, or a plain raw image (no key).
With --root-hash alone, partition PART of a GPT disk is checked against the
tree in the partition whose UUID is the root hash's last 128 bits.
` + exitStatusHelp,
		Example: `  cryptimg cat -d key.bin disk.luks 2:/etc/hostname`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCat(g, o, args[0], args[1])
		},
	}
	o.addFlags(cmd)
	return cmd
}

// catJSON is the output of cat --json.
type catJSON struct {
	Partition int    `json:"partition"`
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Content   []byte `json:"content"` // base64
}

func runCat(g *globalOptions, o lsOptions, img, spec string) (err error) {
	if !strings.Contains(spec, ":") {
		return usagef("%q: want PART:PATH", spec)
	}
	part, p, err := parsePartSpec(spec)
	if err != nil {
		return err
	}
	if p == "." {
		return usagef("%q: PATH is missing", spec)
	}
	o.verity.partition = part
	d, err := openPlainDisk(g, o, img)
	if err != nil {
		return err
	}
	defer d.Close()
	defer func() { err = d.cause(err, spec) }()
	fsys, err := filesystemOf(d.Disk, part)
	if err != nil {
		return err
	}
	st, err := statPath(fsys, part, p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%d:%s: is a directory", part, displayPath(p))
	}
	f, err := fsys.Open(p)
	if err != nil {
		return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
	}
	defer f.Close()
	if o.json {
		b, err := io.ReadAll(f)
		if err != nil {
			return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
		}
		return json.NewEncoder(g.stdout).Encode(catJSON{Partition: part, Path: displayPath(p), Size: int64(len(b)), Content: b})
	}
	if _, err := io.Copy(g.stdout, f); err != nil {
		return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
	}
	return nil
}
