// Package image reads and writes encrypted disk images: raw LUKS1 files, as
// cryptsetup and qemu's "luks" driver make them, and (later) qcow2 with an
// embedded LUKS1 header. It decides where the encrypted sectors live in the
// file and which IV sector number each one gets, and drives package sectors
// to move the data through the essiv transform.
//
// IV numbering (the rule that decides interoperability):
//
//   - raw LUKS: sector 0 is the first 512 bytes of the payload, at
//     PayloadOffset*512 in the file (dm-crypt and qemu block/crypto.c);
//   - qcow2+LUKS: the host file offset of the data divided by 512
//     (qemu docs/interop/qcow2.txt, "the physical disk sector").
package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/essiv"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/sectors"
)

// SectorSize is the LUKS1 encryption unit and the granularity of images.
const SectorSize = 512

// Format names an image container format.
type Format string

const (
	Raw   Format = "raw"
	Qcow2 Format = "qcow2"
)

var (
	// ErrSize reports plaintext whose size is not a whole number of
	// 512-byte sectors.
	ErrSize = errors.New("image size is not a multiple of 512 bytes")
	// ErrTruncated reports an encrypted image whose payload is shorter
	// than its header says. Callers treat it like a corrupt header.
	ErrTruncated = errors.New("encrypted payload is truncated")
	// ErrSameFile reports an output that is the input itself.
	ErrSameFile = errors.New("input and output are the same file")
)

// Pipeline carries the tuning and progress hooks shared by every operation
// that moves the payload.
type Pipeline struct {
	Jobs      int // workers; 0 = GOMAXPROCS
	ChunkSize int // bytes per chunk; 0 = the sectors default
	// Progress, when set, is called with the bytes done so far and the
	// total, in order, from a single goroutine.
	Progress func(done, total int64)
}

func (p Pipeline) options(total int64, sparse bool) sectors.Options {
	o := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: SectorSize, Sparse: sparse}
	if p.Progress != nil {
		p.Progress(0, total)
		o.Progress = func(done int64) { p.Progress(done, total) }
	}
	return o
}

// Encrypted is an opened encrypted image: its container format, LUKS
// header and where the header and payload are.
type Encrypted struct {
	Format Format
	Header *header.Header
	// HeaderOffset is the byte offset of the LUKS header in the file.
	HeaderOffset int64
	// PayloadOffset and PayloadSize locate the encrypted data of a raw
	// image: PayloadSize is the virtual (plaintext) size.
	PayloadOffset int64
	PayloadSize   int64
	FileSize      int64

	f io.ReaderAt
}

// Open reads the LUKS header of an encrypted image and checks that the
// file holds the whole header area and a payload of whole sectors. Errors
// wrap header.ErrNotLUKS, header.ErrCorrupt or ErrTruncated.
func Open(f *os.File) (*Encrypted, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return openRaw(f, st.Size())
}

func openRaw(r io.ReaderAt, size int64) (*Encrypted, error) {
	h, err := header.Read(r, 0, size)
	if err != nil {
		return nil, err
	}
	e := &Encrypted{Format: Raw, Header: h, FileSize: size, f: r}
	e.PayloadOffset = int64(h.PayloadOffset) * SectorSize
	if h.PayloadOffset == 0 {
		return nil, fmt.Errorf("%w: detached-header images (payload offset 0) are not supported", header.ErrCorrupt)
	}
	if size < e.PayloadOffset {
		return nil, fmt.Errorf("%w: file is %d bytes, payload starts at %d", ErrTruncated, size, e.PayloadOffset)
	}
	e.PayloadSize = size - e.PayloadOffset
	if e.PayloadSize%SectorSize != 0 {
		return nil, fmt.Errorf("%w: payload of %d bytes is not a whole number of sectors", ErrTruncated, e.PayloadSize)
	}
	return e, nil
}

// Key is an unlocked volume key with its sector cipher.
type Key struct {
	Cipher *essiv.Cipher
	Slot   int // the key slot that matched
	volume []byte
}

// VolumeKey returns the raw volume key. Callers must not keep or log it.
func (k *Key) VolumeKey() []byte { return k.volume }

// Clear wipes the volume key and the expanded cipher keys.
func (k *Key) Clear() {
	clear(k.volume)
	k.Cipher.Clear()
}

// Unlock derives the volume key from a passphrase; slot -1 tries every
// active slot. A wrong passphrase gives header.ErrNoMatchingKeyslot.
func (e *Encrypted) Unlock(passphrase []byte, slot int) (*Key, error) {
	vk, used, err := e.Header.Unlock(e.f, e.HeaderOffset, passphrase, slot)
	if err != nil {
		return nil, err
	}
	c, err := e.Header.NewSectorCipher(vk)
	if err != nil {
		clear(vk)
		return nil, err
	}
	return &Key{Cipher: c, Slot: used, volume: vk}, nil
}

// Decrypt writes the plaintext of a raw LUKS image to dst, which must be
// an empty regular file. All-zero plaintext chunks are left as holes.
func (e *Encrypted) Decrypt(ctx context.Context, dst *os.File, k *Key, p Pipeline) error {
	if err := dst.Truncate(e.PayloadSize); err != nil {
		return fmt.Errorf("failed to size output: %w", err)
	}
	ext := []sectors.Extent{{SrcOffset: e.PayloadOffset, DstOffset: 0, Length: e.PayloadSize, Sector: 0}}
	t := func(d, s []byte, first uint64) { k.Cipher.DecryptSectors(d, s, first, SectorSize) }
	return sectors.Run(ctx, dst, e.f, ext, t, p.options(e.PayloadSize, true))
}

// EncryptOptions configure a new encrypted image.
type EncryptOptions struct {
	Header     header.Params
	Passphrase []byte
	Pipeline   Pipeline
}

// EncryptRaw writes a raw LUKS1 image of the plaintext raw image src to
// dst, an empty regular file: the header area as cryptsetup lays it out,
// then the payload, sector 0 at the payload start. It returns the new
// header.
func EncryptRaw(ctx context.Context, dst, src *os.File, o EncryptOptions) (*header.Header, error) {
	st, err := src.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size%SectorSize != 0 {
		return nil, fmt.Errorf("%s: %w (%d bytes)", src.Name(), ErrSize, size)
	}
	h, vk, area, err := header.Format(o.Passphrase, o.Header)
	if err != nil {
		return nil, err
	}
	defer clear(vk)
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		return nil, err
	}
	defer c.Clear()
	if _, err := dst.WriteAt(area, 0); err != nil {
		return nil, fmt.Errorf("failed to write header: %w", err)
	}
	payload := int64(h.PayloadOffset) * SectorSize
	if err := dst.Truncate(payload + size); err != nil {
		return nil, fmt.Errorf("failed to size output: %w", err)
	}
	ext := []sectors.Extent{{SrcOffset: 0, DstOffset: payload, Length: size, Sector: 0}}
	t := func(d, s []byte, first uint64) { c.EncryptSectors(d, s, first, SectorSize) }
	if err := sectors.Run(ctx, dst, src, ext, t, o.Pipeline.options(size, false)); err != nil {
		return nil, err
	}
	return h, nil
}

// SameFile reports whether two paths name the same existing file.
func SameFile(a, b string) bool {
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false
	}
	return os.SameFile(sa, sb)
}
