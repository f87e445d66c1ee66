package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/cryptimg/cryptimg/image"
)

// partitionFlags are encrypt's and decrypt's --partition mode flags.
type partitionFlags struct {
	index int
	typ   string
	name  string
}

func (p *partitionFlags) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&p.index, "partition", 0, "work on partition N of the disk image only: a GPT partition, or a primary MBR partition (1-4) (see PARTITIONS below)")
	f.StringVar(&p.typ, "partition-type", "", "with --partition: set the partition's type, a GPT type GUID or an MBR type byte in hex such as 83 (default: keep it)")
	f.StringVar(&p.name, "partition-name", "", "with --partition: set the partition's GPT name (default: keep it; an MBR has no names)")
}

// options checks the partition flags and the output format and returns
// them as the library's options.
func (p *partitionFlags) options(cmd *cobra.Command, outputFormat string, clusterSize int64) (image.PartitionOptions, error) {
	o := image.PartitionOptions{Partition: p.index, Type: p.typ, ClusterSize: clusterSize}
	if p.index < 1 {
		return o, usagef("--partition must be a partition number (1 or more)")
	}
	format, err := parseFormat(outputFormat)
	if err != nil {
		return o, err
	}
	o.Format = format
	if cmd.Flags().Changed("partition-name") {
		name := p.name
		o.Name = &name
	}
	return o, nil
}

const partitionHelp = `
PARTITIONS
  With --partition N, INPUT is a partitioned disk image (GPT, or MBR/DOS)
  and OUTPUT a copy of it in which only partition N changes: encrypt turns it
  into a LUKS container of its former contents (the layout cryptsetup
  luksFormat gives it; LUKS1, or LUKS2 with --type luks2), growing it by the
  LUKS payload offset and moving later partitions by that amount rounded up
  to 1 MiB; the partition table is rewritten (both GPT copies; on an MBR only
  the entries that change, boot code and disk signature kept), and the
  partition's type and name are kept unless --partition-type or
  --partition-name is given. decrypt --partition N reverses it byte for byte.

  On an MBR disk N is 1-4 for the primary partitions; logical partitions (5
  on) and the extended partition holding them cannot be encrypted, but an
  extended partition after N moves whole, its logical partitions with it.
  An MBR reaches 2^32 sectors: a layout past that is refused.

  INPUT may be raw or a plain qcow2 image; OUTPUT has INPUT's format unless
  --output-format says otherwise (--cluster-size sets a qcow2 OUTPUT's
  clusters). A qcow2 OUTPUT is a plain qcow2 disk whose partition N holds
  the LUKS container: qcow2's own encryption is not used (so --type luks2
  works here too), qemu attaches the disk without a key and the guest opens
  the partition with cryptsetup.
  Only clusters holding data are stored; the encrypted partition is stored
  whole.
`

// withPartitionEncrypt adds --partition to the encrypt command.
func withPartitionEncrypt(cmd *cobra.Command, g *globalOptions, o *encryptOptions) *cobra.Command {
	return withPartition(cmd, "encrypt", []string{"disk.img disk-encrypted-root.img", "vm.qcow2 vm-encrypted-root.qcow2", "-O raw vm.qcow2 disk-encrypted-root.img"},
		func() bool { return o.inPlace || o.resume },
		func(c *cobra.Command, p partitionFlags, in, out string) error {
			return runEncryptPartition(c, g, *o, p, in, out)
		})
}

// withPartitionDecrypt adds --partition to the decrypt command.
func withPartitionDecrypt(cmd *cobra.Command, g *globalOptions, o *decryptOptions) *cobra.Command {
	return withPartition(cmd, "decrypt", []string{"disk-encrypted-root.img disk.img", "vm-encrypted-root.qcow2 vm.qcow2"},
		func() bool { return o.inPlace || o.resume },
		func(c *cobra.Command, p partitionFlags, in, out string) error {
			return runDecryptPartition(c, g, *o, p, in, out)
		})
}

// withPartition adds the --partition flags to an encrypt or decrypt
// command and sends the command to run when --partition is given;
// conflicts reports flags that cannot go with it.
func withPartition(cmd *cobra.Command, op string, examples []string, conflicts func() bool,
	run func(c *cobra.Command, p partitionFlags, in, out string) error) *cobra.Command {
	var p partitionFlags
	p.addFlags(cmd)
	cmd.Long += partitionHelp
	for _, args := range examples {
		cmd.Example += "\n  cryptimg " + op + " -d key.bin --partition 2 " + args
	}
	next := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !c.Flags().Changed("partition") {
			if c.Flags().Changed("partition-type") || c.Flags().Changed("partition-name") {
				return usagef("--partition-type and --partition-name need --partition")
			}
			return next(c, args)
		}
		if conflicts() {
			return usagef("--partition writes a new disk image: it excludes --in-place and --resume")
		}
		if c.Flags().Lookup("header").Changed {
			return usagef("--partition keeps the header in the partition: it excludes --header")
		}
		if len(args) != 2 {
			return usagef("%s --partition takes INPUT and OUTPUT", op)
		}
		return run(c, p, args[0], args[1])
	}
	return cmd
}

func runEncryptPartition(cmd *cobra.Command, g *globalOptions, o encryptOptions, p partitionFlags, in, out string) error {
	po, err := p.options(cmd, o.outputFormat, o.clusterSize)
	if err != nil {
		return err
	}
	if po.Header, err = o.params(); err != nil {
		return err
	}
	if err := o.newVolumeKey(g, &po.Header); err != nil {
		return err
	}
	defer clear(po.Header.VolumeKey)
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	src, err := openSource(in)
	if err != nil {
		return err
	}
	defer src.Close()
	key, err := readKey(g, o.key, "Enter passphrase for partition "+fmt.Sprint(p.index)+" of "+out+": ", true)
	if err != nil {
		return err
	}
	defer clear(key)
	po.Passphrase = key
	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	prog := g.newProgress("encrypt")
	po.Pipeline = g.pipeline(prog)
	start := time.Now()
	po.HeaderMade = g.kdfDone(&start)
	res, err := image.EncryptPartition(cmd.Context(), dst.File, src, po)
	prog.finish(err == nil)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := dst.Commit(); err != nil {
		return err
	}
	h := res.Header
	return g.report(o.json, summary{
		Op: "encrypt", Input: in, Output: out, Format: string(res.Format),
		Bytes: res.Size - h.Info().PayloadOffset, Seconds: time.Since(start).Seconds(),
		volumeJSON: volumeOf(h, 0),
	})
}

func runDecryptPartition(cmd *cobra.Command, g *globalOptions, o decryptOptions, p partitionFlags, in, out string) error {
	po, err := p.options(cmd, o.outputFormat, o.clusterSize)
	if err != nil {
		return err
	}
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	src, err := openSource(in)
	if err != nil {
		return err
	}
	defer src.Close()
	e, err := image.OpenPartition(src, p.index)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	k, err := unlockImage(g, e, o.key, in, "Enter passphrase for partition "+fmt.Sprint(p.index)+" of "+in+": ", o.keySlot)
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
	po.Pipeline = g.pipeline(prog)
	start := time.Now()
	res, err := image.DecryptPartition(cmd.Context(), dst.File, src, e, k, po)
	prog.finish(err == nil)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := dst.Commit(); err != nil {
		return err
	}
	return g.report(o.json, summary{
		Op: "decrypt", Input: in, Output: out, Format: string(res.Format),
		Bytes: e.PayloadSize, Seconds: time.Since(start).Seconds(),
		volumeJSON: volumeOf(e.Header, k.Slot),
	})
}
