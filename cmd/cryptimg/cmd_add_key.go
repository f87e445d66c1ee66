package main

import (
	"fmt"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

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
	o.key.tokens = addTokenFlags(f)
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
