package main

import (
	"github.com/spf13/cobra"
)

// The background child of open --background finds the volume key on fd 3,
// reports readiness on fd 4, and finds the image, opened and locked by its
// parent, on fd 5 (and a detached header on fd 6); this variable tells it
// that it is one.
const openChildEnv = "CRYPTIMG_OPEN_CHILD"

const (
	openChildImageFD  = 5
	openChildHeaderFD = 6
)

// fuseName is the filesystem type suffix of our mounts ("fuse.cryptimg"),
// how close and the stale-mount check recognise them.
const fuseName = "cryptimg"

type openOptions struct {
	key        keyOptions
	keySlot    int
	readOnly   bool
	background bool
	verity     verityOpenOptions
}

func newOpenCommand(g *globalOptions) *cobra.Command {
	var o openOptions
	cmd := &cobra.Command{
		Use:   "open [flags] IMAGE MOUNTPOINT",
		Short: "Mount the plaintext of an encrypted image as a file, through FUSE",
		Long: `Mount, through FUSE, a directory at MOUNTPOINT holding one file: the plaintext
of IMAGE, named after IMAGE with the extension .raw. Reads decrypt and writes
encrypt in place, so no plaintext is written to disk. Use the file like any
disk image: losetup, qemu, dd conv=notrunc. Its size is fixed.

open runs in the foreground until "cryptimg close MOUNTPOINT", SIGINT or
SIGTERM unmounts it; with --background it returns once the mount is ready.
As root it mounts directly; otherwise it needs fusermount3 (Debian: fuse3).
A mount left behind by a killed open is cleared by the next open or close.

The image stays locked while mounted: read-write, no other command may open
it; read-only, readers and other read-only mounts may, writers may not. A
conflicting command exits 5 naming the mount point.

With --verity-hash FILE (or --verity-hash-offset N for a tree inside the
plaintext) and --root-hash, every block read is checked against the
dm-verity tree made by "cryptimg verity format", as dm-verity does: a block
that does not match fails the read with EIO. The tree may cover the
plaintext or the encrypted image file itself (a tree covering more than the
plaintext holds). The mount is then read-only, and IMAGE may also be a
plain raw image (no key is asked for). With --root-hash and --partition N
alone, the file is partition N of the GPT disk inside, checked against the
tree in the verity partition whose UUID is the root hash's last 128 bits
(as "verity format --partition" makes them and systemd finds them).
` + exitStatusHelp,
		Example: `  cryptimg open --background -d key.bin disk.luks /mnt/disk
  losetup -f --show /mnt/disk/disk.raw
  cryptimg close /mnt/disk`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOpen(cmd.Context(), g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.key.tokens = addTokenFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot ("+slotRange()+")")
	f.BoolVarP(&o.readOnly, "read-only", "r", false, "mount read-only: the image is never written")
	f.BoolVar(&o.background, "background", false, "return once mounted, serving from a background process")
	o.verity.addFlags(f)
	f.IntVar(&o.verity.partition, "partition", 0, "with --root-hash alone: mount partition N of the GPT disk, checked against the tree in the partition whose UUID is the root hash's last 128 bits")
	return cmd
}
