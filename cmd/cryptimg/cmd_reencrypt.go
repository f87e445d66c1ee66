package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type reencryptOptions struct {
	key     keyOptions
	keep    []string
	keySize int
	cipher  string
	hash    string
	pbkdf   pbkdfOptions
	resume  bool
	hotzone int64
	jsonOut bool
	// masterKeyFile derives the new volume key from a master secret and
	// the new UUID, uuid (default with a master: a fresh random one).
	masterKeyFile string
	uuid          string
}

func newReencryptCommand(g *globalOptions) *cobra.Command {
	var o reencryptOptions
	cmd := &cobra.Command{
		Use:   "reencrypt [flags] IMAGE",
		Short: "Give a LUKS1, LUKS2 or qcow2+LUKS image a new volume key, in place",
		Long: `Replace the volume key of a raw LUKS1 or LUKS2 or a qcow2+LUKS image: every encrypted
sector is decrypted with the old key and encrypted with a new random one where
it lies (for qcow2, the allocated data clusters), then a new header replaces
the old one. Changing passphrases does not change the volume key; this does.

The new key goes into the key slots opened by --key-file and by each
--keep-key-file; every other key slot is removed, after confirmation on a
terminal or with --batch-mode. --cipher, --key-size and --hash may change the
cipher, the key size and the hash of the new header; a new --cipher without
--key-size gets that cipher's default key size.

The operation is crash-safe. Progress is kept in IMAGE.cryptimg-journal (mode
0600; it holds the new key only wrapped by your passphrase), and the header
is marked meanwhile so that cryptsetup and qemu refuse the image: LUKS1 with
the magic LUKS\xde\xad, as cryptsetup marks a LUKS1 device during its
reencryption, LUKS2 with the mandatory requirement cryptimg-busy-v1 (cryptsetup
then refuses to activate it or change its metadata). A LUKS2 image keeps its
label, subsystem, sector size, flags, token (without the removed key slots)
and key slot priorities; its new key slots use --pbkdf (` + header.KDFs(2)[0] + ` by default).

The UUID stays unless --uuid gives a new one. --master-key-file derives the
new volume key from the master secret in FILE and the image's new UUID, as
encrypt, create and clone do, and gives the image a fresh random UUID unless
--uuid says otherwise: a derived key is a function of master and UUID, so the
same master and UUID would give back the same key. With --uuid set to the
image's own UUID the image keeps it, and reencrypt refuses a master that
gives the key the image already has (the one it was made with). add-key
--master-key-file then restores access with the master alone.

If the run is interrupted (Ctrl-C, kill, power loss), run the same command
again, or with --resume, with the same key files: it continues where it
stopped (with the UUID and key it started with; another --master-key-file is
refused). Until then cryptimg refuses other writes to the image (exit 5).
Keep the journal with the image.
` + exitStatusHelp + `  5    busy: the image has an unfinished reencrypt or in-place operation
`,
		Example: `  cryptimg reencrypt -d key.bin disk.luks
  cryptimg reencrypt -d key.bin --keep-key-file colleague.key -q vm.qcow2
  cryptimg reencrypt -d key.bin --master-key-file master.key --json disk.luks
  cryptimg reencrypt -d key.bin --resume disk.luks`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runReencrypt(cmd, g, o, args[0])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.key.tokens = addTokenFlags(f)
	f.StringArrayVar(&o.keep, "keep-key-file", nil, "also keep the key slot this key file opens (repeatable)")
	f.StringVarP(&o.cipher, "cipher", "c", "", "new cipher specification: "+strings.Join(cipher.Supported(), ", ")+" (default: unchanged)")
	f.IntVarP(&o.keySize, "key-size", "s", 0, "new volume key size in bits, one the cipher takes (default: unchanged, or the new cipher's default)")
	f.StringVar(&o.hash, "hash", "", "new hash for PBKDF2 and the AF splitter: "+orList(header.Hashes())+" (default: unchanged)")
	o.pbkdf.addFlags(f)
	f.BoolVar(&o.resume, "resume", false, "only continue an interrupted reencryption; fail if there is none")
	f.Int64Var(&o.hotzone, "hotzone-size", 0, "bytes converted per crash-safe step, a multiple of "+strconv.Itoa(image.SectorSize)+" (default 8 MiB)")
	f.BoolVar(&o.jsonOut, "json", false, "print a JSON summary on stdout")
	f.StringVar(&o.masterKeyFile, "master-key-file", "", "derive the new volume key from the master secret in FILE and the new UUID (HKDF-SHA512; a fresh random UUID unless --uuid)")
	f.StringVar(&o.uuid, "uuid", "", "UUID of the new header (default: unchanged; with --master-key-file a fresh random one)")
	return cmd
}

func checkHotzone(n int64) error {
	if n < 0 || n%image.SectorSize != 0 {
		return usagef("--hotzone-size must be a positive multiple of %d", image.SectorSize)
	}
	return nil
}

func runReencrypt(cmd *cobra.Command, g *globalOptions, o reencryptOptions, path string) error {
	// Without --key-size the library keeps the key size, or gives a new
	// cipher its default one.
	keyBytes := o.keySize / 8
	if o.cipher != "" && !authSpec(o.cipher) {
		if _, err := cipherChoice(o.cipher, o.keySize, ""); err != nil {
			return err
		}
	} else if o.cipher == "" && o.keySize%8 != 0 {
		// Otherwise the image's cipher decides; header.Format checks it.
		return usagef("unsupported --key-size %d", o.keySize)
	}
	if o.hash != "" {
		if err := checkHash(o.hash); err != nil {
			return err
		}
	}
	if err := checkHotzone(o.hotzone); err != nil {
		return err
	}
	if o.uuid != "" {
		if _, err := header.CanonicalUUID(o.uuid); err != nil {
			return usagef("--uuid %s: %v", o.uuid, err)
		}
	}
	if o.masterKeyFile == stdio && (o.key.keyFile == stdio || slices.Contains(o.keep, stdio)) {
		return usagef("only one key can be read from stdin")
	}
	so, err := o.pbkdf.slotOptions(-1)
	if err != nil {
		return err
	}
	f, resuming, err := lockOp(path, image.OpReencrypt, o.resume)
	if err != nil {
		return err
	}
	defer f.Close()
	var hdr *os.File
	if g.header != "" {
		// The detached header changes too: locked like the image.
		if hdr, err = openForWrite(g.header); err != nil {
			return err
		}
		defer hdr.Close()
	}
	if !resuming {
		e, err := openWithHeader(f, hdr)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		// Slots will be removed unless every active one is given a key:
		// refuse before reading secrets if that cannot be confirmed.
		if e.Header.ActiveSlots() > 1+len(o.keep) {
			if err := mustConfirm(g, "reencrypt (it removes the key slots whose keys are not given)"); err != nil {
				return err
			}
		}
	} else {
		info(g, "resuming the unfinished reencryption of %s", path)
	}
	var passes [][]byte
	defer func() {
		for _, p := range passes {
			clear(p)
		}
	}()
	te, _ := openWithHeader(f, hdr) // tokens, when it opens (not while resuming)
	key, err := readKeyFor(g, te, o.key, path, "Enter passphrase for "+path+": ", -1)
	if err != nil {
		return err
	}
	passes = append(passes, key)
	for _, kf := range o.keep {
		if kf == "-" && o.key.keyFile == "-" {
			return usagef("only one key can be read from stdin")
		}
		k, err := readKeyFile(g, keyOptions{keyFile: kf})
		if err != nil {
			return fmt.Errorf("--keep-key-file %s: %w", kf, err)
		}
		passes = append(passes, k)
	}
	uuid := o.uuid
	var deriveKey func(string, int) ([]byte, error)
	if o.masterKeyFile != "" {
		m, err := readMaster(g, o.masterKeyFile)
		if err != nil {
			return err
		}
		defer m.Clear()
		deriveKey = m.VolumeKey
		if uuid == "" && !resuming {
			// A key derived from the same master and UUID would be the
			// old one if the image was made with this master.
			if uuid, err = header.RandomUUID(nil); err != nil {
				return err
			}
		}
	}
	prog := g.newProgress("reencrypt")
	start := time.Now()
	ro := image.ReencryptOptions{
		UUID: uuid, VolumeKey: deriveKey,
		Passphrases: passes, Cipher: o.cipher, KeyBytes: keyBytes, Hash: o.hash,
		IterTime: so.IterTime, ForceIterations: so.ForceIterations,
		PBKDF: so.PBKDF, PBKDFMemory: so.PBKDFMemory, PBKDFParallel: so.PBKDFParallel,
		Confirm: func(removed []int) error {
			if len(removed) == 0 {
				return nil
			}
			return confirm(g, fmt.Sprintf("This will reencrypt %s with a new volume key and remove key slots %v, whose keys were not given.", path, removed))
		},
		InPlaceOptions: image.InPlaceOptions{Window: o.hotzone, Resume: o.resume, Pipeline: g.pipeline(prog), AllowCost: g.slowKDF},
	}
	if hdr != nil {
		ro.Header = hdr
	}
	r, err := image.Reencrypt(cmd.Context(), f, image.Sidecar(path), ro)
	prog.finish(err == nil)
	if errors.Is(err, image.ErrSameVolumeKey) {
		return fmt.Errorf("%s: %w: the image's key was derived from this --master-key-file and UUID %s; leave out --uuid for a fresh UUID, or use another master", path, err, uuid)
	}
	if err != nil {
		return interrupted(path, "reencrypt", err)
	}
	return reportInPlace(g, o.jsonOut, path, r, time.Since(start))
}

// authSpec reports a cipher specification only an authenticated mode has
// ("aes-gcm-random"): for an image with integrity, the library checks the
// pair of --cipher and the image's integrity.
func authSpec(spec string) bool {
	if _, err := cipher.Parse(spec); err == nil {
		return false
	}
	for _, n := range cipher.SupportedAuth() {
		if s, _, _ := strings.Cut(n, " + "); s == spec {
			return true
		}
	}
	return false
}
