package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/spf13/pflag"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/image/verity"
)

// verityOpenOptions are the flags of open, ls and cat that check every
// block read against a dm-verity tree, veritysetup open's inputs: the
// hash device (a file, or the image's plaintext itself at an offset), the
// superblock's offset in it, and the root hash.
type verityOpenOptions struct {
	hashFile     string
	hashOffset   int64
	rootHash     string
	rootHashFile string
	// partition is open's --partition; ls and cat name it in PART:PATH.
	partition int
}

func (o *verityOpenOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.hashFile, "verity-hash", "", "check every block read against the dm-verity tree in this file (made by verity format)")
	f.Int64Var(&o.hashOffset, "verity-hash-offset", 0, "the tree's superblock is at this byte of the hash file; without --verity-hash, of the image's plaintext itself")
	f.StringVar(&o.rootHash, "root-hash", "", "the dm-verity root hash, in hex: with --verity-hash or --verity-hash-offset, or alone for a GPT disk whose verity partitions verity format --partition made")
	f.StringVar(&o.rootHashFile, "root-hash-file", "", "read the root hash, in hex, from this file")
}

// partitionMode reports --root-hash without --verity-hash or
// --verity-hash-offset: the data is a partition of a GPT disk and its tree
// is in the partition whose UUID is the root hash's last 128 bits, as
// systemd finds them (verity format --partition makes them so).
func (o *verityOpenOptions) partitionMode() bool {
	return o.hashFile == "" && o.hashOffset == 0 && (o.rootHash != "" || o.rootHashFile != "")
}

// enabled reports whether any verity flag is set; check refuses an
// incomplete set.
func (o *verityOpenOptions) enabled() bool {
	return o.hashFile != "" || o.hashOffset != 0 || o.rootHash != "" || o.rootHashFile != ""
}

// args repeats the flags for the background child of open (the hash file
// made absolute: the child runs in /).
func (o *verityOpenOptions) args() ([]string, error) {
	if !o.enabled() {
		return nil, nil
	}
	root, err := o.root()
	if err != nil {
		return nil, err
	}
	a := []string{"--root-hash", hex.EncodeToString(root), "--verity-hash-offset", strconv.FormatInt(o.hashOffset, 10)}
	if o.partition != 0 {
		a = append(a, "--partition", strconv.Itoa(o.partition))
	}
	if o.hashFile != "" {
		abs, err := filepath.Abs(o.hashFile)
		if err != nil {
			return nil, err
		}
		a = append(a, "--verity-hash", abs)
	}
	return a, nil
}

// root is the root hash from --root-hash or --root-hash-file.
func (o *verityOpenOptions) root() ([]byte, error) {
	s := o.rootHash
	switch {
	case o.rootHash != "" && o.rootHashFile != "":
		return nil, usagef("give --root-hash or --root-hash-file, not both")
	case o.rootHashFile != "":
		b, err := os.ReadFile(o.rootHashFile)
		if err != nil {
			return nil, err
		}
		s = strings.TrimSpace(string(b))
	case s == "":
		return nil, usagef("--verity-hash and --verity-hash-offset need the root hash: --root-hash HEX or --root-hash-file FILE")
	}
	root, err := hex.DecodeString(s)
	if err != nil || len(root) == 0 {
		return nil, usagef("root hash %q is not hex", s)
	}
	return root, nil
}

// view opens the read-only view that open, ls and cat read under verity
// flags: every block read is checked against the tree, as dm-verity does,
// and a bad block fails the read with a *verity.CorruptError (exit 4; EIO
// through FUSE). What the tree covers:
//   - a plain raw image (e nil): the file itself;
//   - an encrypted image: its plaintext (the decrypted payload, a verity
//     mapping stacked on a crypt one), or, when the tree covers more data
//     than the plaintext holds, the image file itself (the ciphertext and
//     the header, a crypt mapping on a verity one: what encrypt --verity
//     makes), checked before it is decrypted.
//
// With --verity-hash-offset alone, the tree is in the plaintext at that
// offset, else in the image file.
func (o *verityOpenOptions) view(e *image.Encrypted, k *image.Key, src *os.File, img string) (image.View, error) {
	root, err := o.root()
	if err != nil {
		return nil, err
	}
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	file := io.NewSectionReader(src, 0, st.Size())
	var hf *os.File
	if o.hashFile != "" {
		if hf, err = openForRead(o.hashFile); err != nil {
			return nil, err
		}
	}
	var pv image.View
	closeAll := func() error {
		var err error
		if pv != nil {
			err = pv.Close()
		}
		if hf != nil {
			if herr := hf.Close(); err == nil {
				err = herr
			}
		}
		return err
	}
	fail := func(err error) (image.View, error) {
		closeAll()
		return nil, err
	}
	// The data and the hash device the tree covers, and its superblock.
	var data *io.SectionReader = file
	var hash io.ReaderAt = file
	hashName := img
	if hf != nil {
		hash, hashName = hf, o.hashFile
	}
	p, err := verity.ReadSuperblock(hash, o.hashOffset)
	fileLayer := e == nil
	if e != nil {
		if pv, err = e.View(src, k, true); err != nil {
			return fail(fmt.Errorf("%s: %w", img, err))
		}
		plain := io.NewSectionReader(pv, 0, pv.Size())
		if hf == nil {
			// A tree inside the plaintext, else inside the file.
			if pp, perr := verity.ReadSuperblock(plain, o.hashOffset); perr == nil || !errors.Is(perr, verity.ErrNoSuperblock) {
				p, err, hash = pp, perr, plain
			}
		}
		if err == nil {
			fileLayer = hash == file || hf != nil && int64(p.DataBlocks)*int64(p.DataBlockSize) > pv.Size()
			if !fileLayer {
				data = plain
			}
		}
	}
	if err != nil {
		return fail(fmt.Errorf("%s: %w", hashName, err))
	}
	covered := int64(p.DataBlocks) * int64(p.DataBlockSize)
	if hf == nil && covered > o.hashOffset {
		return fail(fmt.Errorf("%s: %w: the data the tree covers (%d bytes) overlaps its superblock at byte %d", img, verity.ErrSuperblock, covered, o.hashOffset))
	}
	r, err := verity.NewReader(data, hash, p, root)
	if err != nil {
		var se *verity.SizeError
		if errors.As(err, &se) && se.Data {
			return fail(fmt.Errorf("%s: %w", img, err))
		}
		return fail(fmt.Errorf("%s: %w", hashName, err))
	}
	if e == nil || !fileLayer {
		return image.VerityView(r, closeAll), nil
	}
	// Verity under crypt: the ciphertext is checked, then decrypted.
	pv.Close()
	pv = nil
	cv, err := e.ViewOver(verityErrors{r}, k)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", img, err))
	}
	return closingView{cv, closeAll}, nil
}

// verityPartition finds partition part of the GPT disk read through st
// and its hash partition, the one whose UUID is root's last 128 bits (and
// part's UUID must be its first 128 bits, as systemd requires), and
// returns a Reader of part's data checked against the tree there, and
// part's byte offset. The partition table itself is not covered by the
// tree, as under systemd.
func verityPartition(st *image.Storage, root []byte, part int, img string) (*verity.Reader, int64, error) {
	if len(root) < 32 {
		return nil, 0, usagef("root hash of %d bytes: a partition's UUIDs take 32", len(root))
	}
	t, err := gpt.Read(st, image.SectorSize, image.SectorSize)
	if re := st.ReadError(); re != nil {
		err = re
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%s: --root-hash alone needs a GPT disk (its verity partitions): %w", img, err)
	}
	dataUUID, hashUUID := image.RootHashUUIDs(root)
	var dp, hp *gpt.Partition
	for _, q := range t.Partitions {
		if q.Type == gpt.Unused {
			continue
		}
		if q.Index == part {
			dp = q
		}
		if strings.EqualFold(q.GUID, hashUUID) {
			hp = q
		}
	}
	switch {
	case dp == nil:
		return nil, 0, fmt.Errorf("%s: partition %d: %w", img, part, errNotFound)
	case hp == nil:
		return nil, 0, fmt.Errorf("%s: %w: no partition has the UUID %s (the root hash's last 128 bits)", img, verity.ErrCorrupt, hashUUID)
	case !strings.EqualFold(dp.GUID, dataUUID):
		return nil, 0, fmt.Errorf("%s: %w: partition %d has the UUID %s, not %s (the root hash's first 128 bits)", img, verity.ErrCorrupt, part, strings.ToLower(dp.GUID), dataUUID)
	}
	// The tree's reads go to the view under st, which the caller may
	// then replace with one that reads through the tree.
	base := st.View
	sec := int64(image.SectorSize)
	start := int64(dp.Start) * sec
	dr := io.NewSectionReader(base, start, int64(dp.End-dp.Start+1)*sec)
	hr := io.NewSectionReader(base, int64(hp.Start)*sec, int64(hp.End-hp.Start+1)*sec)
	p, err := verity.ReadSuperblock(hr, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: partition %d: %w", img, hp.Index, err)
	}
	r, err := verity.NewReader(dr, hr, p, root)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: partitions %d and %d: %w", img, part, hp.Index, err)
	}
	return r, start, nil
}

// partVerityView is a disk whose partition at start is read through a
// tree (r), the rest as it is: what ls and cat read with --root-hash
// alone. The bytes of the partition past the tree's data blocks (less
// than a block, for a tree verity format --partition made) read as they
// are.
type partVerityView struct {
	image.View
	start int64
	r     *verity.Reader
}

func (v partVerityView) ReadAt(b []byte, off int64) (int, error) {
	end := v.start + v.r.Size()
	n := 0
	for n < len(b) {
		pos := off + int64(n)
		var m int
		var err error
		switch {
		case pos < v.start:
			m, err = v.View.ReadAt(b[n:n+int(min(int64(len(b)-n), v.start-pos))], pos)
		case pos < end:
			m, err = v.r.ReadAt(b[n:n+int(min(int64(len(b)-n), end-pos))], pos-v.start)
			if errors.Is(err, verity.ErrCorrupt) {
				err = fmt.Errorf("dm-verity: %w", err)
			}
		default:
			m, err = v.View.ReadAt(b[n:], pos)
		}
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// fileView is a plain raw image as a read-only View.
type fileView struct{ *io.SectionReader }

func (fileView) WriteAt([]byte, int64) (int, error) { return 0, image.ErrReadOnly }
func (fileView) Sync() error                        { return nil }
func (fileView) Close() error                       { return nil }

// baseView is what a tree in a partition is read from: the plaintext of
// e, or with e nil the plain image src itself.
func baseView(e *image.Encrypted, k *image.Key, src *os.File, img string) (image.View, error) {
	if e == nil {
		st, err := src.Stat()
		if err != nil {
			return nil, err
		}
		return fileView{io.NewSectionReader(src, 0, st.Size())}, nil
	}
	v, err := e.View(src, k, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", img, err)
	}
	return v, nil
}

// partitionView is open's view with --root-hash and --partition N alone:
// partition N's data blocks, checked against the tree in its hash
// partition, as systemd's /dev/mapper/root.
func (o *verityOpenOptions) partitionView(e *image.Encrypted, k *image.Key, src *os.File, img string) (image.View, error) {
	root, err := o.root()
	if err != nil {
		return nil, err
	}
	base, err := baseView(e, k, src, img)
	if err != nil {
		return nil, err
	}
	r, _, err := verityPartition(image.NewStorage(base, plainName(img), true), root, o.partition, img)
	if err != nil {
		base.Close()
		return nil, err
	}
	return image.VerityView(r, base.Close), nil
}

// verityErrors names dm-verity in the errors of a verity.Reader read
// through a decrypting view.
type verityErrors struct{ r *verity.Reader }

func (v verityErrors) ReadAt(b []byte, off int64) (int, error) {
	n, err := v.r.ReadAt(b, off)
	if errors.Is(err, verity.ErrCorrupt) {
		err = fmt.Errorf("dm-verity (image file): %w", err)
	}
	return n, err
}

func (v verityErrors) Size() int64 { return v.r.Size() }

// closingView closes more when its view closes.
type closingView struct {
	image.View
	more func() error
}

func (c closingView) Close() error {
	err := c.View.Close()
	if merr := c.more(); err == nil {
		err = merr
	}
	return err
}

// verityPlainImage reports whether err, from opening img as an encrypted
// image, means that it is a plain raw image, which with verity flags is
// read as it is: the tree covers the file itself. A plain qcow2 image is
// refused (the tree would cover its guest disk, which these commands do
// not read unencrypted).
func verityPlainImage(src *os.File, img string, err error) (bool, error) {
	if !errors.Is(err, header.ErrNotLUKS) {
		return false, err
	}
	if qcow2.IsQcow2(src) {
		return false, fmt.Errorf("%s: a plain qcow2 image: --verity-hash reads a LUKS image or a plain raw one", img)
	}
	return true, nil
}
