package main

import (
	"fmt"
	"time"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type decryptOptions struct {
	key     keyOptions
	keySlot int
	force   bool
	json    bool
}

func newDecryptCommand(g *globalOptions) *cobra.Command {
	var o decryptOptions
	cmd := &cobra.Command{
		Use:   "decrypt [flags] INPUT OUTPUT",
		Short: "Decrypt a LUKS1 image into a plaintext raw image",
		Long: `Decrypt a LUKS1 aes-cbc-essiv image made by cryptimg, cryptsetup or qemu-img
into a plaintext raw image. Any active key slot may match the key, and any
stored iteration count and hash (sha1, sha256, sha512) is accepted.

OUTPUT is written to a temporary file beside it and renamed only when
complete; runs of zero plaintext are left as holes.
` + exitStatusHelp,
		Example: `  cryptimg decrypt --key-file key.bin disk.luks disk.raw`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDecrypt(cmd, g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot (0-7)")
	f.BoolVarP(&o.force, "force", "f", false, "overwrite OUTPUT if it exists")
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	return cmd
}

func runDecrypt(cmd *cobra.Command, g *globalOptions, o decryptOptions, in, out string) error {
	if o.keySlot < -1 || o.keySlot > 7 {
		return usagef("--key-slot must be between 0 and 7")
	}
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	src, err := openInput(in)
	if err != nil {
		return err
	}
	defer src.Close()
	e, err := image.Open(src)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	key, err := readKey(g, o.key, "Enter passphrase for "+in+": ", false)
	if err != nil {
		return err
	}
	defer clear(key)
	k, err := e.Unlock(key, o.keySlot)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	defer k.Clear()

	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	prog := g.newProgress("decrypt")
	start := time.Now()
	err = e.Decrypt(cmd.Context(), dst.File, k, image.Pipeline{Jobs: g.jobs, Progress: prog.update})
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if err := dst.Commit(); err != nil {
		return err
	}
	h := e.Header
	return g.report(o.json, summary{
		Op: "decrypt", Input: in, Output: out, Format: string(e.Format),
		Bytes: e.PayloadSize, Seconds: time.Since(start).Seconds(),
		Cipher: h.CipherSpec(), KeyBits: int(h.KeyBytes) * 8, Hash: h.HashSpec,
		UUID: h.UUID, KeySlot: k.Slot, PayloadOffset: int64(h.PayloadOffset),
	})
}
