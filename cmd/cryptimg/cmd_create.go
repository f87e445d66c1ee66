package main

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type createOptions struct {
	encryptOptions
	size string
}

// createSummary is create's --json summary: encrypt's, with the virtual
// size in place of the input.
type createSummary struct {
	MessageType string  `json:"message_type"`
	Op          string  `json:"op"`
	Output      string  `json:"output"`
	Header      string  `json:"header,omitempty"`
	Format      string  `json:"format"`
	Size        int64   `json:"size"`
	Seconds     float64 `json:"seconds"`
	volumeJSON
}

func newCreateCommand(g *globalOptions) *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [flags] --size N OUTPUT",
		Short: "Make a new, empty LUKS1, LUKS2 or qcow2+LUKS image of a given size",
		Long: `Make a new encrypted image of virtual size N with the key in key slot 0,
reading no input. N takes the suffixes K, M, G and T (powers of 1024, as
qemu-img); it must be a whole number of ` + strconv.Itoa(image.SectorSize) + `-byte sectors (of the sector size
for LUKS2, of 4096 bytes with --integrity).

A raw OUTPUT is what "cryptsetup luksFormat" makes of a file of the payload
offset plus N bytes: the header and key slots, then N bytes of payload left
as a hole. Like luksFormat, create does not write the payload, so until
something writes it, it decrypts to garbage, not to zeros.

A qcow2 OUTPUT (-O qcow2, LUKS1) has no data cluster allocated: qemu and
cryptimg read it as zeros.

With --type luks2 --integrity every sector's tag has to be written (a
sector never written fails its check in the kernel), so create seals zeros
over the whole size; this takes as long as encrypting N bytes, and the
image reads as zeros.

The key and cipher flags are encrypt's. OUTPUT is written to a temporary
file beside it and renamed only when complete; an existing OUTPUT is
refused without --force.
` + exitStatusHelp,
		Example: `  cryptimg create -d key.bin --size 10G disk.luks
  cryptimg create -d key.bin --size 20G -O qcow2 vm.qcow2
  cryptimg create -d key.bin --type luks2 --integrity hmac-sha256 --size 1G disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return usagef("create needs --size N")
			}
			return runCreate(cmd, g, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.size, "size", "", "virtual size of the new image in bytes, or with a suffix K, M, G or T (powers of 1024)")
	o.key.addFlags(f)
	o.addHeaderFlags(f)
	return cmd
}

// checkSize refuses what image.Create would, before any secret is read:
// its size rules, and a version the output format cannot carry.
func checkSize(arg string, eo image.EncryptOptions) (int64, error) {
	size, err := parseSize(arg)
	if err != nil {
		return 0, usagef("--size: %v", err)
	}
	if err := image.CheckCreate(size, eo); err != nil {
		if errors.Is(err, image.ErrLUKS2Qcow2) {
			return 0, usagef("-O %s: %v; use --type %s", eo.Format, err, luksType(1))
		}
		return 0, usagef("--size %d: %v", size, err)
	}
	return size, nil
}

// refuseExisting refuses an existing path without --force, before any
// secret is asked for.
func refuseExisting(path string, force bool) error {
	if force {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		return usagef("%s: %w", path, image.ErrExists) // hint adds the flag
	}
	return nil
}

func runCreate(cmd *cobra.Command, g *globalOptions, o createOptions, out string) error {
	params, err := o.params()
	if err != nil {
		return err
	}
	format, err := parseFormat(o.outputFormat)
	if err != nil {
		return err
	}
	format = formatOr(format, image.Raw)
	size, err := checkSize(o.size, image.EncryptOptions{Header: params, Format: format})
	if err != nil {
		return err
	}
	if format == image.Qcow2 && g.header != "" {
		return usagef("--header makes a raw output only")
	}
	if err := refuseExisting(out, o.force); err != nil {
		return err
	}
	if g.header != "" {
		if samePath(out, g.header) {
			return usagef("--header %s: %v", g.header, image.ErrSameFile)
		}
		if err := refuseExisting(g.header, o.force); err != nil {
			return err
		}
	}
	if err := o.newVolumeKey(g, &params); err != nil {
		return err
	}
	defer clear(params.VolumeKey)
	key, err := readKey(g, o.key, "Enter passphrase for "+out+": ", true)
	if err != nil {
		return err
	}
	defer clear(key)

	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	eo := image.EncryptOptions{Header: params, Passphrase: key, Format: format, ClusterSize: o.clusterSize}
	var hdr *image.Output
	if g.header != "" {
		hd, hdone, err := createOutput(g, g.header, o.force)
		if err != nil {
			return err
		}
		defer hdone()
		hdr, eo.HeaderFile = hd, hd.File
	}
	prog := g.newProgress("create")
	eo.Pipeline = g.pipeline(prog)
	start := time.Now()
	h, err := image.Create(cmd.Context(), dst.File, size, eo)
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if err := commitOutputs(dst, hdr); err != nil {
		return err
	}
	s := createSummary{MessageType: "summary", Op: "create", Output: out, Header: g.header, Format: string(format),
		Size: size, Seconds: time.Since(start).Seconds(), volumeJSON: volumeOf(h, 0)}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	info(g, "created %s (%s, %s, %s, %d-bit key, key slot 0) in %.2fs",
		out, humanBytes(size), format, s.Cipher, s.KeyBits, s.Seconds)
	return nil
}
