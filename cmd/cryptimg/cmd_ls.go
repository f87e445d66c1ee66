package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/squashfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/diskfs/go-diskfs/partition/mbr"
	"github.com/spf13/cobra"

	"github.com/cryptimg/cryptimg/image"
)

// lsOptions are the flags of ls and cat.
type lsOptions struct {
	key     keyOptions
	keySlot int
	json    bool
}

func (o *lsOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.key.addFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot (0-7 for LUKS1, 0-31 for LUKS2)")
	f.BoolVar(&o.json, "json", false, "print JSON on stdout")
}

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

func newCatCommand(g *globalOptions) *cobra.Command {
	var o lsOptions
	cmd := &cobra.Command{
		Use:   "cat [flags] IMAGE PART:PATH",
		Short: "Print a file from inside an encrypted image",
		Long: `Print the file at PATH in the filesystem of partition PART (0 = the whole
disk) inside an encrypted image to stdout. With --json, print one JSON object
with the content in base64.

The image is decrypted in memory as it is read: no plaintext is written to
disk, and the image is opened read-only.
` + exitStatusHelp,
		Example: `  cryptimg cat -d key.bin disk.luks 2:/etc/hostname`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCat(g, o, args[0], args[1])
		},
	}
	o.addFlags(cmd)
	return cmd
}

// plainDisk is the disk inside an encrypted image, opened through a
// read-only view.
type plainDisk struct {
	*disk.Disk
	src     *os.File
	key     *image.Key
	storage *image.Storage
}

// cause gives the read error behind a failure of go-diskfs, which reports
// an unreadable sector (an integrity tag mismatch) as a plain message or a
// missing path: what names the request.
func (d *plainDisk) cause(err error, what string) error {
	if err == nil {
		return nil
	}
	if re := d.storage.ReadError(); re != nil {
		return fmt.Errorf("%s: %w", what, re)
	}
	return err
}

func (d *plainDisk) Close() {
	d.Disk.Close()
	d.key.Clear()
	d.src.Close()
}

func openPlainDisk(g *globalOptions, o lsOptions, path string) (*plainDisk, error) {
	if err := checkKeySlot(o.keySlot); err != nil {
		return nil, err
	}
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	e, closeHeader, err := openData(g, src, path)
	if err != nil {
		src.Close()
		return nil, err
	}
	// The header's key slots are read by the unlock only.
	defer closeHeader()
	k, err := unlockImage(g, e, o.key, path, passPrompt(path), o.keySlot)
	if err != nil {
		src.Close()
		return nil, err
	}
	v, err := e.View(src, k, true)
	if err != nil {
		k.Clear()
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st := image.NewStorage(v, plainName(path), true)
	d, err := diskfs.OpenBackend(st)
	if re := st.ReadError(); re != nil {
		// go-diskfs reads the partition table and, where that read
		// fails, may go on as if the disk had none.
		err = re
	}
	if err != nil {
		v.Close()
		k.Clear()
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &plainDisk{Disk: d, src: src, key: k, storage: st}, nil
}

// partitionJSON describes one partition in ls --json output.
type partitionJSON struct {
	Index    int    `json:"index"`
	Start    int64  `json:"start"`
	Size     int64  `json:"size"`
	Type     string `json:"type"`
	TypeName string `json:"type_name,omitempty"`
	Name     string `json:"name,omitempty"`
	UUID     string `json:"uuid,omitempty"`
	Bootable bool   `json:"bootable,omitempty"`
}

// tableJSON is the output of ls IMAGE --json.
type tableJSON struct {
	Table      string          `json:"table"` // "gpt", "mbr" or "none"
	UUID       string          `json:"uuid,omitempty"`
	Size       int64           `json:"size"`
	Partitions []partitionJSON `json:"partitions"`
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

// catJSON is the output of cat --json.
type catJSON struct {
	Partition int    `json:"partition"`
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Content   []byte `json:"content"` // base64
}

// gptTypeNames names the partition types people meet in disk images.
var gptTypeNames = map[gpt.Type]string{
	gpt.EFISystemPartition:       "EFI System",
	gpt.BIOSBoot:                 "BIOS boot",
	gpt.LinuxFilesystem:          "Linux filesystem",
	gpt.LinuxLUKS:                "Linux LUKS",
	gpt.LinuxDMCrypt:             "Linux dm-crypt",
	gpt.LinuxSwap:                "Linux swap",
	gpt.LinuxRootX86:             "Linux root (x86)",
	gpt.LinuxRootX86_64:          "Linux root (x86-64)",
	gpt.LinuxRootArm:             "Linux root (ARM)",
	gpt.LinuxRootArm64:           "Linux root (ARM-64)",
	gpt.LinuxHome:                "Linux home",
	gpt.LinuxServerData:          "Linux server data",
	gpt.LinuxExtendedBoot:        "Linux extended boot",
	gpt.LinuxLVM:                 "Linux LVM",
	gpt.LinuxRAID:                "Linux RAID",
	gpt.MicrosoftReserved:        "Microsoft reserved",
	gpt.MicrosoftBasicData:       "Microsoft basic data",
	gpt.MicrosoftWindowsRecovery: "Windows recovery environment",
	gpt.AppleAPFS:                "Apple APFS",
	gpt.AppleHFS:                 "Apple HFS/HFS+",
	gpt.FreeBSDBoot:              "FreeBSD boot",
}

func partitionsOf(d *disk.Disk) tableJSON {
	t := tableJSON{Table: "none", Size: d.Size, Partitions: []partitionJSON{}}
	switch table := d.Table.(type) {
	case *gpt.Table:
		t.Table, t.UUID = "gpt", table.GUID
		for _, p := range table.Partitions {
			t.Partitions = append(t.Partitions, partitionJSON{
				Index: p.Index, Start: p.GetStart(), Size: p.GetSize(),
				Type: string(p.Type), TypeName: gptTypeNames[p.Type], Name: p.Name, UUID: p.GUID,
			})
		}
	case *mbr.Table:
		t.Table = "mbr"
		for _, p := range table.Partitions {
			if p.Type == mbr.Empty {
				continue
			}
			t.Partitions = append(t.Partitions, partitionJSON{
				Index: p.Index, Start: p.GetStart(), Size: p.GetSize(),
				Type: fmt.Sprintf("0x%02x", byte(p.Type)), Bootable: p.Bootable,
			})
		}
	}
	return t
}

// parsePartSpec splits PART[:PATH] into a partition number and a path in
// io/fs form ("." for the root).
func parsePartSpec(spec string) (int, string, error) {
	part, p, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(part)
	if err != nil || n < 0 {
		return 0, "", usagef("%q: PART must be a partition number (0 = the whole disk)", spec)
	}
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" {
		p = "."
	}
	return n, p, nil
}

func displayPath(p string) string {
	if p == "." {
		return "/"
	}
	return "/" + p
}

func fsTypeName(t filesystem.Type) string {
	switch t {
	case filesystem.TypeFat32:
		return "fat32"
	case filesystem.TypeFat16:
		return "fat16"
	case filesystem.TypeFat12:
		return "fat12"
	case filesystem.TypeISO9660:
		return "iso9660"
	case filesystem.TypeSquashfs:
		return "squashfs"
	case filesystem.TypeExt4:
		return "ext4"
	}
	return "unknown"
}

// errNotFound classifies unknown partitions and paths (exit 1).
var errNotFound = errors.New("not found")

// filesystemOf opens the filesystem of partition part, with a clear error
// for a partition that does not exist.
func filesystemOf(d *disk.Disk, part int) (filesystem.FileSystem, error) {
	if part != 0 {
		t := partitionsOf(d)
		found := false
		var have []string
		for _, p := range t.Partitions {
			have = append(have, strconv.Itoa(p.Index))
			found = found || p.Index == part
		}
		if !found {
			if len(have) == 0 {
				return nil, fmt.Errorf("partition %d: %w: the disk has no partition table (use 0 for the whole disk)", part, errNotFound)
			}
			return nil, fmt.Errorf("partition %d: %w: the disk has partitions %s", part, errNotFound, strings.Join(have, ", "))
		}
	}
	fsys, err := d.GetFilesystem(part)
	if err == nil {
		return fsys, nil
	}
	// go-diskfs v1.9.4 probes squashfs with the disk's 512-byte logical
	// block size, which squashfs.Read refuses; 0 takes the default.
	start, size := int64(0), d.Size
	if part != 0 {
		if p, err := d.GetPartition(part); err == nil {
			start, size = p.GetStart(), p.GetSize()
		}
	}
	if sq, err := squashfs.Read(d.Backend, size, start, 0); err == nil {
		return sq, nil
	}
	return nil, fmt.Errorf("partition %d: no FAT, ext4, ISO9660 or squashfs filesystem found", part)
}

// statPath returns what p is, with a clear error when it does not exist.
func statPath(fsys filesystem.FileSystem, part int, p string) (fs.FileInfo, error) {
	if p == "." {
		return nil, nil
	}
	st, err := fsys.Stat(p)
	if err != nil || st == nil {
		return nil, fmt.Errorf("%d:%s: %w: no such file or directory", part, displayPath(p), errNotFound)
	}
	return st, nil
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

func runCat(g *globalOptions, o lsOptions, img, spec string) (err error) {
	if !strings.Contains(spec, ":") {
		return usagef("%q: want PART:PATH", spec)
	}
	part, p, err := parsePartSpec(spec)
	if err != nil {
		return err
	}
	if p == "." {
		return usagef("%q: PATH is missing", spec)
	}
	d, err := openPlainDisk(g, o, img)
	if err != nil {
		return err
	}
	defer d.Close()
	defer func() { err = d.cause(err, spec) }()
	fsys, err := filesystemOf(d.Disk, part)
	if err != nil {
		return err
	}
	st, err := statPath(fsys, part, p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return fmt.Errorf("%d:%s: is a directory", part, displayPath(p))
	}
	f, err := fsys.Open(p)
	if err != nil {
		return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
	}
	defer f.Close()
	if o.json {
		b, err := io.ReadAll(f)
		if err != nil {
			return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
		}
		return json.NewEncoder(g.stdout).Encode(catJSON{Partition: part, Path: displayPath(p), Size: int64(len(b)), Content: b})
	}
	if _, err := io.Copy(g.stdout, f); err != nil {
		return fmt.Errorf("%d:%s: %w", part, displayPath(p), err)
	}
	return nil
}

// plainName is the name of the plaintext of an image: its base name with
// the extension replaced by .raw.
func plainName(img string) string {
	base := path.Base(strings.ReplaceAll(img, "\\", "/"))
	if ext := path.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	if base == "" || base == "." || base == "/" {
		return "disk.raw"
	}
	return base + ".raw"
}
