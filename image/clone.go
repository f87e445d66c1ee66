package image

import (
	"context"
	"os"
)

// Clone writes a per-instance copy of the image e (read from src with the
// unlocked key k) to dst, an empty regular file, under the new header and
// key of f, in one pass: every sector is decrypted with the old key and
// encrypted with the new one in memory, so no plaintext reaches the disk.
// o says the output's format (empty: the source's), cluster size and
// pipeline; a qcow2 source stays sparse, and a qcow2 output stores only
// the clusters holding data. f is FormatHeader's, with a new volume key
// and UUID.
func (e *Encrypted) Clone(ctx context.Context, src, dst *os.File, k *Key, f *Formatted, o EncryptOptions) error {
	if SameFile(src.Name(), dst.Name()) {
		return ErrSameFile
	}
	v, err := e.View(src, k, true)
	if err != nil {
		return err
	}
	defer v.Close()
	p, err := e.c.plain(v)
	if err != nil {
		return err
	}
	if o.Format == "" {
		o.Format = e.Format
	}
	return EncryptTo(ctx, dst, p, f, o)
}
