package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/disk"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/squashfs"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/diskfs/go-diskfs/partition/mbr"
	"github.com/spf13/cobra"
)

// lsOptions are the flags of ls and cat.
type lsOptions struct {
	key     keyOptions
	keySlot int
	json    bool
	verity  verityOpenOptions
}

func (o *lsOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	o.key.addFlags(f)
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "try only this key slot ("+slotRange()+")")
	f.BoolVar(&o.json, "json", false, "print JSON on stdout")
	o.verity.addFlags(f)
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
	if d.key != nil {
		d.key.Clear()
	}
	d.src.Close()
}

func openPlainDisk(g *globalOptions, o lsOptions, path string) (*plainDisk, error) {
	if err := checkKeySlot(o.keySlot); err != nil {
		return nil, err
	}
	if o.verity.partitionMode() && o.verity.partition <= 0 {
		return nil, usagef("--root-hash without --verity-hash checks a partition of a GPT disk against the tree in its verity partition: name it as PART:PATH (PART > 0)")
	}
	src, err := openSource(path)
	if err != nil {
		return nil, err
	}
	v, k, err := openPlainView(g, o, src, path)
	if err != nil {
		src.Close()
		return nil, err
	}
	st := image.NewStorage(v, plainName(path), true)
	d, err := diskfs.OpenBackend(st)
	if re := st.ReadError(); re != nil {
		// go-diskfs reads the partition table and, where that read
		// fails, may go on as if the disk had none.
		err = re
	}
	if err == nil && o.verity.partitionMode() {
		// The partition's data through its tree, found by the root hash.
		var root []byte
		if root, err = o.verity.root(); err == nil {
			var r *verity.Reader
			var start int64
			if r, start, err = verityPartition(st, root, o.verity.partition, path); err == nil {
				st.View = partVerityView{View: st.View, start: start, r: r}
			}
		}
		if err != nil {
			v.Close()
			if k != nil {
				k.Clear()
			}
			src.Close()
			return nil, err
		}
	}
	if err != nil {
		v.Close()
		if k != nil {
			k.Clear()
		}
		src.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &plainDisk{Disk: d, src: src, key: k, storage: st}, nil
}

// openPlainView opens the plaintext of the image src (named path),
// read-only: decrypted with the key it unlocks, and with verity flags
// checked against the tree, block by block. With verity flags a plain raw
// image is read as it is, and the key is nil.
func openPlainView(g *globalOptions, o lsOptions, src *os.File, path string) (image.View, *image.Key, error) {
	e, closeHeader, err := openData(g, src, path)
	if err != nil {
		if !o.verity.enabled() || g.header != "" {
			return nil, nil, err
		}
		plain, err := verityPlainImage(src, path, err)
		if !plain {
			return nil, nil, err
		}
		if o.verity.partitionMode() {
			v, err := baseView(nil, nil, src, path)
			return v, nil, err
		}
		v, err := o.verity.view(nil, nil, src, path)
		return v, nil, err
	}
	// The header's key slots are read by the unlock only.
	defer closeHeader()
	k, err := unlockImage(g, e, o.key, path, passPrompt(path), o.keySlot)
	if err != nil {
		return nil, nil, err
	}
	var v image.View
	if o.verity.partitionMode() {
		v, err = baseView(e, k, src, path)
	} else if o.verity.enabled() {
		v, err = o.verity.view(e, k, src, path)
	} else if v, err = e.View(src, k, true); err != nil {
		err = fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		k.Clear()
		return nil, nil, err
	}
	return v, k, nil
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
