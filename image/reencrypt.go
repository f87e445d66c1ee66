package image

// Reencryption: a new volume key for a raw LUKS1 or LUKS2 image or a
// qcow2+LUKS image, in place. See docs/REENCRYPT.md for the design.

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/sectors"
)

// ReencryptOptions configure Reencrypt.
type ReencryptOptions struct {
	// Passphrases are the keys to keep: each must open a key slot, and the
	// new volume key goes into the slots they open. Every other slot is
	// removed.
	Passphrases [][]byte
	// Cipher of the new header ("aes-xts-plain64"); empty keeps the
	// current cipher. KeyBytes and Hash of the new key; 0 and "" keep the
	// current ones, except that a new cipher gets its own default key size
	// (cryptsetup's), as cryptsetup reencrypt --cipher.
	Cipher   string
	KeyBytes int
	Hash     string
	// IterTime and ForceIterations set the KDF cost of the new slots, and
	// PBKDF, PBKDFMemory and PBKDFParallel a LUKS2 image's KDF, as for
	// header.Params.
	IterTime        time.Duration
	ForceIterations uint32
	PBKDF           string
	PBKDFMemory     uint32
	PBKDFParallel   uint32
	// Confirm, if set, is called on a fresh start, before anything is
	// written, with the slots that will be removed; an error aborts.
	Confirm func(removed []int) error
	// UUID, if set, is the new header's UUID; "" keeps the image's.
	UUID string
	// VolumeKey, if set, gives the new volume key instead of a random
	// one: the key of keyBytes bytes for the new header's UUID (in its
	// canonical form), such as a key derived from a master secret
	// (package header/derive). It is called on a fresh start, before
	// Confirm; a key equal to the old one is refused with
	// ErrSameVolumeKey. When an interrupted run is continued it is called
	// again, and a key that is not the one the run started with is
	// refused with ErrVolumeKeyMismatch before anything is written.
	VolumeKey func(uuid string, keyBytes int) ([]byte, error)
	// Header, if set, is the detached header file of the image
	// (cryptsetup --header): the header is read, marked and replaced
	// there, and the data, from the header's payload offset, in img.
	Header File
	InPlaceOptions
}

// ErrSameVolumeKey refuses a reencryption whose new volume key is the old
// one, as a key derived from the master and UUID the image's key was
// derived from is.
var ErrSameVolumeKey = errors.New("the new volume key is the image's current one")

// slice returns the parts of the stream [off, off+n) with SrcOffset made
// relative to off.
func slice(exts []sectors.Extent, off, n int64) []sectors.Extent {
	var out []sectors.Extent
	for _, e := range exts {
		s, t := max(e.SrcOffset, off), min(e.SrcOffset+e.Length, off+n)
		if s >= t {
			continue
		}
		d := s - e.SrcOffset
		out = append(out, sectors.Extent{SrcOffset: s - off, DstOffset: e.DstOffset + d, Length: t - s, Sector: ivAfter(e.Sector, d)})
	}
	return out
}

// Reencrypt gives the image a new volume key: every encrypted sector is
// decrypted with the old key and encrypted with the new one where it lies,
// window by window, then the new header replaces the old one. An
// interrupted run is continued with the same passphrases.
func Reencrypt(ctx context.Context, img File, js JournalStore, o ReencryptOptions) (*Result, error) {
	if len(o.Passphrases) == 0 {
		return nil, errors.New("reencrypt needs at least one passphrase")
	}
	j, err := begin(img, js, OpReencrypt, o.Resume)
	if err != nil {
		return nil, err
	}
	resumed := j != nil
	var kept, removed []int
	if j == nil {
		if j, kept, removed, err = startReencrypt(img, js, o); err != nil {
			return nil, err
		}
	}
	defer closeStorage(j.s)
	st := j.st
	area, err := j.blob()
	if err != nil {
		return nil, err
	}
	nh, err := header.Read(bytes.NewReader(area), 0, int64(len(area)))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	if resumed {
		if err := checkResumedKey(nh, o); err != nil {
			return nil, err
		}
	}
	if kept == nil {
		for i := range nh.NumSlots() {
			if nh.SlotActive(i) {
				kept = append(kept, i)
			}
		}
	}
	loc, err := locate(img, o.Header)
	if err != nil {
		return nil, err
	}
	if loc.area.off != st.HdrOff {
		return nil, fmt.Errorf("%w: LUKS header moved", ErrJournalCorrupt)
	}
	c := &converter{img: img, j: j, p: o.Pipeline}
	if st.Phase == phaseData {
		oh, err := loc.readPhdr()
		if err != nil {
			return nil, err
		}
		ct, err := loc.container(oh)
		if err != nil {
			return nil, err
		}
		if g := ct.tagLayout(); g != nil {
			clearAuth, err := c.authSteps(img, loc, ct, g, oh, nh, area, o)
			if err != nil {
				return nil, err
			}
			defer clearAuth()
		} else {
			oldC, newC, err := reencryptCiphers(img, loc, oh, nh, area, o.Passphrases)
			if err != nil {
				return nil, err
			}
			defer oldC.Clear()
			defer newC.Clear()
			exts, total, err := inPlaceExtents(ct)
			if err != nil {
				return nil, err
			}
			if total != st.DataLen {
				return nil, fmt.Errorf("%w: image data is %d bytes, journal says %d", ErrJournalCorrupt, total, st.DataLen)
			}
			// Mark the image (idempotent): LUKS1's magic, LUKS2's requirement.
			if err := applyMark(loc.hf, loc.area.off, oh); err != nil {
				return nil, err
			}
			ss := int64(oh.Info().SectorSize)
			if st.DataLen%ss != 0 || st.Window%ss != 0 {
				return nil, fmt.Errorf("%w: %d bytes of data in %d-byte windows do not make whole %d-byte sectors", ErrTruncated, st.DataLen, st.Window, ss)
			}
			t := func(d, s []byte, first uint64) error {
				if err := oldC.DecryptSectors(d, s, first); err != nil {
					return err
				}
				return newC.EncryptSectors(d, d, first)
			}
			closePrefetch := sameSpotWindows(c, img, exts, ss, t, o.Pipeline)
			defer closePrefetch()
		}
	}
	c.finish = func() error {
		// The whole new area over the marked old header, in the format's
		// order; the image stays marked until the new header is whole.
		if err := applyUpdate(loc.hf, st.HdrOff, nh.Install(area)); err != nil {
			return err
		}
		return complete(j, js)
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return &Result{Op: OpReencrypt, Format: loc.format(), Header: nh, Bytes: st.DataLen, Resumed: resumed, Kept: kept, Removed: removed}, nil
}

// sameSpotWindows sets c's steps for a conversion whose every sector is
// rewritten where it lies by t (reencrypt, and in-place encryption or
// decryption with a detached header): each window is read (the next one
// while this one is converted), its sectors' fingerprints recorded, then
// converted; the redo after a crash converts only the ss-byte sectors that
// still hold their fingerprint. It returns what waits for the last read.
func sameSpotWindows(c *converter, img File, exts []sectors.Extent, ss int64, t sectors.Transform, p Pipeline) (closePrefetch func()) {
	j, st := c.j, c.j.st
	bufs := [2][]byte{make([]byte, st.Window), make([]byte, st.Window)}
	chunks := new(sectors.Buffers)
	read := func(k int64) ([]sectors.Extent, []byte, error) {
		n := c.windowLen(k)
		w := slice(exts, k*st.Window, n)
		b := bufs[k%2][:n]
		for _, e := range w {
			if _, err := img.ReadAt(b[e.SrcOffset:e.SrcOffset+e.Length], e.DstOffset); err != nil {
				return nil, nil, &sectors.IOError{Op: "read input", Offset: e.DstOffset, Err: err}
			}
		}
		return w, b, nil
	}
	convert := func(ctx context.Context, w []sectors.Extent, b []byte, progress func(int64)) error {
		ro := runOpts(p, chunks, progress)
		ro.SectorSize = int(ss)
		if err := sectors.Run(ctx, writerOnly{img}, bytes.NewReader(b), w, t, ro); err != nil {
			return err
		}
		return syncErr(img, "image")
	}
	// The next window is read while this one is converted: windows
	// never overlap, and each has its own buffer.
	type window struct {
		k   int64
		w   []sectors.Extent
		b   []byte
		err error
	}
	prefetch := func(k int64) chan window {
		ch := make(chan window, 1)
		go func() {
			w, b, err := read(k)
			ch <- window{k, w, b, err}
		}()
		return ch
	}
	var next chan window
	c.step = func(ctx context.Context, k int64, progress func(int64)) error {
		if next == nil {
			next = prefetch(k)
		}
		cur := <-next
		next = nil
		if cur.k != k {
			panic("image: windows out of order")
		}
		if cur.err != nil {
			return cur.err
		}
		if k+1 < st.Windows {
			next = prefetch(k + 1)
		}
		w, b := cur.w, cur.b
		fp := make([]byte, len(b)/SectorSize*fpSize)
		for i := range len(b) / SectorSize {
			copy(fp[i*fpSize:(i+1)*fpSize], b[i*SectorSize:])
		}
		if err := j.writeRecord(record{Window: k, FP: fp}); err != nil {
			return err
		}
		return convert(ctx, w, b, progress)
	}
	c.redo = func(ctx context.Context, r *record, progress func(int64)) error {
		w, b, err := read(r.Window)
		if err != nil {
			return err
		}
		if len(r.FP) != len(b)/SectorSize*fpSize {
			return fmt.Errorf("%w: record of window %d has %d fingerprints", ErrJournalCorrupt, r.Window, len(r.FP)/fpSize)
		}
		// A sector whose first bytes are still the old ciphertext's
		// was not rewritten; every other one already holds new data.
		// (A sector of the cipher's size is written whole or not at
		// all, as cryptsetup's checksum resilience assumes too.)
		var todo []sectors.Extent
		for _, e := range w {
			for s := e.SrcOffset; s < e.SrcOffset+e.Length; s += ss {
				i := s / SectorSize
				if !bytes.Equal(b[s:s+fpSize], r.FP[i*fpSize:(i+1)*fpSize]) {
					continue
				}
				d := s - e.SrcOffset
				if n := len(todo); n > 0 && todo[n-1].SrcOffset+todo[n-1].Length == s && todo[n-1].DstOffset+todo[n-1].Length == e.DstOffset+d {
					todo[n-1].Length += ss
					continue
				}
				todo = append(todo, sectors.Extent{SrcOffset: s, DstOffset: e.DstOffset + d, Length: ss, Sector: ivAfter(e.Sector, d)})
			}
		}
		return convert(ctx, todo, b, nil)
	}
	return func() {
		if next != nil {
			<-next
		}
	}
}

// checkResumedKey refuses to continue a reencryption towards another UUID
// or volume key than o asks for: the run would finish with a key that is
// not the one the caller means.
func checkResumedKey(nh header.Header, o ReencryptOptions) error {
	ni := nh.Info()
	nu, err := header.CanonicalUUID(ni.UUID)
	if err != nil {
		return err
	}
	if o.UUID != "" {
		u, err := header.CanonicalUUID(o.UUID)
		if err != nil {
			return err
		}
		if u != nu {
			return fmt.Errorf("the unfinished reencryption gives the image UUID %s, not %s", nu, u)
		}
	}
	if o.VolumeKey == nil {
		return nil
	}
	vk, err := o.VolumeKey(nu, ni.KeyBytes)
	if err != nil {
		return err
	}
	defer clear(vk)
	if !nh.VerifyVolumeKey(vk) {
		return fmt.Errorf("the unfinished reencryption was started with another new key: %w", ErrVolumeKeyMismatch)
	}
	return nil
}

// newKeyBytes is the volume key size Rekey gives p: its KeyBytes, or the
// default of its cipher (with the MAC key of an authenticated one).
func newKeyBytes(p header.Params) (int, error) {
	if p.KeyBytes != 0 {
		return p.KeyBytes, nil
	}
	if p.Integrity != "" {
		m, err := cipher.ParseAuth(p.Cipher, p.Integrity)
		if err != nil {
			return 0, err
		}
		return m.DefaultCipherKeyBytes + m.MACKeyBytes, nil
	}
	m, err := cipher.Parse(p.Cipher)
	if err != nil {
		return 0, &header.UnsupportedCipherError{Spec: p.Cipher}
	}
	return m.DefaultKeyBytes, nil
}

// givenVolumeKey sets p's UUID and volume key from o, checking that the
// key is new: old is the image's current volume key.
func givenVolumeKey(p *header.Params, o ReencryptOptions, old []byte) error {
	if o.UUID != "" {
		u, err := header.CanonicalUUID(o.UUID)
		if err != nil {
			return err
		}
		p.UUID = u
	}
	if o.VolumeKey == nil {
		return nil
	}
	n, err := newKeyBytes(*p)
	if err != nil {
		return err
	}
	u, err := header.CanonicalUUID(p.UUID)
	if err != nil {
		return err
	}
	vk, err := o.VolumeKey(u, n)
	if err != nil {
		return err
	}
	if len(vk) != n {
		clear(vk)
		return fmt.Errorf("the new volume key is %d bytes, want %d", len(vk), n)
	}
	if subtle.ConstantTimeCompare(vk, old) == 1 {
		clear(vk)
		return ErrSameVolumeKey
	}
	p.KeyBytes, p.VolumeKey = n, vk
	return nil
}

// applyMark marks the header h at base busy; idempotent.
func applyMark(img File, base int64, h header.Header) error {
	u, err := h.Mark()
	if err != nil {
		return err
	}
	return applyUpdate(img, base, u)
}

// reencryptCiphers unlocks the old key from the image and the new one from
// the journal's header area with the first passphrase that opens each.
func reencryptCiphers(img File, loc *located, oh, nh header.Header, area []byte, passes [][]byte) (oldC, newC cipher.Sector, err error) {
	unlock := func(h header.Header, r io.ReaderAt, base int64) (cipher.Sector, error) {
		err := header.ErrNoMatchingKeyslot
		for _, p := range passes {
			var vk []byte
			vk, _, err = h.Unlock(r, base, p, -1)
			if err == nil {
				c, err := h.NewSectorCipher(vk)
				clear(vk)
				return c, err
			}
			if !errors.Is(err, header.ErrNoMatchingKeyslot) {
				return nil, err
			}
		}
		return nil, err
	}
	if oldC, err = unlock(oh, loc.hf, loc.area.off); err != nil {
		return nil, nil, err
	}
	if newC, err = unlock(nh, bytes.NewReader(area), 0); err != nil {
		oldC.Clear()
		return nil, nil, err
	}
	return oldC, newC, nil
}

func startReencrypt(img File, js JournalStore, o ReencryptOptions) (*journal, []int, []int, error) {
	loc, err := locate(img, o.Header)
	if err != nil {
		return nil, nil, nil, err
	}
	oh, err := header.Read(loc.hf, loc.area.off, loc.area.limit)
	if err != nil {
		return nil, nil, nil, err
	}
	ct, err := loc.container(oh)
	if err != nil {
		return nil, nil, nil, err
	}
	auth := ct.tagLayout() != nil
	_, total, err := inPlaceExtents(ct)
	if err != nil {
		return nil, nil, nil, err
	}
	// Every passphrase must open a slot; those slots are kept.
	slotOf := map[int][]byte{}
	var kept []int
	var oldVK []byte
	defer func() { clear(oldVK) }()
	if err := checkCost(oh, -1, o.AllowCost); err != nil {
		return nil, nil, nil, err
	}
	for i, p := range o.Passphrases {
		vk, slot, err := oh.Unlock(loc.hf, loc.area.off, p, -1)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		if oldVK == nil {
			oldVK = vk
		} else {
			clear(vk)
		}
		if _, dup := slotOf[slot]; !dup {
			slotOf[slot] = p
			kept = append(kept, slot)
		}
	}
	slices.Sort(kept)
	var removed []int
	for i := range oh.NumSlots() {
		if oh.SlotActive(i) && slotOf[i] == nil {
			removed = append(removed, i)
		}
	}
	oi := oh.Info()
	p := header.Params{
		Cipher: oi.Cipher, Hash: oi.Hash, KeyBytes: oi.KeyBytes,
		IterTime: o.IterTime, ForceIterations: o.ForceIterations,
		PBKDF: o.PBKDF, PBKDFMemory: o.PBKDFMemory, PBKDFParallel: o.PBKDFParallel,
		UUID: oi.UUID, Rand: o.Rand,
	}
	if o.Hash != "" {
		p.Hash = o.Hash
	}
	if o.Cipher != "" {
		p.Cipher = o.Cipher
		p.KeyBytes = 0 // the new cipher's default
	}
	if o.KeyBytes != 0 {
		p.KeyBytes = o.KeyBytes
	}
	if auth {
		p.Integrity = oi.Integrity
		if o.KeyBytes != 0 {
			// --key-size is the cipher's; the MAC key comes on top.
			m, err := cipher.ParseAuth(p.Cipher, p.Integrity)
			if err != nil {
				return nil, nil, nil, err
			}
			p.KeyBytes += m.MACKeyBytes
		}
	}
	if err := givenVolumeKey(&p, o, oldVK); err != nil {
		return nil, nil, nil, err
	}
	defer clear(p.VolumeKey)
	if o.Confirm != nil {
		if err := o.Confirm(removed); err != nil {
			return nil, nil, nil, err
		}
	}
	_, vk, area, err := oh.Rekey(p, slotOf, ct.room())
	if err != nil {
		return nil, nil, nil, err
	}
	clear(vk)
	w := alignWindow(o.window(0), int64(oi.SectorSize))
	st := &state{
		Op: OpReencrypt, ImageSize: total, FinalSize: total, DataLen: total,
		Window: w, Windows: ceilDiv(total, w), RecordLen: recordLen(w, true), HdrOff: loc.area.off,
	}
	if auth {
		m, _ := authTagMode(oh)
		st.RecordLen = authRecordLen(w, int64(oi.SectorSize), m.TagSize)
	}
	if size, err := storageSize(img); err == nil {
		st.ImageSize, st.FinalSize = size, size
	}
	if _, err := io.ReadFull(randOr(o.Rand), st.ID[:]); err != nil {
		return nil, nil, nil, err
	}
	j, err := createJournal(js, st, area)
	clear(area)
	if err != nil {
		return nil, nil, nil, err
	}
	return j, kept, removed, nil
}
