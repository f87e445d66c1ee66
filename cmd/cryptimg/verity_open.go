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
}

func (o *verityOpenOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.hashFile, "verity-hash", "", "check every block read against the dm-verity tree in this file (made by verity format)")
	f.Int64Var(&o.hashOffset, "verity-hash-offset", 0, "the tree's superblock is at this byte of the hash file; without --verity-hash, of the image's plaintext itself")
	f.StringVar(&o.rootHash, "root-hash", "", "with --verity-hash or --verity-hash-offset: the tree's root hash, in hex")
	f.StringVar(&o.rootHashFile, "root-hash-file", "", "with --verity-hash or --verity-hash-offset: read the root hash, in hex, from this file")
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
	if o.hashFile == "" && o.hashOffset == 0 {
		return nil, usagef("--root-hash and --root-hash-file go with --verity-hash FILE or --verity-hash-offset N")
	}
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

// wrap returns a read-only view of the data blocks of src (the plaintext
// of the image named img, of size bytes) that checks every block read
// against the tree, as dm-verity does: a bad block fails the read with a
// *verity.CorruptError (exit 4; EIO through FUSE). closeFn releases src
// when the view closes. The hash file stays open as long as the view.
func (o *verityOpenOptions) wrap(src io.ReaderAt, size int64, img string, closeFn func() error) (image.View, error) {
	root, err := o.root()
	if err != nil {
		return nil, err
	}
	data := io.NewSectionReader(src, 0, size)
	var hash io.ReaderAt = data
	hashName := img
	var hf *os.File
	if o.hashFile != "" {
		if hf, err = openForRead(o.hashFile); err != nil {
			return nil, err
		}
		hash, hashName = hf, o.hashFile
	}
	fail := func(err error) (image.View, error) {
		if hf != nil {
			hf.Close()
		}
		return nil, err
	}
	p, err := verity.ReadSuperblock(hash, o.hashOffset)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", hashName, err))
	}
	if hf == nil && int64(p.DataBlocks)*int64(p.DataBlockSize) > o.hashOffset {
		return fail(fmt.Errorf("%s: %w: the data the tree covers (%d bytes) overlaps its superblock at byte %d", img, verity.ErrSuperblock, int64(p.DataBlocks)*int64(p.DataBlockSize), o.hashOffset))
	}
	r, err := verity.NewReader(data, hash, p, root)
	if err != nil {
		var se *verity.SizeError
		if errors.As(err, &se) && se.Data {
			return fail(fmt.Errorf("%s: %w", img, err))
		}
		return fail(fmt.Errorf("%s: %w", hashName, err))
	}
	return image.VerityView(r, func() error {
		var herr error
		if hf != nil {
			herr = hf.Close()
		}
		if closeFn != nil {
			if err := closeFn(); err != nil {
				return err
			}
		}
		return herr
	}), nil
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
