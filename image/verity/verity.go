// Package verity builds, checks and describes dm-verity hash trees in
// veritysetup's on-disk format (superblock, levels, salt rules), over data
// read from files, in parallel; docs/VERITY.md gathers the format's facts.
package verity

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// Defaults of veritysetup 2.6.1 (src/veritysetup.c, configure.ac).
const (
	DefaultHash      = "sha256"
	DefaultBlockSize = 4096
	DefaultSaltSize  = 32
	// MaxSaltSize is the superblock's salt field (lib/verity/verity.c).
	MaxSaltSize = 256
	// SuperblockSize is the size of veritysetup's superblock.
	SuperblockSize = 512

	minBlockSize = 512
	maxBlockSize = 512 * 1024
)

// Errors. A bad block is a *CorruptError, which matches ErrCorrupt.
var (
	// ErrCorrupt: a block does not match its hash, or the tree does not
	// match the root hash.
	ErrCorrupt = errors.New("dm-verity verification failed")
	// ErrNoSuperblock: the hash file holds no veritysetup superblock at
	// the offset given.
	ErrNoSuperblock = errors.New("not a dm-verity hash device (no superblock)")
	// ErrTruncated: the data or the hash device ends before the blocks
	// the tree covers or holds.
	ErrTruncated = errors.New("dm-verity device too small")
	// ErrSuperblock: a superblock whose fields veritysetup refuses.
	ErrSuperblock = errors.New("invalid dm-verity superblock")
	// ErrInvalid: parameters that veritysetup refuses.
	ErrInvalid = errors.New("invalid verity parameters")
)

// Params are a hash tree's parameters: what the superblock records, and
// where the tree sits. Every field is the same as veritysetup's option of
// the same meaning.
type Params struct {
	// HashType is 1 (the normal format: the salt comes first and digests
	// are padded to a power of two) or 0 (Chrome OS's original format:
	// the salt comes last and digests are packed).
	HashType uint32
	// Hash is the kernel crypto API name of the digest, lower case:
	// sha1, sha224, sha256, sha384 or sha512.
	Hash string
	// DataBlockSize and HashBlockSize are powers of two from 512 to 512 KiB.
	DataBlockSize, HashBlockSize int
	// DataBlocks is the number of data blocks the tree covers (at least 1).
	DataBlocks uint64
	// Salt is at most 256 bytes; empty means none.
	Salt []byte
	// UUID is stored in the superblock in RFC 4122 byte order.
	UUID [16]byte
	// HashOffset is the byte offset of the superblock in the hash file
	// (a multiple of 512), or with NoSuperblock where the tree starts
	// (rounded down to a hash block).
	HashOffset int64
	// NoSuperblock leaves the superblock out: every parameter must then be
	// given again to check the tree.
	NoSuperblock bool
}

// NewParams returns veritysetup's defaults for data of dataSize bytes:
// hash type 1, sha256, 4096-byte blocks, every whole data block, a random
// 32-byte salt and a random UUID (version 4).
func NewParams(dataSize int64) (Params, error) {
	p := Params{
		HashType:      1,
		Hash:          DefaultHash,
		DataBlockSize: DefaultBlockSize,
		HashBlockSize: DefaultBlockSize,
		Salt:          make([]byte, DefaultSaltSize),
	}
	if dataSize > 0 {
		p.DataBlocks = uint64(dataSize) / DefaultBlockSize
	}
	if _, err := rand.Read(p.Salt); err != nil {
		return Params{}, err
	}
	if _, err := rand.Read(p.UUID[:]); err != nil {
		return Params{}, err
	}
	p.UUID[6] = p.UUID[6]&0x0f | 0x40
	p.UUID[8] = p.UUID[8]&0x3f | 0x80
	return p, nil
}

// ParseUUID parses a UUID in its text form, 8-4-4-4-12 hex digits.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%w: UUID %q is not in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form", ErrInvalid, s)
	}
	hex := strings.ReplaceAll(s, "-", "")
	for i := range u {
		hi, ok1 := unhex(hex[2*i])
		lo, ok2 := unhex(hex[2*i+1])
		if !ok1 || !ok2 {
			return u, fmt.Errorf("%w: UUID %q is not in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form", ErrInvalid, s)
		}
		u[i] = hi<<4 | lo
	}
	return u, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// FormatUUID writes u in its lower-case text form.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Check reports whether veritysetup accepts p (lib/verity/verity.c,
// lib/setup.c), apart from the sizes of the files. It lower-cases Hash,
// as veritysetup stores it.
func (p *Params) Check() error {
	p.Hash = strings.ToLower(p.Hash)
	if p.HashType > 1 {
		return fmt.Errorf("%w: hash type %d (only 0 and 1 exist)", ErrInvalid, p.HashType)
	}
	if _, err := newHashFunc(p.Hash); err != nil {
		return err
	}
	for _, bs := range []int{p.DataBlockSize, p.HashBlockSize} {
		if bs < minBlockSize || bs > maxBlockSize || bs&(bs-1) != 0 {
			return fmt.Errorf("%w: block size %d (a power of two from 512 to 524288)", ErrInvalid, bs)
		}
	}
	if len(p.Salt) > MaxSaltSize {
		return fmt.Errorf("%w: salt of %d bytes (at most %d)", ErrInvalid, len(p.Salt), MaxSaltSize)
	}
	if p.DataBlocks == 0 {
		return fmt.Errorf("%w: no data blocks", ErrInvalid)
	}
	if p.HashOffset < 0 || !p.NoSuperblock && p.HashOffset%SuperblockSize != 0 {
		return fmt.Errorf("%w: hash offset %d (a multiple of 512)", ErrInvalid, p.HashOffset)
	}
	if p.DataBlocks > uint64(1<<62)/uint64(p.DataBlockSize) {
		return fmt.Errorf("%w: %d data blocks", ErrInvalid, p.DataBlocks)
	}
	return nil
}

// Geometry is where a tree's blocks are, in hash blocks of the hash file.
type Geometry struct {
	// DigestSize is the digest's size, Slot the bytes each digest takes in
	// a hash block (type 1: rounded up to a power of two), PerBlock how
	// many digests a hash block holds (a power of two).
	DigestSize, Slot, PerBlock int
	// Start is the first tree block (T): after the superblock, or at the
	// hash offset rounded down without one.
	Start uint64
	// Levels[i] is level i: 0 holds the digests of the data blocks, the
	// last one (the top) is one block. No levels for one data block.
	Levels []Level
}

// Level is one level of the tree: Count hash blocks from hash block Start
// of the hash file. On disk the top level comes first and level 0 last.
type Level struct {
	Start, Count uint64
}

// Blocks is the number of hash blocks of the tree, superblock not counted.
func (g *Geometry) Blocks() uint64 {
	var n uint64
	for _, l := range g.Levels {
		n += l.Count
	}
	return n
}

// End is the hash file's size that holds the tree: (T + tree blocks)
// hash blocks.
func (g *Geometry) End(hashBlockSize int) int64 {
	return int64(g.Start+g.Blocks()) * int64(hashBlockSize)
}

// Geometry lays the tree out (lib/verity/verity_hash.c: levels of
// ceil(N / per^(i+1)) blocks, top first; VERITY_hash_offset_block for T).
func (p *Params) Geometry() (Geometry, error) {
	if err := p.Check(); err != nil {
		return Geometry{}, err
	}
	hf, _ := newHashFunc(p.Hash)
	ds := hf.size
	b := bits.Len(uint(p.HashBlockSize/ds)) - 1
	g := Geometry{DigestSize: ds, PerBlock: 1 << b, Slot: ds}
	if p.HashType == 1 {
		g.Slot = p.HashBlockSize >> b
	}
	if p.NoSuperblock {
		g.Start = uint64(p.HashOffset) / uint64(p.HashBlockSize)
	} else {
		g.Start = (uint64(p.HashOffset) + SuperblockSize + uint64(p.HashBlockSize) - 1) / uint64(p.HashBlockSize)
	}
	for n := p.DataBlocks; n > 1; {
		n = (n + uint64(g.PerBlock) - 1) / uint64(g.PerBlock)
		g.Levels = append(g.Levels, Level{Count: n})
	}
	pos := g.Start
	for i := len(g.Levels) - 1; i >= 0; i-- {
		g.Levels[i].Start = pos
		pos += g.Levels[i].Count
	}
	return g, nil
}
