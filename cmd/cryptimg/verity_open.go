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
	cipherLayer := e == nil
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
			cipherLayer = hash == file || hf != nil && int64(p.DataBlocks)*int64(p.DataBlockSize) > pv.Size()
			if !cipherLayer {
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
	if e == nil || !cipherLayer {
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
