package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"text/tabwriter"
	"time"

	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/spf13/cobra"
)

func newLsCommand(g *globalOptions) *cobra.Command {
	var o lsOptions
	cmd := &cobra.Command{
		Use:   "ls [flags] IMAGE [PART[:PATH]]",
		Short: "List the partitions of an encrypted image, or a directory inside it",
		Long: `List the partitions (GPT or MBR) of the disk inside an encrypted image, or,
with PART, the files of the filesystem in partition PART (FAT12/16/32, ext4,
ISO9660 or squashfs) at PATH (default: the root). PART 0 is the whole disk,
for images holding a filesystem without a partition table.

The image is decrypted in memory as it is read: no plaintext is written to
disk, and the image is opened read-only.

With --verity-hash FILE (or --verity-hash-offset N, the tree inside the
image) and --root-hash, every block read is checked against the dm-verity
tree, as the kernel does: a bad block exits 4 naming it. The tree may cover
the plaintext, the encrypted image file, or a plain raw image (no key).
With --root-hash alone, partition PART of a GPT disk is checked against the
tree in the partition whose UUID is the root hash's last 128 bits.
` + exitStatusHelp,
		Example: `  cryptimg ls -d key.bin disk.luks
  cryptimg ls -d key.bin disk.luks 2:/etc
  cryptimg ls -d key.bin --json disk.luks 1`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := ""
			if len(args) == 2 {
				spec = args[1]
			}
			return runLs(g, o, args[0], spec)
		},
	}
	o.addFlags(cmd)
	return cmd
}

// entryJSON is one file in ls IMAGE PART[:PATH] --json output.
type entryJSON struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
}

// dirJSON is the output of ls IMAGE PART[:PATH] --json.
type dirJSON struct {
	Partition  int         `json:"partition"`
	Path       string      `json:"path"`
	Filesystem string      `json:"filesystem"`
	Entries    []entryJSON `json:"entries"`
}

func entryOf(name string, st fs.FileInfo) entryJSON {
	e := entryJSON{Name: name, Size: st.Size(), Mode: st.Mode().String(), ModTime: st.ModTime().UTC()}
	switch m := st.Mode(); {
	case st.IsDir():
		e.Type = "dir"
		e.Size = 0
	case m&fs.ModeSymlink != 0:
		e.Type = "symlink"
	case m.IsRegular():
		e.Type = "file"
	default:
		e.Type = "other"
	}
	return e
}

func runLs(g *globalOptions, o lsOptions, img, spec string) (err error) {
	part, p := 0, ""
	if spec != "" {
		var err error
		if part, p, err = parsePartSpec(spec); err != nil {
			return err
		}
	}
	o.verity.partition = part
	d, err := openPlainDisk(g, o, img)
	if err != nil {
		return err
	}
	defer d.Close()
	defer func() { err = d.cause(err, img+" "+spec) }()
	if spec == "" {
		return printPartitions(g, o.json, partitionsOf(d.Disk))
	}
	fsys, err := filesystemOf(d.Disk, part)
	if err != nil {
		return err
	}
	st, err := statPath(fsys, part, p)
	if err != nil {
		return err
	}
	out := dirJSON{Partition: part, Path: displayPath(p), Filesystem: fsTypeName(fsys.Type()), Entries: []entryJSON{}}
	if st != nil && !st.IsDir() {
		out.Entries = append(out.Entries, entryOf(path.Base(p), st))
	} else {
		ents, err := fsys.ReadDir(p)
		if err != nil {
			return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
		}
		for _, de := range ents {
			info, err := de.Info()
			if err == nil && fsys.Type() == filesystem.TypeExt4 {
				// go-diskfs's ext4 directory entries carry the file
				// type only; Stat reads the permissions from the inode.
				info, err = fsys.Stat(path.Join(p, de.Name()))
			}
			if err != nil {
				return fmt.Errorf("%d:%s: %w", part, path.Join(displayPath(p), de.Name()), err)
			}
			out.Entries = append(out.Entries, entryOf(de.Name(), info))
		}
	}
	if re := d.storage.ReadError(); re != nil {
		// A read go-diskfs dropped: the listing may lack entries.
		return re
	}
	if o.json {
		return json.NewEncoder(g.stdout).Encode(out)
	}
	w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, e := range out.Entries {
		name := e.Name
		if e.Type == "dir" {
			name += "/"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t %s\n", e.Mode, e.Size, e.ModTime.Format("2006-01-02 15:04"), name)
	}
	return w.Flush()
}

func printPartitions(g *globalOptions, asJSON bool, t tableJSON) error {
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(t)
	}
	fmt.Fprintf(g.stdout, "table: %s, disk size %d bytes (%s)\n", t.Table, t.Size, humanBytes(t.Size))
	if len(t.Partitions) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "INDEX\tSTART\tSIZE\tTYPE\tNAME")
	for _, p := range t.Partitions {
		typ := p.Type
		if p.TypeName != "" {
			typ = p.TypeName
		}
		fmt.Fprintf(w, "%d\t%d\t%d\t%s\t%s\n", p.Index, p.Start, p.Size, typ, p.Name)
	}
	return w.Flush()
}
