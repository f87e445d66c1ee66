package image

// In-place encryption and decryption with a detached header (cryptsetup
// reencrypt --encrypt/--decrypt --header): the data does not move, every
// sector is converted where it lies with reencrypt's fingerprinted windows
// (sameSpotWindows), and the header lives in a file of its own. See
// docs/REENCRYPT.md.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/sectors"
)

// errHeaderKind refuses to continue an operation with another kind of
// header than it started with; detached is the kind asked for now.
func errHeaderKind(detached bool) error {
	if detached {
		return fmt.Errorf("%w: the unfinished operation keeps its header in the image; continue it without a detached header", ErrBusy)
	}
	return fmt.Errorf("%w: the unfinished operation has a detached header; continue it with that header file", ErrBusy)
}

// EncryptDetachedInPlace encrypts the plaintext raw image img where it lies
// under a new detached header (o.Header with Detached set), which is
// written to hdr, synced, once every sector is done. Until then the new
// header waits in the journal; an interrupted run is continued with the
// same passphrase.
func EncryptDetachedInPlace(ctx context.Context, img, hdr File, js JournalStore, o EncryptInPlaceOptions) (*Result, error) {
	j, err := begin(img, js, OpEncrypt, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	if j == nil {
		if j, err = startEncryptDetached(img, js, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	st := j.st
	if st.Shift != 0 {
		return nil, errHeaderKind(true)
	}
	area, err := j.blob()
	if err != nil {
		return nil, err
	}
	h, err := header.Read(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	if st.Phase == phaseData {
		ciph, ss, err := journalCipher(h, area, o.Passphrase, -1, st)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		exts := []sectors.Extent{{SrcOffset: 0, DstOffset: 0, Length: st.DataLen, Sector: rawIV(0)}}
		defer sameSpotWindows(c, img, exts, ss, ciph.EncryptSectors, o.Pipeline)()
	}
	c.finish = func() error {
		if err := hdr.Truncate(int64(len(area))); err != nil {
			return fmt.Errorf("failed to size header file: %w", err)
		}
		if err := writeSyncAt(hdr, area, 0, "header file"); err != nil {
			return err
		}
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpEncrypt, Format: Raw, Header: h, Bytes: st.DataLen, Resumed: resumed}, nil
}

func startEncryptDetached(img File, js JournalStore, o EncryptInPlaceOptions) (*journal, error) {
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	if size == 0 || size%SectorSize != 0 {
		return nil, fmt.Errorf("%w (%d bytes)", ErrSize, size)
	}
	p := o.Header
	p.Detached = true
	if p.Rand == nil {
		p.Rand = o.Rand
	}
	luks2SectorSize(&p, size)
	if err := refuseAuthParams(p, "in-place encryption"); err != nil {
		return nil, err
	}
	h, vk, area, err := header.Format(o.Passphrase, p)
	if err != nil {
		return nil, err
	}
	clear(vk)
	ss := int64(h.Info().SectorSize)
	if size%ss != 0 {
		return nil, fmt.Errorf("%w: %d bytes are not whole %d-byte sectors", ErrUnaligned, size, ss)
	}
	w := alignWindow(o.window(0), ss)
	st := &state{
		Op: OpEncrypt, ImageSize: size, FinalSize: size, DataLen: size,
		Window: w, Windows: ceilDiv(size, w), RecordLen: recordLen(w, true),
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	j, err := createJournal(js, st, area)
	clear(area)
	return j, err
}

// DecryptDetachedInPlace decrypts img, whose detached header is hdr, where
// it lies. The header file is marked while the data is converted, and
// emptied at the end: its key slots are gone with it (cryptsetup leaves a
// LUKS2 header without key slots instead). slot -1 tries every key slot.
func DecryptDetachedInPlace(ctx context.Context, img, hdr File, js JournalStore, passphrase []byte, slot int, o InPlaceOptions) (*Result, error) {
	j, err := begin(img, js, OpDecrypt, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	if j == nil {
		if j, err = startDecryptDetached(img, hdr, js, passphrase, slot, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	st := j.st
	if st.Shift != 0 {
		return nil, errHeaderKind(true)
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	if st.Phase == phaseData {
		blob, err := j.blob()
		if err != nil {
			return nil, err
		}
		h, err := header.Read(bytes.NewReader(blob), 0, int64(len(blob)))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
		}
		ciph, ss, err := journalCipher(h, blob, passphrase, slot, st)
		if err != nil {
			return nil, err
		}
		defer ciph.Clear()
		if err := applyMark(hdr, 0, h); err != nil {
			return nil, err
		}
		exts := []sectors.Extent{{SrcOffset: 0, DstOffset: 0, Length: st.DataLen, Sector: rawIV(0)}}
		defer sameSpotWindows(c, img, exts, ss, ciph.DecryptSectors, o.Pipeline)()
	}
	c.finish = func() error {
		if err := hdr.Truncate(0); err != nil {
			return fmt.Errorf("failed to empty header file: %w", err)
		}
		if err := syncErr(hdr, "header file"); err != nil {
			return err
		}
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpDecrypt, Format: Raw, Bytes: st.DataLen, Resumed: resumed}, nil
}

func startDecryptDetached(img, hdr File, js JournalStore, passphrase []byte, slot int, o InPlaceOptions) (*journal, error) {
	loc, err := locate(img, hdr)
	if err != nil {
		return nil, err
	}
	h, err := header.Read(loc.hf, loc.area.off, loc.area.limit)
	if err != nil {
		return nil, err
	}
	if err := refuseAuth(h, "in-place decryption"); err != nil {
		return nil, err
	}
	if p := h.Info().PayloadOffset; p != 0 {
		return nil, fmt.Errorf("in-place decryption with a detached header needs the data at offset 0, not %d", p)
	}
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	data := size
	if ps := h.Info().PayloadSize; ps != 0 {
		data = min(data, ps)
	}
	ss := int64(h.Info().SectorSize)
	if data%ss != 0 {
		return nil, fmt.Errorf("%w: %d bytes of data are not whole %d-byte sectors", ErrTruncated, data, ss)
	}
	if err := checkCost(h, slot, o.AllowCost); err != nil {
		return nil, err
	}
	vk, _, err := h.Unlock(hdr, 0, passphrase, slot)
	if err != nil {
		return nil, err
	}
	clear(vk)
	blob := make([]byte, h.Info().AreaSize)
	if _, err := hdr.ReadAt(blob, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("failed to read header: %w", err)
	}
	w := alignWindow(o.window(0), ss)
	st := &state{
		Op: OpDecrypt, ImageSize: size, FinalSize: size, DataLen: data,
		Window: w, Windows: ceilDiv(data, w), RecordLen: recordLen(w, true),
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, blob)
}
