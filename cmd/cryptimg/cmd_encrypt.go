package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type encryptOptions struct {
	key             keyOptions
	volumeKeyFile   string
	masterKeyFile   string
	cipher          string
	keySize         int
	hash            string
	iterTime        int
	forceIterations uint32
	uuid            string
	alignPayload    uint32
	force           bool
	json            bool
	outputFormat    string
	clusterSize     int64
	inPlace         bool
	resume          bool
	hotzone         int64
	verity          encryptVerity
	luks2Options
}

func newEncryptCommand(g *globalOptions) *cobra.Command {
	var o encryptOptions
	cmd := &cobra.Command{
		Use:   "encrypt [flags] INPUT OUTPUT",
		Short: "Encrypt a plaintext raw or qcow2 image into a LUKS1, LUKS2 or qcow2+LUKS image",
		Long: `Encrypt a plaintext raw or qcow2 disk image (detected by its magic).

A raw output is a LUKS1 image laid out exactly as "cryptsetup luksFormat
--type luks1" lays it out: key slot 0 holds the key, the payload starts at a
1 MiB boundary, and cryptsetup, dm-crypt and qemu open the result.

A qcow2 output is an encrypted qcow2 (encrypt.format=luks) that qemu boots:
the LUKS1 header lives in its own clusters, only clusters holding non-zero
data are stored, and each is encrypted with IV sector = host offset / ` + strconv.Itoa(image.SectorSize) + `.

The output format defaults to the input's. A raw INPUT must be a whole
number of ` + strconv.Itoa(image.SectorSize) + `-byte sectors. OUTPUT is written to a temporary file beside it
and renamed only when complete.
` + exitStatusHelp,
		Example: `  cryptimg encrypt --key-file key.bin disk.raw disk.luks
  cryptimg encrypt -d key.bin --progress json disk.raw disk.luks
  cryptimg encrypt -d key.bin vm.qcow2 vm-encrypted.qcow2
  cryptimg encrypt -d key.bin --output-format qcow2 disk.raw vm-encrypted.qcow2`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.inPlace || o.resume {
				if len(args) != 1 {
					return usagef("--in-place takes one argument, IMAGE")
				}
				return runEncryptInPlace(cmd, g, o, args[0])
			}
			if len(args) != 2 {
				return usagef("encrypt takes INPUT and OUTPUT (or --in-place IMAGE)")
			}
			return runEncrypt(cmd, g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.addHeaderFlags(f)
	f.BoolVar(&o.inPlace, "in-place", false, "encrypt the raw image IMAGE where it lies (crash-safe, resumable; see cryptimg reencrypt --help)")
	f.BoolVar(&o.resume, "resume", false, "with --in-place: only continue an interrupted run")
	f.Int64Var(&o.hotzone, "hotzone-size", 0, "with --in-place: bytes per crash-safe step (default 8 MiB, at most the payload offset)")
	return withEncryptVerity(withPartitionEncrypt(cmd, g, &o), &o)
}

func runEncrypt(cmd *cobra.Command, g *globalOptions, o encryptOptions, in, out string) error {
	if in == stdio || out == stdio {
		return runEncryptStream(cmd, g, o, in, out)
	}
	params, err := o.params()
	if err != nil {
		return err
	}
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	if err := checkHeaderOutput(g.header, in, out, o.force); err != nil {
		return err
	}
	src, err := openSource(in)
	if err != nil {
		return err
	}
	defer src.Close()
	format, err := parseFormat(o.outputFormat)
	if err != nil {
		return err
	}
	plain, err := image.OpenPlain(src)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := refuseLUKS(src, in, o.force, "encrypting it would encrypt it twice; pass --force to do so"); err != nil {
		return err
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
	if err := o.verity.start(g, in, out, formatOr(format, plain.Format), &params, o.force); err != nil {
		return err
	}
	defer o.verity.close()
	eo := image.EncryptOptions{
		Header:      params,
		Passphrase:  key,
		Format:      format,
		ClusterSize: o.clusterSize,
		Verity:      o.verity.ev,
	}
	var hdr *image.Output
	if g.header != "" {
		if formatOr(format, plain.Format) != image.Raw {
			return usagef("--header makes a raw output only")
		}
		hd, hdone, err := createOutput(g, g.header, o.force)
		if err != nil {
			return err
		}
		defer hdone()
		hdr, eo.HeaderFile = hd, hd.File
	}
	prog := g.newProgress("encrypt")
	eo.Pipeline = g.pipeline(prog)
	start := time.Now()
	eo.HeaderMade = g.kdfDone(&start)
	h, err := image.Encrypt(cmd.Context(), dst.File, plain, eo)
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if err := commitOutputs(dst, hdr); err != nil {
		return err
	}
	vj, err := o.verity.commit(g, out, o.json)
	if err != nil {
		return err
	}
	return g.report(o.json, summary{
		Op: "encrypt", Input: in, Output: out, Format: string(formatOr(format, plain.Format)),
		Bytes: plain.Size, Seconds: time.Since(start).Seconds(),
		volumeJSON: volumeOf(h, 0), Verity: vj,
	})
}
