package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type cloneOptions struct {
	encryptOptions            // the clone's header; key is the source's key
	newKey         keyOptions // the clone's passphrase; default the source's
	keep           []string
	keySlot        int
}

// cloneSummary is clone's --json summary.
type cloneSummary struct {
	MessageType string  `json:"message_type"`
	Op          string  `json:"op"`
	Input       string  `json:"input"`
	Output      string  `json:"output"`
	Format      string  `json:"format"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	SourceUUID  string  `json:"source_uuid"`
	KeySlots    []int   `json:"key_slots"`
	volumeJSON
}

func newCloneCommand(g *globalOptions) *cobra.Command {
	var o cloneOptions
	cmd := &cobra.Command{
		Use:   "clone [flags] SOURCE OUTPUT",
		Short: "Make a per-instance copy of an encrypted image with a new volume key and UUID, in one pass",
		Long: `Make a copy of the encrypted image SOURCE (raw LUKS1/LUKS2 or qcow2+LUKS) under
a new header: a new volume key and UUID, the data decrypted with the old key
and encrypted with the new one in memory, so no plaintext reaches the disk.
A qcow2 copy stays sparse. This is the per-instance copy of a golden image.

The source is unlocked with --key-file (or a prompt). The copy gets the
passphrase in --new-key-file, or the source's own, in key slot 0; each
--keep-key-file, which must open a slot of the source, gets a slot of its
own too. The copy keeps the source's LUKS version, cipher, key size, hash,
sector size and integrity protection unless the flags (encrypt's) say
otherwise; --master-key-file derives its volume key from a master secret
and its new UUID.

OUTPUT is written to a temporary file beside it and renamed only when
complete.
` + exitStatusHelp,
		Example: `  cryptimg clone -d golden.key --new-key-file vm42.key golden.luks vm42.luks
  cryptimg clone -d golden.key --master-key-file master.key golden.qcow2 vm42.qcow2
  cryptimg clone -d golden.key --type luks2 --cipher aes-xts-plain64 golden.luks vm42.luks`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runClone(cmd, g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.key.tokens = addTokenFlags(f)
	addNewKeyFlags(f, &o.newKey)
	o.addHeaderFlags(f)
	f.StringArrayVar(&o.keep, "keep-key-file", nil, "also give the copy the key in this file, which must open a slot of SOURCE (repeatable)")
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "unlock SOURCE with this key slot only")
	return cmd
}

// inheritSource fills the header flags the user left alone from the
// source's header.
func (o *cloneOptions) inheritSource(cmd *cobra.Command, i header.Info) {
	fl := cmd.Flags()
	if !fl.Changed("type") {
		o.luksType = "luks" + strconv.Itoa(i.Version)
	}
	if !fl.Changed("cipher") {
		o.cipher = i.Cipher
		if !fl.Changed("key-size") {
			bits := i.KeyBytes * 8
			if i.Integrity != "" {
				if m, err := cipher.ParseAuth(i.Cipher, i.Integrity); err == nil {
					bits -= m.MACKeyBytes * 8
				}
			}
			o.keySize = bits
		}
	}
	if !fl.Changed("hash") {
		o.hash = i.Hash
	}
	if o.luksType == luksType(2) {
		if !fl.Changed("sector-size") && i.Version == 2 {
			o.sectorSize = i.SectorSize
		}
		if !fl.Changed("integrity") && i.Integrity != "" {
			for _, opt := range cipher.IntegrityOptions() {
				if t, _ := cipher.IntegrityType(opt); t == i.Integrity {
					o.integrity = opt
				}
			}
		}
	}
}

func runClone(cmd *cobra.Command, g *globalOptions, o cloneOptions, in, out string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	if in == stdio || out == stdio {
		return usagef("clone reads and writes files; streams are for encrypt and decrypt")
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
	o.inheritSource(cmd, e.Header.Info())
	params, err := o.params()
	if err != nil {
		return err
	}
	if cmd.Flags().Changed("uuid") && strings.EqualFold(params.UUID, e.Header.Info().UUID) {
		return usagef("--uuid %s is the source's: a clone needs a UUID of its own", params.UUID)
	}
	k, err := unlockImage(g, e, o.key, in, passPrompt(in), o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	pass, err := o.clonePassphrase(g, in)
	if err != nil {
		return err
	}
	defer clear(pass)
	var keep [][]byte
	defer func() {
		for _, p := range keep {
			clear(p)
		}
	}()
	for _, kf := range o.keep {
		p, err := readKeyFile(g, keyOptions{keyFile: kf})
		if err != nil {
			return fmt.Errorf("--keep-key-file %s: %w", kf, err)
		}
		keep = append(keep, p)
		e.AllowNullCipher = g.nullOK
		kk, err := e.Unlock(p, -1)
		if err != nil {
			return fmt.Errorf("--keep-key-file %s: %w", kf, err)
		}
		kk.Clear()
	}
	if err := o.newVolumeKey(g, &params); err != nil {
		return err
	}
	defer clear(params.VolumeKey)
	if err := e.Format.CarriesVersion(params.Version); err != nil && format == "" {
		return usagef("%v: give -O raw for a LUKS%d copy", err, params.Version)
	}
	fh, err := image.FormatHeader(pass, params)
	if err != nil {
		return err
	}
	defer fh.Clear()
	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	prog := g.newProgress("clone")
	start := time.Now()
	err = e.Clone(cmd.Context(), src, dst.File, k, fh, image.EncryptOptions{Format: format, ClusterSize: o.clusterSize, Pipeline: g.pipeline(prog)})
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	slots := []int{0}
	if len(keep) > 0 {
		ce, err := image.Open(dst.File)
		if err != nil {
			return fmt.Errorf("%s: reading the copy back: %w", out, err)
		}
		so, err := o.pbkdfSlotOptions()
		if err != nil {
			return err
		}
		for _, p := range keep {
			slot, err := ce.AddKey(fh.Key, p, so)
			if err != nil {
				return fmt.Errorf("%s: %w", out, err)
			}
			slots = append(slots, slot)
		}
	}
	if err := dst.Commit(); err != nil {
		return err
	}
	s := cloneSummary{MessageType: "summary", Op: "clone", Input: in, Output: out, Format: string(formatOr(format, e.Format)),
		Bytes: e.PayloadSize, Seconds: time.Since(start).Seconds(), SourceUUID: e.Header.Info().UUID, KeySlots: slots,
		volumeJSON: volumeOf(fh.Header, 0)}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	info(g, "cloned %s to %s (%s, %s, new %d-bit key, UUID %s, key slots %v) in %.2fs",
		in, out, humanBytes(s.Bytes), s.Cipher, s.KeyBits, s.UUID, slots, s.Seconds)
	return nil
}

// clonePassphrase is the passphrase of the copy's slot 0: --new-key-file,
// else the source's own key file, else a prompt.
func (o cloneOptions) clonePassphrase(g *globalOptions, in string) ([]byte, error) {
	if o.newKey.keyFile != "" {
		if o.newKey.keyFile == stdio && o.key.keyFile == stdio {
			return nil, usagef("only one key can be read from stdin")
		}
		return readKeyFile(g, o.newKey)
	}
	if o.key.keyFile != "" && o.key.keyFile != stdio {
		return readKeyFile(g, o.key)
	}
	return readKey(g, o.newKey, "Enter passphrase for the copy of "+in+": ", true)
}

// pbkdfSlotOptions is the cost of the kept keys' slots: the clone's KDF
// flags.
func (o cloneOptions) pbkdfSlotOptions() (image.SlotOptions, error) {
	p := pbkdfOptions{iterTime: o.iterTime, forceIterations: o.forceIterations, pbkdf: o.pbkdf, memory: o.pbkdfMemory, parallel: o.pbkdfParallel}
	return p.slotOptions(-1)
}
