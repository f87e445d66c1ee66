package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errAborted reports a confirmation answered with anything but YES.
var errAborted = errors.New("operation aborted")

// mustConfirm fails unless a destructive operation can be confirmed: with
// --batch-mode it can, on a terminal it will be asked, anywhere else it is
// refused before any secret is read.
func mustConfirm(g *globalOptions, what string) error {
	if g.batch || g.stdinIsTerminal() {
		return nil
	}
	return usagef("%s needs confirmation, and stdin is not a terminal: pass --batch-mode (-q) to proceed without asking", what)
}

// confirm asks on the terminal for a capital YES, as cryptsetup does,
// unless --batch-mode is set. Call mustConfirm first.
func confirm(g *globalOptions, warning string) error {
	if g.batch {
		return nil
	}
	if !g.stdinIsTerminal() {
		return usagef("confirmation needs a terminal: pass --batch-mode (-q) to proceed without asking")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("failed to open the terminal: %w", err)
	}
	defer tty.Close()
	fmt.Fprintf(tty, "\nWARNING!\n========\n%s\n\nAre you sure? (Type 'yes' in capital letters): ", warning)
	line, err := bufio.NewReader(tty).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "YES" {
		return errAborted
	}
	return nil
}

// info prints a status line for humans on stderr unless --quiet.
func info(g *globalOptions, format string, a ...any) {
	if !g.quiet {
		fmt.Fprintf(g.stderr, "cryptimg: "+format+"\n", a...)
	}
}

// openImage opens an encrypted image read-only under a shared lock; errors
// name it. The caller closes the file.
func openImage(g *globalOptions, path string) (*os.File, *image.Encrypted, error) {
	return openEncrypted(g, path, openForRead)
}

// openEncrypted opens path with open and reads its LUKS header; errors name
// the image, and the file is closed on failure. With --header the header
// file is opened instead, as cryptsetup's key and header commands change
// only the header file; path must exist. A header read around a damaged
// or stale LUKS2 copy is warned about.
func openEncrypted(g *globalOptions, path string, open func(string) (*os.File, error)) (*os.File, *image.Encrypted, error) {
	f, e, err := readEncrypted(g, path, open)
	if err == nil {
		warnHeaderCopy(g, f.Name(), e.Header)
	}
	return f, e, err
}

// warnHeaderCopy warns that the LUKS2 header of path was read from its
// secondary copy, the primary being damaged, lost or older, or that its
// secondary is damaged or older: every command works from the good copy,
// writes nothing it would not write otherwise, and repair rewrites both.
func warnHeaderCopy(g *globalOptions, path string, h header.Header) {
	if l2, ok := h.(*header.LUKS2); ok && l2.Warning != "" {
		fmt.Fprintf(g.stderr, "cryptimg: warning: %s: %s; run cryptimg repair\n", path, l2.Warning)
	}
}

// readEncrypted is openEncrypted without the warning.
func readEncrypted(g *globalOptions, path string, open func(string) (*os.File, error)) (*os.File, *image.Encrypted, error) {
	hdr := g.header != ""
	path, err := headerPath(g, path)
	if err != nil {
		return nil, nil, err
	}
	f, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	var e *image.Encrypted
	if hdr {
		e, err = image.OpenHeader(f)
	} else {
		e, err = image.Open(f)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, image.ErrDetached) {
			err = fmt.Errorf("%w; name it with --header HEADER and give the data file as the image", err)
		}
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	e.AllowNullCipher = g.nullOK
	return f, e, nil
}

// headerPath is the file a header-only command works on: the --header file
// if one is given (the image must exist, as cryptsetup requires the device),
// else the image.
func headerPath(g *globalOptions, image string) (string, error) {
	if g.header == "" {
		return image, nil
	}
	if _, err := os.Stat(image); err != nil {
		return "", err
	}
	return g.header, nil
}

// openWithHeader reads the encrypted image f, with its header in hdr if
// that is not nil.
func openWithHeader(f, hdr *os.File) (*image.Encrypted, error) {
	if hdr != nil {
		return image.OpenDetached(hdr, f)
	}
	return image.Open(f)
}

// openImageRW opens an encrypted image for a header update, locked
// against other cryptimg processes (exit 5 if one holds it).
func openImageRW(g *globalOptions, path string) (*os.File, *image.Encrypted, error) {
	return openEncrypted(g, path, openLocked)
}

// openRW opens an existing regular file read-write.
func openRW(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return f, nil
}

// newKeyOptions are the --new-key-file flags of the key being set.
// newKeyArg takes the new key file from a second positional argument, as
// cryptsetup's luksAddKey and luksChangeKey do.
func newKeyArg(k *keyOptions, args []string) error {
	if len(args) < 2 {
		return nil
	}
	if k.keyFile != "" {
		return usagef("give the new key file either as an argument or with --new-key-file, not both")
	}
	k.keyFile = args[1]
	return nil
}

func addNewKeyFlags(f *pflag.FlagSet, k *keyOptions) {
	k.newKey = true
	f.StringVar(&k.keyFile, "new-key-file", "", "read the new key from FILE as raw bytes (- for stdin)")
	// cryptsetup's spelling (luksAddKey --new-keyfile, cryptsetup 2.6),
	// beside its --new-keyfile-offset and --new-keyfile-size.
	f.StringVar(&k.keyFile, "new-keyfile", "", "alias of --new-key-file")
	f.MarkHidden("new-keyfile")
	f.Int64Var(&k.keyfileOffset, "new-keyfile-offset", 0, "skip this many bytes at the start of the new key file")
	f.Int64Var(&k.keyfileSize, "new-keyfile-size", 0, "read at most this many bytes of the new key file (0 = all)")
}

// forceIterationsUsage is the help of --pbkdf-force-iterations, whose
// minimum depends on the KDF, as cryptsetup's (lib/utils_pbkdf.c
// verify_pbkdf_params with the limits of crypt_pbkdf_get_limits).
const forceIterationsUsage = "use exactly this cost instead of benchmarking: for pbkdf2 (LUKS1, or --pbkdf pbkdf2) the iterations, at least 1000; for argon2 (LUKS2's default) the passes over --pbkdf-memory, at least 4"

// pbkdfOptions are the cost flags of a new key slot.
type pbkdfOptions struct {
	iterTime        int
	forceIterations uint32
	pbkdf           string
	memory          uint32
	parallel        uint32
}

func (p *pbkdfOptions) addFlags(f *pflag.FlagSet) {
	f.IntVarP(&p.iterTime, "iter-time", "i", 2000, "KDF time for the new key slot, in milliseconds")
	f.Uint32Var(&p.forceIterations, "pbkdf-force-iterations", 0, forceIterationsUsage)
	f.StringVar(&p.pbkdf, "pbkdf", "", "LUKS2 key slot KDF: argon2id (default), argon2i or pbkdf2 (LUKS1: pbkdf2 only)")
	f.Uint32Var(&p.memory, "pbkdf-memory", 0, "argon2 memory in KiB (default 1 GiB, at most half of the RAM)")
	f.Uint32Var(&p.parallel, "pbkdf-parallel", 0, "argon2 threads (default up to 4, at most the CPUs)")
}

// slotOptions checks the flags that need no header; the header checks the
// rest (the KDF its version has, and the cost's minimum).
func (p pbkdfOptions) slotOptions(slot int) (image.SlotOptions, error) {
	if p.iterTime <= 0 {
		return image.SlotOptions{}, usagef("--iter-time must be positive")
	}
	if err := checkPBKDF(p.pbkdf); err != nil {
		return image.SlotOptions{}, err
	}
	return image.SlotOptions{Slot: slot, IterTime: time.Duration(p.iterTime) * time.Millisecond, ForceIterations: p.forceIterations,
		PBKDF: p.pbkdf, PBKDFMemory: p.memory, PBKDFParallel: p.parallel}, nil
}

// checkKeySources refuses two keys read from stdin.
func checkKeySources(a, b keyOptions) error {
	if a.keyFile == "-" && b.keyFile == "-" {
		return usagef("only one key can be read from stdin")
	}
	return nil
}

type addKeyOptions struct {
	key, newKey   keyOptions
	volumeKeyFile string
	masterKeyFile string
	keySlot       int
	pbkdf         pbkdfOptions
	priority      string
	json          bool
}

func newAddKeyCommand(g *globalOptions) *cobra.Command {
	var o addKeyOptions
	cmd := &cobra.Command{
		Use:   "add-key [flags] IMAGE [NEW_KEY_FILE]",
		Short: "Add a passphrase or key file to a free key slot",
		Long: `Add a key to a free key slot of a LUKS1, LUKS2 or qcow2+LUKS image, as
"cryptsetup luksAddKey" does. An existing key (--key-file, or a prompt)
or the volume key (--volume-key-file) unlocks the image; the new key comes
from --new-key-file, the NEW_KEY_FILE argument, or a prompt (asked twice
unless --batch-mode).

The new key material is written and synced before the header that
activates it, and the image is reopened and unlocked with the new key
before success is reported; a crash at any moment leaves the existing keys
working.
` + exitStatusHelp,
		Example: `  cryptimg add-key -d old.key --new-key-file new.key disk.luks
  cryptimg add-key -d old.key -S 5 --iter-time 1000 disk.luks new.key`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newKeyArg(&o.newKey, args); err != nil {
				return err
			}
			return runAddKey(g, o, args[0])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	addNewKeyFlags(f, &o.newKey)
	f.StringVar(&o.volumeKeyFile, "volume-key-file", "", "unlock with the raw volume key in FILE instead of a passphrase")
	f.StringVar(&o.masterKeyFile, "master-key-file", "", "unlock with the volume key derived from the master secret in FILE and the image's UUID (an image made with encrypt --master-key-file; not cryptsetup's old alias of --volume-key-file)")
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "put the new key into this slot (default: the first free one)")
	f.StringVar(&o.priority, "priority", "", "LUKS2: the new slot's priority, ignore, normal or prefer (default normal)")
	f.BoolVar(&o.json, "json", false, "print the new key slot as JSON on stdout")
	o.pbkdf.addFlags(f)
	return cmd
}

func runAddKey(g *globalOptions, o addKeyOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	prio, ok := priorities[o.priority]
	if o.priority != "" && !ok {
		return usagef("unknown --priority %q: use ignore, normal or prefer", o.priority)
	}
	so, err := o.pbkdf.slotOptions(o.keySlot)
	if err != nil {
		return err
	}
	if err := checkKeySources(o.key, o.newKey); err != nil {
		return err
	}
	if (o.volumeKeyFile != "" || o.masterKeyFile != "") && o.key.keyFile != "" || o.volumeKeyFile != "" && o.masterKeyFile != "" {
		return usagef("--key-file, --volume-key-file and --master-key-file exclude each other")
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	var k *image.Key
	if o.volumeKeyFile != "" || o.masterKeyFile != "" {
		var vk []byte
		if o.masterKeyFile != "" {
			i := e.Header.Info()
			vk, err = deriveVolumeKey(g, o.masterKeyFile, i.UUID, i.KeyBytes)
		} else {
			vk, err = readKeyFile(g, keyOptions{keyFile: o.volumeKeyFile})
		}
		if err != nil {
			return err
		}
		k, err = e.KeyFromVolumeKey(vk)
		clear(vk)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	} else {
		if k, err = unlockImage(g, e, o.key, path, "Enter any existing passphrase: ", -1); err != nil {
			return err
		}
	}
	defer k.Clear()
	newKey, err := readKey(g, o.newKey, "Enter new passphrase for key slot: ", !g.batch)
	if err != nil {
		return err
	}
	defer clear(newKey)
	if o.priority != "" {
		if _, isLUKS2 := e.Header.(*header.LUKS2); !isLUKS2 {
			return usagef("--priority needs a LUKS2 image")
		}
	}
	slot, err := e.AddKey(k, newKey, so)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if o.priority != "" && prio != header.PriorityNormal {
		// A second header update: a crash before it leaves the new slot
		// working at normal priority.
		if err := e.Apply(e.Header.(*header.LUKS2).WithPriority(slot, prio)); err != nil {
			return fmt.Errorf("%s: key slot %d created, but setting its priority failed: %w", path, slot, err)
		}
	}
	return reportSlot(g, o.json, slotJSON{MessageType: "add-key", Image: path, KeySlot: slot}, "key slot %d created", slot)
}

type removeOptions struct {
	key       keyOptions
	allowLast bool
	json      bool
}

const allowLastHelp = "allow removing the last active key slot, which makes the image permanently undecryptable"

func newRemoveKeyCommand(g *globalOptions) *cobra.Command {
	var o removeOptions
	cmd := &cobra.Command{
		Use:   "remove-key [flags] IMAGE",
		Short: "Remove the key slot a passphrase opens",
		Long: `Remove the key slot that the given key opens, as "cryptsetup luksRemoveKey"
does: the slot is disabled in the header, then its key material is
overwritten with random bytes.

The operation asks for confirmation on a terminal unless --batch-mode is
given, and is refused on a non-terminal without --batch-mode. Removing the
last active key slot also needs --allow-last-slot.
` + exitStatusHelp,
		Example: `  cryptimg remove-key -q -d old.key disk.luks`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRemoveKey(g, o, args[0])
		},
	}
	o.key.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.allowLast, "allow-last-slot", false, allowLastHelp)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the removed key slot as JSON on stdout")
	return cmd
}

func runRemoveKey(g *globalOptions, o removeOptions, path string) error {
	if err := mustConfirm(g, "remove-key"); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := readKey(g, o.key, "Enter passphrase to be deleted: ", false)
	if err != nil {
		return err
	}
	slot, err := e.TestKey(key, -1)
	clear(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return killSlot(g, e, path, slot, o, "remove-key")
}

// killSlot checks the last-slot rule, confirms, removes the slot and
// reports it as command op.
func killSlot(g *globalOptions, e *image.Encrypted, path string, slot int, o removeOptions, op string) error {
	allowLast := o.allowLast
	warning := fmt.Sprintf("This removes key slot %d of %s.", slot, path)
	if e.Header.ActiveSlots() == 1 {
		if !allowLast {
			return usagef("%s: key slot %d is the last active one: removing it makes the image permanently undecryptable (pass --allow-last-slot to do it anyway)", path, slot)
		}
		warning += "\nThis is the last key slot: the image becomes permanently undecryptable."
	}
	if err := confirm(g, warning); err != nil {
		return err
	}
	if err := e.KillSlot(slot, image.RemoveOptions{AllowLast: allowLast}); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return reportSlot(g, o.json, slotJSON{MessageType: op, Image: path, KeySlot: slot}, "key slot %d removed", slot)
}

func newKillSlotCommand(g *globalOptions) *cobra.Command {
	var o removeOptions
	cmd := &cobra.Command{
		Use:   "kill-slot [flags] IMAGE SLOT",
		Short: "Remove a key slot by number",
		Long: `Remove key slot SLOT (0-7 for LUKS1, 0-31 for LUKS2), as "cryptsetup luksKillSlot" does: the slot is
disabled in the header, then its key material is overwritten with random
bytes.

A remaining key must be given (--key-file, or the prompt) and must open
another active slot (or SLOT itself if it is the last one); with
--batch-mode and no --key-file the check is skipped, as in cryptsetup.
The operation asks for confirmation on a terminal unless --batch-mode is
given, and is refused on a non-terminal without --batch-mode. Removing the
last active key slot also needs --allow-last-slot.
` + exitStatusHelp,
		Example: `  cryptimg kill-slot -q -d remaining.key disk.luks 3`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runKillSlot(g, o, args[0], args[1])
		},
	}
	o.key.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.allowLast, "allow-last-slot", false, allowLastHelp)
	cmd.Flags().BoolVar(&o.json, "json", false, "print the removed key slot as JSON on stdout")
	return cmd
}

func runKillSlot(g *globalOptions, o removeOptions, path, slotArg string) error {
	var slot int
	if _, err := fmt.Sscan(slotArg, &slot); err != nil || slot < 0 || slot >= header.MaxSlots || fmt.Sprint(slot) != slotArg {
		return usagef("invalid key slot %q (want 0 to %d)", slotArg, header.MaxSlots-1)
	}
	if err := mustConfirm(g, "kill-slot"); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	if !e.Header.SlotActive(slot) {
		return fmt.Errorf("%s: key slot %d: %w", path, slot, image.ErrSlotInactive)
	}
	last := e.Header.ActiveSlots() == 1
	if last && !o.allowLast {
		return usagef("%s: key slot %d is the last active one: removing it makes the image permanently undecryptable (pass --allow-last-slot to do it anyway)", path, slot)
	}
	if !g.batch || o.key.keyFile != "" {
		key, err := readKey(g, o.key, "Enter any remaining passphrase: ", false)
		if err != nil {
			return err
		}
		err = checkRemaining(e, key, slot, last)
		clear(key)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	return killSlot(g, e, path, slot, o, "kill-slot")
}

// checkRemaining checks that key opens an active slot other than slot, or
// slot itself when it is the last one (cryptsetup verify_keyslot).
func checkRemaining(e *image.Encrypted, key []byte, slot int, last bool) error {
	if last {
		_, err := e.TestKey(key, slot)
		return err
	}
	for i := range e.Header.NumSlots() {
		if i == slot || !e.Header.SlotActive(i) {
			continue
		}
		_, err := e.TestKey(key, i)
		if err == nil {
			return nil
		}
		if !errors.Is(err, header.ErrNoMatchingKeyslot) {
			return err
		}
	}
	return header.ErrNoMatchingKeyslot
}

type changeKeyOptions struct {
	key, newKey keyOptions
	keySlot     int
	pbkdf       pbkdfOptions
	json        bool
}

func newChangeKeyCommand(g *globalOptions) *cobra.Command {
	var o changeKeyOptions
	cmd := &cobra.Command{
		Use:   "change-key [flags] IMAGE [NEW_KEY_FILE]",
		Short: "Replace a passphrase or key file",
		Long: `Replace a key, as "cryptsetup luksChangeKey" does for LUKS1: the new key goes
into the first free key slot, the image is reopened and unlocked with it,
and only then is the old slot disabled and its key material overwritten
with random bytes. A crash at any moment leaves the old key working until
the new one is durable. --key-slot restricts which slot the old key is
tried against.

If all eight slots are in use, the old slot is overwritten in place, as
cryptsetup does; a crash in the middle of that loses the key, so it asks
for confirmation on a terminal, and is refused on a non-terminal unless
--batch-mode is given.
` + exitStatusHelp,
		Example: `  cryptimg change-key -d old.key --new-key-file new.key disk.luks`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := newKeyArg(&o.newKey, args); err != nil {
				return err
			}
			return runChangeKey(g, o, args[0])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	addNewKeyFlags(f, &o.newKey)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try the old key only against this slot (0-7 for LUKS1, 0-31 for LUKS2)")
	f.BoolVar(&o.json, "json", false, "print the old and the new key slot as JSON on stdout")
	o.pbkdf.addFlags(f)
	return cmd
}

func runChangeKey(g *globalOptions, o changeKeyOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	so, err := o.pbkdf.slotOptions(-1)
	if err != nil {
		return err
	}
	if err := checkKeySources(o.key, o.newKey); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	inPlace := e.Header.FirstFreeSlot() < 0
	if inPlace {
		if err := mustConfirm(g, "change-key with all key slots in use (an in-place overwrite)"); err != nil {
			return err
		}
	}
	k, err := unlockImage(g, e, o.key, path, "Enter passphrase to be changed: ", o.keySlot)
	if err != nil {
		return err
	}
	defer k.Clear()
	if inPlace {
		if err := confirm(g, fmt.Sprintf("All key slots of %s are in use, so key slot %d is overwritten in place.\nIf the process dies in the middle, that key is lost.", path, k.Slot)); err != nil {
			return err
		}
	}
	newKey, err := readKey(g, o.newKey, "Enter new passphrase: ", !g.batch)
	if err != nil {
		return err
	}
	defer clear(newKey)
	to, err := e.ChangeKey(k, newKey, image.ChangeOptions{SlotOptions: so, InPlace: inPlace})
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	from := k.Slot
	s := slotJSON{MessageType: "change-key", Image: path, KeySlot: to, OldKeySlot: &from}
	if to == from {
		return reportSlot(g, o.json, s, "key slot %d changed", to)
	}
	return reportSlot(g, o.json, s, "key slot %d changed: the new key is in key slot %d", from, to)
}

type testKeyOptions struct {
	key     keyOptions
	keySlot int
	json    bool
}

func newTestKeyCommand(g *globalOptions) *cobra.Command {
	var o testKeyOptions
	cmd := &cobra.Command{
		Use:   "test-key [flags] IMAGE",
		Short: "Check a passphrase or key file without decrypting anything",
		Long: `Check that a key opens a key slot of the image, as "cryptsetup open
--test-passphrase" does. Nothing is decrypted or written. Exits 0 if the key
matches, 2 if it does not, 1 if no active slot could be tried.
` + exitStatusHelp,
		Example: `  cryptimg test-key -d key.bin disk.luks && echo ok`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTestKey(g, o, args[0])
		},
	}
	o.key.addFlags(cmd.Flags())
	cmd.Flags().IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot (0-7 for LUKS1, 0-31 for LUKS2)")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the key slot the key opens as JSON on stdout")
	return cmd
}

func runTestKey(g *globalOptions, o testKeyOptions, path string) error {
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	f, e, err := openImage(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	key, err := readKey(g, o.key, passPrompt(path), false)
	if err != nil {
		return err
	}
	slot, err := e.TestKey(key, o.keySlot)
	clear(key)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return reportSlot(g, o.json, slotJSON{MessageType: "test-key", Image: path, KeySlot: slot}, "key slot %d unlocked", slot)
}
