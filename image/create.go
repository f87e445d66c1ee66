package image

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/header"
)

// ErrEmptySize reports a new image of no size or a negative one.
var ErrEmptySize = errors.New("image size must be positive")

// zeros reads as an endless run of zero bytes: the plaintext of a new,
// empty image.
type zeros struct{}

func (zeros) ReadAt(p []byte, _ int64) (int, error) {
	clear(p)
	return len(p), nil
}

// zeroPlain is a raw plaintext image of size zero bytes that is never read
// from a file: its data map is known to be empty, so a qcow2 output
// allocates nothing, and an authenticated one seals zeros.
func zeroPlain(size int64) *Plain {
	return &Plain{Format: Raw, Size: size, guest: zeros{}, mapped: true}
}

// Create writes a new, empty encrypted image of virtual size bytes to dst,
// an empty regular file, with o.Passphrase in key slot 0, and returns its
// header. Nothing is read: the options are Encrypt's, with an empty Format
// meaning raw.
//
//   - Raw LUKS is what a file of the payload offset plus size bytes holds
//     after cryptsetup luksFormat: the header area, then the payload left
//     as a hole. It is never written, so it decrypts to whatever the
//     cipher makes of zero ciphertext, not to zeros; with HeaderFile the
//     header goes there and dst is the hole alone.
//   - Qcow2 is a qcow2+LUKS image without a single data cluster: it reads
//     as zeros.
//   - An authenticated LUKS2 image (o.Header.Integrity) has every sector
//     of zeros sealed with its tag, since a sector never written fails its
//     check; this writes the whole size.
//
// size must be as CheckCreate says.
func Create(ctx context.Context, dst *os.File, size int64, o EncryptOptions) (header.Header, error) {
	if err := CheckCreate(size, o); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.Format == "" {
		o.Format = Raw
	}
	out, err := outputOf(o.Format)
	if err != nil {
		return nil, err
	}
	return out.create(ctx, dst, size, o)
}

// CheckCreate returns the error Create gives for size and o before it
// formats anything, so that a caller can refuse them before it asks for a
// passphrase: size must be positive and a whole number of 512-byte
// sectors, of the LUKS2 sector size if one is given, and of 4096 bytes with
// integrity; the format must carry the header's version
// (Format.CarriesVersion).
func CheckCreate(size int64, o EncryptOptions) error {
	if size <= 0 {
		return fmt.Errorf("%w, not %d bytes", ErrEmptySize, size)
	}
	if size%SectorSize != 0 {
		return fmt.Errorf("%w (%d bytes)", ErrSize, size)
	}
	if o.Header.Version == 2 && o.Header.SectorSize > 0 && size%int64(o.Header.SectorSize) != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrUnaligned, size, o.Header.SectorSize)
	}
	if o.Header.Integrity != "" && size%4096 != 0 {
		return fmt.Errorf("%w: an image with integrity holds whole 4096-byte blocks, not %d bytes", ErrUnaligned, size)
	}
	return o.Format.CarriesVersion(o.Header.Version)
}

// createRaw formats a raw LUKS header (attached, or detached into
// o.HeaderFile) and leaves its payload of size bytes unwritten.
func createRaw(ctx context.Context, dst *os.File, size int64, o EncryptOptions) (header.Header, error) {
	if err := (rawOutput{}).params(&o.Header, size, o.HeaderFile != nil); err != nil {
		return nil, err
	}
	f, err := FormatHeader(o.Passphrase, o.Header)
	if err != nil {
		return nil, err
	}
	defer f.Clear()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if ss := f.Key.Cipher.Geometry().SectorSize; size%int64(ss) != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrUnaligned, size, ss)
	}
	payload := f.Header.Info().PayloadOffset
	if payload > 0 {
		if err := writeArea(dst, f.Area); err != nil {
			return nil, err
		}
	}
	if err := dst.Truncate(payload + size); err != nil {
		return nil, fmt.Errorf("failed to size output: %w", err)
	}
	if o.HeaderFile != nil {
		if err := writeWholeArea(o.HeaderFile, f); err != nil {
			return nil, err
		}
	}
	return f.Header, nil
}
