// Package image reads and writes encrypted disk images: raw LUKS1 and
// LUKS2 files, as cryptsetup and qemu's "luks" driver make them, and qcow2
// files with an embedded LUKS1 header (qemu's encrypt.format=luks). It
// decides where the encrypted sectors live in the file and which IV sector
// number each one gets, and drives package sectors to move the data
// through the header's cipher (package header/cipher). Each kind of
// container (raw, a detached --header file, qcow2, and a LUKS2 payload
// with integrity tags) is one implementation of one interface
// (container.go and container_*.go); nothing else asks which kind an image
// is.
//
// The main entry points:
//
//   - [OpenPlain] opens a plaintext raw or qcow2 image, and [Encrypt] (or
//     [EncryptRaw], [Create] for an empty image) writes it encrypted, best
//     into a [CreateOutput] file that appears under its name only when
//     complete; the package example "Encrypt" (example_test.go) shows the
//     whole round trip.
//   - [Open] reads an encrypted image's header ([OpenDetached] with a
//     cryptsetup --header file), [Encrypted.Unlock] turns a passphrase into
//     a [Key], and then [Encrypted.DecryptTo] writes the plaintext out,
//     [Encrypted.View] gives it as an io.ReaderAt and io.WriterAt that
//     decrypts and encrypts in place, and [NewStorage] hands that view to
//     go-diskfs; the example "Partitions" lists a GPT disk's partitions
//     that way.
//   - The key slots change through [Encrypted.AddKey], [Encrypted.RemoveKey],
//     [Encrypted.ChangeKey], [Encrypted.KillSlot] and [Encrypted.Erase], each
//     in the order the format commits it.
//   - In place and crash-safe, with a journal ([Sidecar]): [Reencrypt] (a
//     new volume key), [EncryptInPlace] and [DecryptInPlace]; [Encrypted.Clone]
//     copies an image under a new key in one pass.
//
// Errors name no command-line flags; the sentinels (ErrBusy, ErrCorrupt,
// header.ErrNoMatchingKeyslot, ...) are for errors.Is.
//
// IV numbering (the rule that decides interoperability):
//
//   - raw LUKS: sector 0 is the first 512 bytes of the payload, at
//     PayloadOffset*512 in the file (dm-crypt and qemu block/crypto.c);
//   - qcow2+LUKS: the host file offset of the data divided by 512
//     (qemu docs/interop/qcow2.txt, "the physical disk sector"); only
//     allocated clusters are stored, and compressed clusters are plaintext;
//   - LUKS2 with integrity: the logical sector of the dm-integrity device,
//     which is also the sector's place in the plaintext.
package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/sectors"
)

// SectorSize is the LUKS1 encryption unit and the granularity of images
// (header.SectorSize, the 512-byte unit).
const SectorSize = header.SectorSize

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
	// ErrUnaligned reports plaintext that is not a whole number of the
	// header's sectors (LUKS2 sectors may be up to 4096 bytes).
	ErrUnaligned = errors.New("image size is not a multiple of the sector size")
	// ErrDetached reports a detached LUKS header (payload offset 0) opened
	// as an image: its data is in another file (OpenDetached, --header).
	ErrDetached error = detachedError{}
	// ErrLUKS2Qcow2 refuses a LUKS2 header inside qcow2: qemu reads and
	// writes LUKS1 only there.
	ErrLUKS2Qcow2 = errors.New("qcow2 images carry LUKS1 only (qemu has no LUKS2 support)")
)

// CarriesVersion returns ErrLUKS2Qcow2 when a container of format f
// cannot hold a LUKS header of version (0 meaning header.DefaultVersion):
// qcow2 holds LUKS1 only, raw either version. It is the one statement of
// that rule; callers ask it before they make or convert a header.
func (f Format) CarriesVersion(version int) error {
	if f == Qcow2 && version != 0 && version != 1 {
		return ErrLUKS2Qcow2
	}
	return nil
}

// Pipeline carries the tuning and progress hooks shared by every operation
// that moves the payload.
type Pipeline struct {
	Jobs      int // workers; 0 = GOMAXPROCS
	ChunkSize int // bytes per chunk; 0 = the sectors default
	// Progress, when set, is called with the bytes done so far and the
	// total, in order, from a single goroutine.
	Progress func(done, total int64)
}

// options are the sectors options of a run over a whole image: collected
// first (sectors.Options.Collect), with progress over total bytes.
func (p Pipeline) options(total int64, sparse bool) sectors.Options {
	o := sectors.Options{Jobs: p.Jobs, ChunkSize: p.ChunkSize, SectorSize: SectorSize, Sparse: sparse, Collect: true}
	if p.Progress != nil {
		p.Progress(0, total)
		o.Progress = func(done int64) { p.Progress(done, total) }
	}
	return o
}

// Encrypted is an opened encrypted image: its LUKS header and its
// container, which says where the header and payload are (container.go);
// the exported fields describe the container.
type Encrypted struct {
	Format Format
	Header header.Header
	// HeaderOffset is the byte offset of the LUKS header in the file.
	HeaderOffset int64
	// PayloadOffset and PayloadSize locate the encrypted data of a raw
	// image: PayloadSize is the virtual (plaintext) size.
	PayloadOffset int64
	PayloadSize   int64
	FileSize      int64
	// Qcow2 is the parsed qcow2 header of a qcow2+LUKS image, else nil.
	Qcow2 *qcow2.Image
	// AllowCost lets Unlock run whatever its key derivation costs; without
	// it an estimate over MaxUnlockTime or the memory limit (half of the
	// RAM) is refused with a *CostError before any work starts.
	AllowCost bool
	// AllowNullCipher lets Unlock and KeyFromVolumeKey use a LUKS2 keyslot
	// or data segment under the null cipher, which they refuse by default
	// (header.ErrNullCipher): such a keyslot opens only with an empty
	// passphrase, and such data is not encrypted at all.
	AllowNullCipher bool

	c container
}

// hdr is the file the header and its key slots are read from.
func (e *Encrypted) hdr() io.ReaderAt { return e.c.area().r }

// OpenHeader reads a detached LUKS header file, as cryptsetup's --header
// names one: the header and its key slots, with the data in another file
// at the header's payload offset (normally 0). The result serves the key
// and header commands, which change only the header file; OpenDetached
// pairs it with the data.
func OpenHeader(f *os.File) (*Encrypted, error) {
	a, h, err := openHeaderFile(f)
	if err != nil {
		return nil, err
	}
	return newEncrypted(headerOnly(a, h), h, a.limit), nil
}

// regularSize is the size of f, which must be a regular file.
func regularSize(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return st.Size(), nil
}

// OpenDetached opens the data file data under the detached header file
// hdr: the payload starts at the header's payload offset in data and runs
// to its end (or the header's fixed size).
func OpenDetached(hdr, data *os.File) (*Encrypted, error) {
	a, h, err := openHeaderFile(hdr)
	if err != nil {
		return nil, fmt.Errorf("header %s: %w", hdr.Name(), err)
	}
	size, err := regularSize(data)
	if err != nil {
		return nil, err
	}
	c, err := newContainer(a, nil, h, data, size, data.Name())
	if err != nil {
		return nil, err
	}
	return newEncrypted(c, h, size), nil
}

// Open reads the LUKS header of an encrypted image, raw LUKS or
// qcow2+LUKS (detected by magic), and checks that the file holds the whole
// header area and, for raw LUKS, a payload of whole sectors. Errors wrap
// header.ErrNotLUKS, header.ErrCorrupt, ErrTruncated, ErrNotEncrypted or
// qcow2.ErrCorrupt/ErrUnsupported.
func Open(f *os.File) (*Encrypted, error) {
	size, err := regularSize(f)
	if err != nil {
		return nil, err
	}
	return openImage(f, size)
}

// openImage opens the encrypted image r of size bytes.
func openImage(r io.ReaderAt, size int64) (*Encrypted, error) {
	a, im, err := findArea(r, size)
	if err != nil {
		return nil, err
	}
	h, err := header.Read(r, a.off, a.limit)
	if err != nil {
		return nil, err
	}
	c, err := newContainer(a, im, h, r, size, "file")
	if err != nil {
		return nil, err
	}
	return newEncrypted(c, h, size), nil
}

// Key is an unlocked volume key with its sector cipher.
type Key struct {
	// Cipher is the payload's sector cipher. For an authenticated image it
	// refuses every call (header.ErrAuthenticated): use Auth.
	Cipher cipher.Sector
	// Auth is the authenticated cipher of an image with integrity, else
	// nil.
	Auth   cipher.AuthSector
	Slot   int // the key slot that matched
	volume []byte
}

// VolumeKey returns the raw volume key. Callers must not keep or log it.
func (k *Key) VolumeKey() []byte { return k.volume }

// Clear wipes the volume key and the expanded cipher keys.
func (k *Key) Clear() {
	secmem.Free(k.volume)
	k.volume = nil
	k.Cipher.Clear()
}

// MaxUnlockTime is the estimated unlock time Unlock accepts without
// AllowCost. cryptsetup's defaults take 2 s a slot.
const MaxUnlockTime = time.Minute

// ErrCostly is matched by every *CostError.
var ErrCostly = errors.New("the key derivation would cost more than the limit")

// CostError refuses an unlock whose estimated cost is over the limits.
type CostError struct {
	Cost        header.Cost
	TimeLimit   time.Duration
	MemoryLimit uint64
}

func (c *CostError) Error() string {
	mem := ""
	if c.Cost.Memory > 0 {
		mem = fmt.Sprintf(" and %d MiB of memory", c.Cost.Memory>>20)
	}
	return fmt.Sprintf("unlocking would take about %v%s (%s), over the limit of %v and %d MiB",
		c.Cost.Time.Round(time.Second), mem, c.Cost.What, c.TimeLimit, c.MemoryLimit>>20)
}

func (c *CostError) Unwrap() error { return ErrCostly }

// checkCost refuses an unlock of slot over the limits, unless allowed.
func (e *Encrypted) checkCost(slot int) error {
	return checkCost(e.Header, slot, e.AllowCost)
}

// checkCost is a *CostError when an unlock of slot of h is estimated over
// the limits and not allowed, else nil.
func checkCost(h header.Header, slot int, allow bool) error {
	if allow {
		return nil
	}
	c := h.UnlockCost(slot)
	if lim := header.MemoryLimit(); c.Time > MaxUnlockTime || c.Memory > lim {
		return &CostError{Cost: c, TimeLimit: MaxUnlockTime, MemoryLimit: lim}
	}
	return nil
}

// Unlock derives the volume key from a passphrase; slot -1 tries every
// active slot. A wrong passphrase gives header.ErrNoMatchingKeyslot; a key
// derivation dearer than the limits, a *CostError (see AllowCost).
func (e *Encrypted) Unlock(passphrase []byte, slot int) (*Key, error) {
	if err := e.checkCost(slot); err != nil {
		return nil, err
	}
	h := e.policy()
	vk, used, err := h.Unlock(e.hdr(), e.HeaderOffset, passphrase, slot)
	if err != nil {
		return nil, err
	}
	return newKey(h, vk, used)
}

// policy is the header as the caller allows it to be used (AllowNullCipher).
func (e *Encrypted) policy() header.Header {
	if e.AllowNullCipher {
		return header.AllowNullCipher(e.Header)
	}
	return e.Header
}

// newKey wraps a volume key of h with its cipher. The key moves to package
// secmem's memory (locked, out of core dumps), and hvk is cleared.
func newKey(h header.Header, hvk []byte, slot int) (*Key, error) {
	vk := secmem.Clone(hvk)
	clear(hvk)
	if h.Info().Integrity != "" {
		a, err := h.NewAuthSector(vk)
		if err != nil {
			secmem.Free(vk)
			return nil, err
		}
		return &Key{Cipher: untagged{a}, Auth: a, Slot: slot, volume: vk}, nil
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		secmem.Free(vk)
		return nil, err
	}
	return &Key{Cipher: c, Slot: slot, volume: vk}, nil
}

// Formatted is a new LUKS header, its header area (the phdr or metadata
// and the key slots, up to the payload) and its volume key, as
// FormatHeader makes them, ready for EncryptTo.
type Formatted struct {
	Header header.Header
	// Area holds the first len(Area) bytes of the header area, which is
	// AreaSize bytes: the rest are zeros (header.FormatSparse).
	Area     []byte
	AreaSize int64
	Key      *Key
}

// FormatHeader makes a new LUKS header with passphrase in key slot 0 and a
// random volume key, or p.VolumeKey. Clear the result after use.
func FormatHeader(passphrase []byte, p header.Params) (*Formatted, error) {
	h, vk, area, size, err := header.FormatSparse(passphrase, p)
	if err != nil {
		return nil, err
	}
	k, err := newKey(h, vk, 0)
	if err != nil {
		return nil, err
	}
	return &Formatted{Header: h, Area: area, AreaSize: size, Key: k}, nil
}

// Clear wipes the volume key and the key material in the area.
func (f *Formatted) Clear() {
	f.Key.Clear()
	clearArea(f.Area)
}

// Decrypt writes the plaintext of the image to dst, an empty regular file,
// as a raw image. All-zero plaintext is left as holes.
func (e *Encrypted) Decrypt(ctx context.Context, dst *os.File, k *Key, p Pipeline) error {
	return e.DecryptTo(ctx, dst, k, DecryptOptions{Format: Raw, Pipeline: p})
}

// DecryptOptions configure a decryption.
type DecryptOptions struct {
	// Format of the output: raw, or plain qcow2. Empty means the input's
	// container format.
	Format Format
	// ClusterSize of a qcow2 output; 0 means the input's cluster size for
	// qcow2 input, else 64 KiB.
	ClusterSize int64
	Pipeline    Pipeline
	// AllowCorrupt, for an authenticated image, writes sectors that fail
	// their integrity check as zeros and goes on: the whole output is
	// written and DecryptTo returns the *CorruptError listing them.
	// Without it the first bad sector stops the run with that error.
	AllowCorrupt bool
}

// DecryptTo writes the plaintext of the image to dst, an empty regular
// file, in the chosen format. Zero plaintext stays sparse: holes in a raw
// output, unallocated clusters in a qcow2 output.
func (e *Encrypted) DecryptTo(ctx context.Context, dst *os.File, k *Key, o DecryptOptions) error {
	if o.Format == "" {
		o.Format = e.Format
	}
	var w io.WriterAt = dst
	var qw *qcowOut
	switch o.Format { // the output's format, not the container's
	case Raw:
		if err := dst.Truncate(e.PayloadSize); err != nil {
			return fmt.Errorf("failed to size output: %w", err)
		}
	case Qcow2:
		cs := o.ClusterSize
		if cs == 0 {
			cs = e.c.clusterSize()
		}
		var err error
		if qw, err = newQcowOut(dst, e.PayloadSize, cs); err != nil {
			return err
		}
		w = qw
	default:
		return fmt.Errorf("unknown output format %q (want raw or qcow2)", o.Format)
	}
	err := e.c.decrypt(ctx, w, k, o)
	if err != nil && !(o.AllowCorrupt && errors.Is(err, ErrCorrupt)) {
		return err
	}
	if qw != nil {
		if cerr := qw.close(); cerr != nil {
			return cerr
		}
	}
	return err
}

// EncryptOptions configure a new encrypted image.
type EncryptOptions struct {
	Header     header.Params
	Passphrase []byte
	// Format of the output: raw LUKS, or qcow2 with an embedded LUKS
	// header. Empty means the input's format.
	Format Format
	// ClusterSize of a qcow2 output; 0 means 64 KiB.
	ClusterSize int64
	Pipeline    Pipeline
	// HeaderFile, if set, receives a detached header (cryptsetup
	// luksFormat --header): the output is then the ciphertext alone, from
	// offset 0, raw only.
	HeaderFile io.WriterAt
	// HeaderMade, if set, is called once the new header is made (its key
	// slot's KDF benchmarked and run), before any data is written, so a
	// caller can tell the key derivation's time from the data's.
	HeaderMade func()
	// Verity, if set, asks for the dm-verity tree of the output, made in
	// the same pass (encrypt_verity.go); raw outputs without integrity.
	Verity *EncryptVerity
}

// EncryptRaw encrypts the plaintext raw image src into a raw LUKS1 image
// in dst. See Encrypt.
func EncryptRaw(ctx context.Context, dst, src *os.File, o EncryptOptions) (header.Header, error) {
	p, err := OpenPlain(src)
	if err != nil {
		return nil, err
	}
	if p.Format != Raw {
		return nil, fmt.Errorf("%s: not a raw image", src.Name())
	}
	o.Format = Raw
	return Encrypt(ctx, dst, p, o)
}

// Encrypt writes an encrypted image of the plaintext image src to dst, an
// empty regular file, and returns its new header.
//
// A raw LUKS output is laid out as cryptsetup luksFormat --type luks1 lays
// it out: the header area, then the payload at a 1 MiB boundary with IV
// sector 0 at its start; every sector is encrypted, zeros included, since
// raw LUKS has no allocation map. A qcow2 output embeds the LUKS header in
// its own clusters, as qemu does, and stores only clusters holding
// non-zero data, encrypted with IV sector = host offset / 512. A LUKS2
// header without a sector size gets cryptsetup's for a file: 4096 bytes,
// or 512 for an input that is not whole 4096-byte sectors.
func Encrypt(ctx context.Context, dst *os.File, src *Plain, o EncryptOptions) (header.Header, error) {
	if o.Format == "" {
		o.Format = src.Format
	}
	out, err := outputOf(o.Format)
	if err != nil {
		return nil, err
	}
	if err := checkVerity(o.Verity, o.Format, o.Header.Integrity != ""); err != nil {
		return nil, err
	}
	if err := out.params(&o.Header, src.Size, o.HeaderFile != nil); err != nil {
		return nil, err
	}
	f, err := FormatHeader(o.Passphrase, o.Header)
	if err != nil {
		return nil, err
	}
	defer f.Clear()
	if o.HeaderMade != nil {
		o.HeaderMade()
	}
	if err := out.encrypt(ctx, dst, src, f, o); err != nil {
		return nil, err
	}
	if o.HeaderFile != nil {
		if err := writeWholeArea(o.HeaderFile, f); err != nil {
			return nil, err
		}
	}
	return f.Header, nil
}

// EncryptTo writes the plaintext image src, encrypted under the header and
// key of f, to dst, an empty regular file: the counterpart of
// Encrypted.DecryptTo. o.Header and o.Passphrase are not used. The layout
// is Encrypt's.
func EncryptTo(ctx context.Context, dst *os.File, src *Plain, f *Formatted, o EncryptOptions) error {
	if o.Format == "" {
		o.Format = src.Format
	}
	out, err := outputOf(o.Format)
	if err != nil {
		return err
	}
	if err := checkVerity(o.Verity, o.Format, f.Key.Auth != nil); err != nil {
		return err
	}
	return out.encrypt(ctx, dst, src, f, o)
}

// newFile reports whether w is the new output file of a run (an
// *os.File, not a qcow2 writer that allocates clusters as it is written),
// which the workers may write in any order (sectors.Options.Unordered).
func newFile(w io.WriterAt) bool {
	_, ok := w.(*os.File)
	return ok
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

type detachedError struct{}

func (detachedError) Error() string {
	return "this is a detached LUKS header (payload offset 0): the data it encrypts is in another file"
}

// Is keeps the exit status of a header that is not an image by itself.
func (detachedError) Is(target error) bool { return target == header.ErrCorrupt }
