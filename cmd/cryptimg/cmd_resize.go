package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type resizeOptions struct {
	size          string
	force         bool
	allowDataLoss bool
	key           keyOptions
	json          bool
}

// resizeSummary is resize's --json summary.
type resizeSummary struct {
	MessageType  string `json:"message_type"`
	Op           string `json:"op"`
	Image        string `json:"image"`
	Header       string `json:"header,omitempty"`
	Format       string `json:"format"`
	OldSize      int64  `json:"old_size"`
	NewSize      int64  `json:"new_size"`
	Changed      bool   `json:"changed"`
	FixedSegment bool   `json:"fixed_segment"`
}

func newResizeCommand(g *globalOptions) *cobra.Command {
	var o resizeOptions
	cmd := &cobra.Command{
		Use:   "resize [flags] --size [+|-]N IMAGE",
		Short: "Grow or shrink a raw LUKS or qcow2+LUKS image in place",
		Long: `Set the virtual (plaintext) size of IMAGE to N bytes, as create's --size
gives it: the size of the decrypted disk, not of the file. N takes the
suffixes K, M, G and T (powers of 1024) and must be a whole number of the
image's sectors (` + sectorSizesHelp + `).
+N and -N grow or shrink the image by N, as qemu-img resize takes them. The
same size changes nothing.

Growing a raw LUKS1 or LUKS2 image extends the file as a sparse hole, like
truncating a file under cryptsetup: the new part decrypts to garbage, not
to zeros, until something writes it. A LUKS2 data segment of fixed size
(not "dynamic") gets its new size in both metadata copies, after the file
has grown. Growing a qcow2 image adds unallocated clusters, which read as
zeros, and a larger L1 table when the old one is full; when the old size
ends inside a stored cluster, the rest of that cluster is overwritten with
encrypted zeros first, which needs the key (--key-file, or the prompt).

Shrinking cuts off everything past N and needs --force. A raw image is
truncated (a fixed LUKS2 segment is shrunk in the metadata first). A qcow2
image with clusters holding data past N is refused unless
--allow-data-loss is given as well; the clusters are then released and the
file cut after the last one in use.

Each step is synced and a kill at any moment leaves the old or the new
size, both readable; a qcow2 image may then hold leaked clusters, which
qemu-img check -r leaks reclaims. The image is locked against other
cryptimg processes while it changes. Images with integrity protection
(--integrity) are refused: their tags and journal would have to be laid
out again. With a detached header (--header FILE, raw images only) IMAGE
is the data file: it is resized, and a fixed segment's new size is
written to FILE.
` + exitStatusHelp,
		Example: `  cryptimg resize --size 20G disk.luks
  cryptimg resize --size +10G disk.luks
  cryptimg resize -d key.bin --size 40G vm.qcow2
  cryptimg resize --force --size 1G --json disk.luks
  cryptimg resize --header disk.hdr --size 20G disk.data`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("size") {
				return usagef("resize needs --size N")
			}
			return runResize(g, o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.size, "size", "", "new virtual (plaintext) size in bytes, or with a suffix K, M, G or T (powers of 1024); +N or -N to grow or shrink by N")
	f.BoolVar(&o.force, "force", false, "allow shrinking: the data past the new size is lost")
	f.BoolVar(&o.allowDataLoss, "allow-data-loss", false, "with --force, shrink a qcow2 image even when clusters past the new size hold data")
	o.key.addFlags(f)
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	return cmd
}

// parseResize parses resize's --size: N, or +N or -N (qemu-img resize's
// relative form), each with create's suffixes; sign is 0 for N.
func parseResize(s string) (n int64, sign int64, err error) {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		sign = 1
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	n, err = parseSize(s)
	return n, sign, err
}

func runResize(g *globalOptions, o resizeOptions, path string) error {
	size, sign, err := parseResize(o.size)
	if err != nil {
		return usagef("--size: %v", err)
	}
	switch {
	case size <= 0 && sign == 0:
		return usagef("--size must be positive, not %d", size)
	case size%image.SectorSize != 0:
		return usagef("--size must be a multiple of %d bytes, not %d", image.SectorSize, size)
	case o.allowDataLoss && !o.force:
		return usagef("--allow-data-loss only goes with --force")
	}
	f, err := openLocked(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var hf *os.File
	if g.header != "" {
		if hf, err = openLocked(g.header); err != nil {
			return err
		}
		defer hf.Close()
	}
	e, err := openWithHeader(f, hf)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if sign != 0 {
		size = e.PayloadSize + sign*size
		if size <= 0 {
			return usagef("--size %s: the image holds %d bytes, so the new size would not be positive", o.size, e.PayloadSize)
		}
	}
	if ss := int64(e.Header.Info().SectorSize); size%ss != 0 {
		return usagef("--size %d is not a multiple of the image's %d-byte sector size", size, ss)
	}
	if size < e.PayloadSize && !o.force {
		return usagef("%s: shrinking from %d to %d bytes cuts off the data past the new size; pass --force to shrink", path, e.PayloadSize, size)
	}
	ro := image.ResizeOptions{Shrink: o.force, DataLoss: o.allowDataLoss}
	if o.key.keyFile != "" {
		// A key given is checked before anything changes.
		if ro.Key, err = unlockImage(g, e, o.key, path, "Enter passphrase for "+path+": ", -1); err != nil {
			return err
		}
		defer ro.Key.Clear()
	}
	r, err := e.Resize(size, ro)
	if errors.Is(err, image.ErrKeyNeeded) && ro.Key == nil {
		if ro.Key, err = unlockImage(g, e, o.key, path, "Enter passphrase for "+path+": ", -1); err != nil {
			return fmt.Errorf("%s: %w: %w", path, image.ErrKeyNeeded, err)
		}
		defer ro.Key.Clear()
		r, err = e.Resize(size, ro)
	}
	switch {
	case errors.Is(err, image.ErrDataLoss):
		return usagef("%s: %v; pass --allow-data-loss to drop them", path, err)
	case err != nil:
		return fmt.Errorf("%s: %w", path, err)
	}
	s := resizeSummary{MessageType: "summary", Op: "resize", Image: path, Header: g.header, Format: string(r.Format),
		OldSize: r.OldSize, NewSize: r.NewSize, Changed: r.Changed(), FixedSegment: r.FixedSegment}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	if !r.Changed() {
		info(g, "%s: already %s (%d bytes), nothing to do", path, humanBytes(size), size)
		return nil
	}
	what := string(r.Format)
	if r.FixedSegment {
		what += ", fixed LUKS2 segment updated"
	}
	from, to := humanBytes(r.OldSize), humanBytes(r.NewSize)
	if from == to {
		from, to = fmt.Sprintf("%d bytes", r.OldSize), fmt.Sprintf("%d bytes", r.NewSize)
	}
	info(g, "resized %s from %s to %s (%s)", path, from, to, what)
	return nil
}
