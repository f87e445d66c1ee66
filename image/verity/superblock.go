package verity

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// The superblock (lib/verity/verity.c, struct verity_sb), all integers
// little-endian:
//
//	0   8   "verity\0\0"
//	8   4   version, 1
//	12  4   hash type
//	16  16  UUID, RFC 4122 byte order
//	32  32  algorithm, NUL-padded, lower case
//	64  4   data block size
//	68  4   hash block size
//	72  8   data blocks
//	80  2   salt size
//	82  6   zero
//	88  256 salt, zero after salt size bytes
//	344 168 zero
var superblockMagic = []byte("verity\x00\x00")

// MarshalSuperblock returns p's 512-byte superblock.
func (p *Params) MarshalSuperblock() ([]byte, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	b := make([]byte, SuperblockSize)
	copy(b, superblockMagic)
	binary.LittleEndian.PutUint32(b[8:], 1)
	binary.LittleEndian.PutUint32(b[12:], p.HashType)
	copy(b[16:32], p.UUID[:])
	copy(b[32:64], p.Hash)
	binary.LittleEndian.PutUint32(b[64:], uint32(p.DataBlockSize))
	binary.LittleEndian.PutUint32(b[68:], uint32(p.HashBlockSize))
	binary.LittleEndian.PutUint64(b[72:], p.DataBlocks)
	binary.LittleEndian.PutUint16(b[80:], uint16(len(p.Salt)))
	copy(b[88:88+MaxSaltSize], p.Salt)
	return b, nil
}

// ReadSuperblock reads the superblock at offset of r and returns its
// parameters, with HashOffset set to offset. It checks what veritysetup
// checks when it loads one (lib/verity/verity.c, VERITY_read_sb).
func ReadSuperblock(r io.ReaderAt, offset int64) (Params, error) {
	if offset < 0 || offset%SuperblockSize != 0 {
		return Params{}, fmt.Errorf("%w: hash offset %d (a multiple of 512)", ErrInvalid, offset)
	}
	b := make([]byte, SuperblockSize)
	if _, err := r.ReadAt(b, offset); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return Params{}, ErrNoSuperblock
		}
		return Params{}, err
	}
	return ParseSuperblock(b, offset)
}

// ParseSuperblock parses a 512-byte superblock read at offset.
func ParseSuperblock(b []byte, offset int64) (Params, error) {
	if len(b) < SuperblockSize || !bytes.Equal(b[:8], superblockMagic) {
		return Params{}, ErrNoSuperblock
	}
	bad := func(format string, a ...any) (Params, error) {
		return Params{}, fmt.Errorf("%w: "+format, append([]any{ErrSuperblock}, a...)...)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != 1 {
		return bad("version %d (only 1 exists)", v)
	}
	name := b[32:64]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	} else {
		return bad("algorithm name not terminated")
	}
	p := Params{
		HashType:      binary.LittleEndian.Uint32(b[12:]),
		Hash:          strings.ToLower(string(name)),
		DataBlockSize: int(binary.LittleEndian.Uint32(b[64:])),
		HashBlockSize: int(binary.LittleEndian.Uint32(b[68:])),
		DataBlocks:    binary.LittleEndian.Uint64(b[72:]),
		HashOffset:    offset,
	}
	copy(p.UUID[:], b[16:32])
	n := int(binary.LittleEndian.Uint16(b[80:]))
	if n > MaxSaltSize {
		return bad("salt of %d bytes (at most %d)", n, MaxSaltSize)
	}
	p.Salt = append([]byte{}, b[88:88+n]...)
	if err := p.Check(); err != nil {
		return bad("%v", strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return p, nil
}
