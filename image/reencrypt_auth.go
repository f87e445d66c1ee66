package image

// Reencryption of authenticated images: every sector is verified and
// decrypted with the old key, sealed with the new one, and written back
// with its new tag, window by window, crash-safely. See docs/REENCRYPT.md.

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/integrity"
	"github.com/cryptimg/cryptimg/sectors"
)

// authRecordLen is the record of an authenticated reencryption: the
// fingerprints and the window's new tags.
func authRecordLen(window, sectorSize int64, tagSize int) int64 {
	n := recordLen(window, true) + window/sectorSize*int64(tagSize)
	return (n + SectorSize - 1) / SectorSize * SectorSize
}

// reencryptAuthCiphers is reencryptCiphers for authenticated headers.
func reencryptAuthCiphers(loc *located, oh, nh header.Header, area []byte, passes [][]byte) (oldA, newA cipher.AuthSector, err error) {
	unlock := func(h header.Header, r interface {
		ReadAt([]byte, int64) (int, error)
	}, base int64) (cipher.AuthSector, error) {
		err := header.ErrNoMatchingKeyslot
		for _, p := range passes {
			var vk []byte
			vk, _, err = h.Unlock(r, base, p, -1)
			if err == nil {
				c, err := h.NewAuthSector(vk)
				clear(vk)
				return c, err
			}
			if !errors.Is(err, header.ErrNoMatchingKeyslot) {
				return nil, err
			}
		}
		return nil, err
	}
	if oldA, err = unlock(oh, loc.hf, loc.area.off); err != nil {
		return nil, nil, err
	}
	if newA, err = unlock(nh, bytes.NewReader(area), 0); err != nil {
		oldA.Clear()
		return nil, nil, err
	}
	return oldA, newA, nil
}

// authWindows sets c's steps for the reencryption of an authenticated
// image. Window k is read with its tags, verified and converted in memory,
// and its progress record carries the fingerprints of the old data and the
// new tags; then the data is written and synced, then the tags. A redo
// after a crash finds the sectors still holding old data by their
// fingerprints (while any does, no new tag was written, so their old tags
// are on disk), converts them again with the IVs the record keeps (the
// same bytes as the step's), and writes every tag from the record.
func authWindows(c *converter, img File, g *integrity.Geometry, exts []sectors.Extent, oldA, newA cipher.AuthSector, p Pipeline) {
	j, st := c.j, c.j.st
	ss, ts := int64(oldA.Geometry().SectorSize), int64(oldA.TagSize())
	buf := make([]byte, st.Window)
	oldTags := make([]byte, st.Window/ss*ts)
	newTags := make([]byte, st.Window/ss*ts)
	tagsOf := func(t []byte, e sectors.Extent) []byte { return t[e.SrcOffset/ss*ts : (e.SrcOffset+e.Length)/ss*ts] }
	read := func(k int64) ([]sectors.Extent, []byte, []byte, error) {
		n := c.windowLen(k)
		w := slice(exts, k*st.Window, n)
		b, ot := buf[:n], oldTags[:n/ss*ts]
		for _, e := range w {
			if _, err := img.ReadAt(b[e.SrcOffset:e.SrcOffset+e.Length], e.DstOffset); err != nil {
				return nil, nil, nil, &sectors.IOError{Op: "read input", Offset: e.DstOffset, Err: err}
			}
			if _, err := img.ReadAt(tagsOf(ot, e), g.TagOffset(e.Sector)); err != nil {
				return nil, nil, nil, &sectors.IOError{Op: "read tags", Offset: g.TagOffset(e.Sector), Err: err}
			}
		}
		return w, b, ot, nil
	}
	// unit is the sector number of byte x of window k: the stream is the
	// integrity device's logical sectors in order.
	unit := func(k int64, x int) uint64 { return uint64(k*st.Window+int64(x)) / SectorSize }
	// convert verifies and decrypts b[lo:hi] with its old tags and seals
	// it under the new key into b and nt; reseal takes the IVs from nt.
	convert := func(k int64, b, ot, nt []byte, lo, hi int, reseal bool) error {
		u := unit(k, lo)
		tl, th := int64(lo)/ss*ts, int64(hi)/ss*ts
		if err := oldA.Open(b[lo:hi], b[lo:hi], ot[tl:th], u); err != nil {
			var te *cipher.TagError
			if errors.As(err, &te) {
				return &CorruptError{Sectors: te.Units, Count: uint64(len(te.Units))}
			}
			return err
		}
		if !reseal {
			return newA.Seal(b[lo:hi], nt[tl:th], b[lo:hi], u)
		}
		want := bytes.Clone(nt[tl:th])
		if err := newA.Reseal(b[lo:hi], nt[tl:th], b[lo:hi], u); err != nil {
			return err
		}
		if !bytes.Equal(want, nt[tl:th]) {
			return fmt.Errorf("%w: window %d: sectors from %d do not seal to the tags of the record", ErrJournalCorrupt, k, u)
		}
		return nil
	}
	write := func(w []sectors.Extent, b, nt []byte, only func(e sectors.Extent) bool) error {
		for _, e := range w {
			if only != nil && !only(e) {
				continue
			}
			if _, err := img.WriteAt(b[e.SrcOffset:e.SrcOffset+e.Length], e.DstOffset); err != nil {
				return &sectors.IOError{Op: "write output", Offset: e.DstOffset, Err: err}
			}
		}
		if err := syncErr(img, "image"); err != nil {
			return err
		}
		for _, e := range w {
			if _, err := img.WriteAt(tagsOf(nt, e), g.TagOffset(e.Sector)); err != nil {
				return &sectors.IOError{Op: "write tags", Offset: g.TagOffset(e.Sector), Err: err}
			}
		}
		return syncErr(img, "image")
	}
	c.step = func(ctx context.Context, k int64, progress func(int64)) error {
		w, b, ot, err := read(k)
		if err != nil {
			return err
		}
		fp := make([]byte, len(b)/SectorSize*fpSize)
		for i := range len(b) / SectorSize {
			copy(fp[i*fpSize:(i+1)*fpSize], b[i*SectorSize:])
		}
		nt := newTags[:len(ot)]
		if err := split(len(b), func(lo, hi int) error { return convert(k, b, ot, nt, lo, hi, false) }); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := j.writeRecord(record{Window: k, FP: fp, Tags: nt}); err != nil {
			return err
		}
		if err := write(w, b, nt, nil); err != nil {
			return err
		}
		if progress != nil {
			progress(int64(len(b)))
		}
		return nil
	}
	c.redo = func(ctx context.Context, r *record, progress func(int64)) error {
		w, b, ot, err := read(r.Window)
		if err != nil {
			return err
		}
		if len(r.FP) != len(b)/SectorSize*fpSize || len(r.Tags) != len(ot) {
			return fmt.Errorf("%w: record of window %d has %d fingerprints and %d tag bytes", ErrJournalCorrupt, r.Window, len(r.FP)/fpSize, len(r.Tags))
		}
		nt := newTags[:len(ot)]
		copy(nt, r.Tags)
		// The runs of sectors still holding old data.
		old := func(s int64) bool {
			i := s / SectorSize
			return bytes.Equal(b[s:s+fpSize], r.FP[i*fpSize:(i+1)*fpSize])
		}
		var runs [][2]int
		for s := int64(0); s < int64(len(b)); s += ss {
			if !old(s) {
				continue
			}
			if n := len(runs); n > 0 && runs[n-1][1] == int(s) {
				runs[n-1][1] += int(ss)
				continue
			}
			runs = append(runs, [2]int{int(s), int(s + ss)})
		}
		for _, rn := range runs {
			if err := convert(r.Window, b, ot, nt, rn[0], rn[1], true); err != nil {
				return err
			}
		}
		touched := func(e sectors.Extent) bool {
			for _, rn := range runs {
				if int64(rn[0]) < e.SrcOffset+e.Length && e.SrcOffset < int64(rn[1]) {
					return true
				}
			}
			return false
		}
		return write(w, b, nt, touched)
	}
}

// authSteps unlocks both headers of an authenticated reencryption, checks
// the layout against the journal, marks the image and sets c's steps. The
// returned function clears the ciphers.
func (c *converter) authSteps(img File, loc *located, ct container, g *integrity.Geometry, oh, nh header.Header, area []byte, o ReencryptOptions) (func(), error) {
	st := c.j.st
	exts, total, err := inPlaceExtents(ct)
	if err != nil {
		return nil, err
	}
	if total != st.DataLen {
		return nil, fmt.Errorf("%w: image data is %d bytes, journal says %d", ErrJournalCorrupt, total, st.DataLen)
	}
	oldA, newA, err := reencryptAuthCiphers(loc, oh, nh, area, o.Passphrases)
	if err != nil {
		return nil, err
	}
	done := func() { oldA.Clear(); newA.Clear() }
	if oldA.TagSize() != newA.TagSize() || oldA.Geometry().SectorSize != newA.Geometry().SectorSize {
		done()
		return nil, fmt.Errorf("%w: the new header changes the integrity layout", ErrJournalCorrupt)
	}
	ss := int64(oldA.Geometry().SectorSize)
	if st.Window%ss != 0 || st.RecordLen < authRecordLen(st.Window, ss, oldA.TagSize()) {
		done()
		return nil, fmt.Errorf("%w: %d-byte windows and %d-byte records for %d-byte sectors", ErrJournalCorrupt, st.Window, st.RecordLen, ss)
	}
	if err := applyMark(loc.hf, loc.area.off, oh); err != nil {
		done()
		return nil, err
	}
	authWindows(c, img, g, exts, oldA, newA, o.Pipeline)
	return done, nil
}
