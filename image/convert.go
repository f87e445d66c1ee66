package image

// Conversion of a raw image's header between LUKS1 and LUKS2, in place.
// See docs/REENCRYPT.md ("convert") for the order of writes.

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/cryptimg/cryptimg/header"
)

// ConvertOptions configure Convert.
type ConvertOptions struct {
	// Version is the LUKS version to convert to: 1 or 2; 0 only resumes
	// (with Resume), to the version the unfinished conversion chose.
	Version int
	// Resume requires an unfinished conversion to continue.
	Resume bool
	// Rand is the source of the LUKS2 header salts; nil means crypto/rand.
	Rand io.Reader
}

// Convert rewrites the header of a raw LUKS image in the other LUKS
// version, as cryptsetup convert does (header.Convert); the data is not
// touched and no key is needed. Conversion moves the key material over
// itself, so the new header area goes to the journal first and the image
// is marked while it is written: a crash leaves the old header, or a
// marked image that running Convert again finishes.
func Convert(ctx context.Context, img File, js JournalStore, o ConvertOptions) (*Result, error) {
	j, err := begin(img, js, OpConvert, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	if j == nil {
		if j, err = startConvert(img, js, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	area, err := j.blob()
	if err != nil {
		return nil, err
	}
	nh, err := header.Read(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	if v := nh.Info().Version; resumed && o.Version != 0 && v != o.Version {
		return nil, fmt.Errorf("%w: the unfinished conversion is to LUKS%d, not LUKS%d", ErrBusy, v, o.Version)
	}
	st := j.st
	c := &converter{img: img, j: j}
	c.finish = func() error {
		// Mark the image: the magic of the first copy, and of the LUKS2
		// second copy, which cryptsetup would otherwise restore the first
		// one from. Then the new area from the end backwards: the key
		// material, the rest (a LUKS2 second copy becomes valid only
		// after the key material it names is durable), the first sector.
		m := make([]byte, 6)
		header.Mark(m)
		for i, off := range []int64{0, st.Shift} {
			if i > 0 && off == 0 {
				continue
			}
			if _, err := img.WriteAt(m, off); err != nil {
				return fmt.Errorf("failed to write image marker: %w", err)
			}
		}
		if err := syncErr(img, "image marker"); err != nil {
			return err
		}
		const meta = 32 << 10 // both LUKS2 copies of 16 KiB; LUKS1's phdr and first key material
		for _, part := range [][2]int64{{meta, int64(len(area))}, {SectorSize, meta}, {0, SectorSize}} {
			if part[0] >= part[1] {
				continue
			}
			if err := writeSyncAt(img, area[part[0]:part[1]], part[0], "header"); err != nil {
				return err
			}
		}
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpConvert, Format: Raw, Header: nh, Resumed: resumed}, nil
}

func startConvert(img File, js JournalStore, o ConvertOptions) (*journal, error) {
	loc, err := locateLUKS(img)
	if err != nil {
		return nil, err
	}
	h, err := header.Read(img, loc.area.off, loc.area.limit)
	if err != nil {
		return nil, err
	}
	if err := loc.convertible(o.Version); err != nil {
		return nil, err
	}
	size, err := storageSize(img)
	if err != nil {
		return nil, err
	}
	_, area, err := header.Convert(img, 0, size, h, o.Version, o.Rand)
	if err != nil {
		return nil, err
	}
	st := &state{Op: OpConvert, ImageSize: size, FinalSize: size, Window: SectorSize, RecordLen: recordLen(SectorSize, false)}
	if l2, ok := h.(*header.LUKS2); ok {
		st.Shift = l2.MetadataSize()
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, err
	}
	return createJournal(js, st, area)
}
