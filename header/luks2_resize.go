package header

// Resizing a LUKS2 data segment of fixed size. A "dynamic" segment runs to
// the end of the device and needs no metadata change to grow or shrink
// with the file; a fixed one records its size in bytes, so a resize rewrites
// both metadata copies as every other change does (luks2_update.go).

import (
	"fmt"
	"strconv"
)

// WithDataSize sets the data segment's size to size bytes, a fixed size
// (replacing "dynamic" or the old number), in both copies with the next
// seqid, primary first, each synced: the primary copy is the commit point.
// size must be a positive whole number of the segment's sectors and must not
// reach into another segment. The segment's other fields, and the objects
// cryptimg does not know, are kept. An authenticated segment is refused: its
// size is the dm-integrity device's, laid out with its tags. h is unchanged.
func (h *LUKS2) WithDataSize(size int64) (*Update, error) {
	if err := h.writable(); err != nil {
		return nil, err
	}
	if err := h.dataErr(); err != nil {
		return nil, err
	}
	s := h.data()
	if s.integrity != nil {
		return nil, fmt.Errorf("%w: the size of an integrity segment is the dm-integrity device's", ErrAuthenticated)
	}
	ss := int64(s.SectorSize)
	if size <= 0 || size%ss != 0 {
		return nil, fmt.Errorf("segment size %d is not a positive multiple of the %d-byte sector size", size, ss)
	}
	off := uint64(s.Offset)
	if off > 1<<63-1 || uint64(size) > 1<<63-1-off {
		return nil, fmt.Errorf("segment at %d of %d bytes reaches beyond 2^63 bytes", off, size)
	}
	for i, o := range h.Segments {
		if i == h.seg || uint64(o.Offset) < off {
			continue
		}
		if uint64(o.Offset) < off+uint64(size) {
			return nil, fmt.Errorf("a data segment of %d bytes would overlap segment %d at %d", size, i, o.Offset)
		}
	}
	n := h.clone()
	c := *s
	c.Size = strconv.FormatInt(size, 10)
	c.size = uint64(size)
	c.changed = true
	n.Segments[h.seg] = &c
	return h.commit(n, nil, nil, nil)
}
