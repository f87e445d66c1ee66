package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type decryptOptions struct {
	key          keyOptions
	keySlot      int
	force        bool
	json         bool
	outputFormat string
	clusterSize  int64
	inPlace      bool
	resume       bool
	hotzone      int64
	allowCorrupt bool
}

func newDecryptCommand(g *globalOptions) *cobra.Command {
	var o decryptOptions
	cmd := &cobra.Command{
		Use:   "decrypt [flags] INPUT OUTPUT",
		Short: "Decrypt a LUKS1, LUKS2 or qcow2+LUKS image into a plaintext raw or qcow2 image",
		Long: `Decrypt a LUKS1 or LUKS2 image, raw or qcow2+LUKS, made by cryptimg,
cryptsetup or qemu-img, with any cipher cryptimg supports, into a plaintext raw
or qcow2 image (by default the input's format). Any active key slot may match
the key, and any stored KDF cost and hash (` + orList(header.Hashes()) + `) is accepted.
--in-place decrypts a raw LUKS1 or LUKS2 image where it lies.

OUTPUT is written to a temporary file beside it and renamed only when
complete; zero plaintext stays sparse (holes in raw output, unallocated
clusters in qcow2 output).
` + exitStatusHelp,
		Example: `  cryptimg decrypt --key-file key.bin disk.luks disk.raw`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.inPlace || o.resume {
				if len(args) != 1 {
					return usagef("--in-place takes one argument, IMAGE")
				}
				return runDecryptInPlace(cmd, g, o, args[0])
			}
			if len(args) != 2 {
				return usagef("decrypt takes INPUT and OUTPUT (or --in-place IMAGE)")
			}
			return runDecrypt(cmd, g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.key.tokens = addTokenFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot ("+slotRange()+")")
	f.BoolVarP(&o.force, "force", "f", false, "overwrite OUTPUT if it exists")
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	f.StringVarP(&o.outputFormat, "output-format", "O", "", "output format: raw or qcow2 (default: the input's)")
	f.Int64Var(&o.clusterSize, "cluster-size", 0, "cluster size of a qcow2 output in bytes (default: the input's, or 65536)")
	f.BoolVar(&o.inPlace, "in-place", false, "decrypt the raw LUKS image IMAGE where it lies (crash-safe, resumable; see cryptimg reencrypt --help)")
	f.BoolVar(&o.resume, "resume", false, "with --in-place: only continue an interrupted run")
	f.Int64Var(&o.hotzone, "hotzone-size", 0, "with --in-place: bytes per crash-safe step (default 8 MiB, at most the payload offset)")
	f.BoolVar(&o.allowCorrupt, "allow-corrupt", false, "with integrity protection: write sectors that fail their check as zeros, list them, and keep the output")
	return withPartitionDecrypt(cmd, g, &o)
}

func runDecrypt(cmd *cobra.Command, g *globalOptions, o decryptOptions, in, out string) error {
	if in == stdio || out == stdio || isNullDevice(out) {
		if o.allowCorrupt && in == stdio {
			return usagef("--allow-corrupt is for images with integrity protection, which need a seekable file")
		}
		return runDecryptStream(cmd, g, o, in, out)
	}
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	format, err := parseFormat(o.outputFormat)
	if err != nil {
		return err
	}
	src, err := openSource(in)
	if err != nil {
		return err
	}
	defer src.Close()
	e, closeHeader, err := openData(g, src, in)
	if err != nil {
		return err
	}
	defer closeHeader()
	k, err := unlockImage(g, e, o.key, in, passPrompt(in), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()

	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	prog := g.newProgress("decrypt")
	start := time.Now()
	err = e.DecryptTo(cmd.Context(), dst.File, k, image.DecryptOptions{
		Format: format, ClusterSize: o.clusterSize,
		Pipeline: g.pipeline(prog), AllowCorrupt: o.allowCorrupt,
	})
	var bad *image.CorruptError
	if errors.As(err, &bad) {
		if o.allowCorrupt {
			err = nil // written, with zeros for the bad sectors
		} else {
			err = fmt.Errorf("%s: %w", in, err)
		}
	}
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if err := dst.Commit(); err != nil {
		return err
	}
	s := summary{
		Op: "decrypt", Input: in, Output: out, Format: string(formatOr(format, e.Format)),
		Bytes: e.PayloadSize, Seconds: time.Since(start).Seconds(),
		volumeJSON: volumeOf(e.Header, k.Slot),
	}
	if bad != nil {
		s.Corrupt = corruptOf(bad)
		g.warnZeroed(bad, in, out)
	}
	return g.report(o.json, s)
}
