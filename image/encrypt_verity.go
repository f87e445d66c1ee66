package image

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/cryptimg/cryptimg/sectors"
)

// EncryptVerity asks Encrypt (EncryptOptions.Verity) for the dm-verity
// hash tree of the image it writes, made in the same pass: the tree covers
// the output file as written, the LUKS header and the ciphertext, for a
// mapping stacked verity then crypt (dm-verity over the image, dm-crypt
// opened on the verity device; docs/VERITY.md says why). Each worker hashes
// the ciphertext of its chunk right after encrypting it; the header area
// and the levels above are hashed at the end.
type EncryptVerity struct {
	// Hash receives the superblock and the tree: a new, empty file.
	Hash verity.HashFile
	// Params are the tree's parameters (verity.NewParams); Encrypt sets
	// DataBlocks to the output's size in data blocks.
	Params verity.Params
	// Options are the upper levels' (Jobs).
	Options verity.Options
	// Root is the root hash, set by Encrypt.
	Root []byte
}

// ErrVerityLayout refuses encrypt --verity where the output is not one run
// of whole data blocks that dm-verity can map: a qcow2 output, an
// authenticated (dm-integrity) payload, or sizes that are not whole data
// blocks.
var ErrVerityLayout = errors.New("no dm-verity tree for this output")

// checkVerity refuses a tree for outputs other than a raw payload of
// plain sectors (auth: the header is authenticated).
func checkVerity(v *EncryptVerity, format Format, auth bool) error {
	switch {
	case v == nil:
		return nil
	case format != Raw:
		return fmt.Errorf("%w: a %s output is not a block device the kernel maps (raw only)", ErrVerityLayout, format)
	case auth:
		return fmt.Errorf("%w: an authenticated payload (dm-integrity) already checks every sector", ErrVerityLayout)
	}
	return nil
}

// verityPass is one encryption's tree: the Builder, and the payload's
// offset in the output file.
type verityPass struct {
	v       *EncryptVerity
	b       *verity.Builder
	payload int64
}

// startVerity sets up the tree of an output of payload bytes of header
// area and size bytes of ciphertext, and rounds so's chunks to whole data
// blocks.
func startVerity(v *EncryptVerity, payload, size int64, so *sectors.Options) (*verityPass, error) {
	p := v.Params
	dbs := int64(p.DataBlockSize)
	if dbs <= 0 {
		return nil, fmt.Errorf("%w: data block size %d", verity.ErrInvalid, dbs)
	}
	if payload%dbs != 0 || size%dbs != 0 {
		return nil, fmt.Errorf("%w: the payload (offset %d, %d bytes) is not whole %d-byte data blocks", ErrVerityLayout, payload, size, dbs)
	}
	p.DataBlocks = uint64((payload + size) / dbs)
	b, err := verity.NewBuilder(v.Hash, p)
	if err != nil {
		return nil, err
	}
	if so.ChunkSize == 0 {
		so.ChunkSize = sectors.DefaultChunkSize
	}
	so.ChunkSize = int((int64(so.ChunkSize) + dbs - 1) / dbs * dbs)
	v.Params = b.Params()
	return &verityPass{v: v, b: b, payload: payload}, nil
}

// wrap is t followed by the hashing of the ciphertext it made. The payload's
// IV sector 0 is its first byte (rawIV), so a chunk's IV sector is its
// plaintext offset in 512-byte units.
func (vp *verityPass) wrap(t sectors.Transform) sectors.Transform {
	dbs := int64(vp.v.Params.DataBlockSize)
	return func(dst, src []byte, first uint64) error {
		if err := t(dst, src, first); err != nil {
			return err
		}
		off := vp.payload + int64(first)*sectors.UnitSize
		if off%dbs != 0 {
			return fmt.Errorf("image: internal error: a chunk at byte %d is not on a %d-byte data block", off, dbs)
		}
		return vp.b.Blocks(uint64(off/dbs), dst)
	}
}

// finish hashes the header area (the first payload bytes of dst, as
// written) and the upper levels, and sets the root hash.
func (vp *verityPass) finish(ctx context.Context, dst io.ReaderAt) error {
	if vp.payload > 0 {
		area := make([]byte, vp.payload)
		if _, err := dst.ReadAt(area, 0); err != nil {
			return fmt.Errorf("failed to read back the header area: %w", err)
		}
		if err := vp.b.Blocks(0, area); err != nil {
			return err
		}
	}
	root, err := vp.b.Finish(ctx, vp.v.Options)
	if err != nil {
		return fmt.Errorf("dm-verity tree: %w", err)
	}
	vp.v.Root = root
	return nil
}
