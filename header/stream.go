package header

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// MaxStreamHeader bounds the header area a stream may announce: LUKS2's
// largest metadata and keyslots areas, 4 MiB × 2 + 128 MiB, and a LUKS1
// payload offset in the same range.
const MaxStreamHeader = 1 << 30

// StreamLength says how much of a LUKS image read as a stream (a pipe,
// with no seeking back) comes before its payload: the bytes to read and
// give to Read. prefix holds the stream's first bytes; when they are too
// few to tell, StreamLength returns need, more than len(prefix), and the
// caller reads up to need bytes and asks again. A detached header (payload
// offset 0) is ErrCorrupt: its data is not in the stream. A LUKS2 stream
// whose primary header copy is lost is read by its secondary (and Read
// then finds it in the bytes read), so a stream with neither LUKS magic is
// ErrNotLUKS only once 4 MiB and 4 KiB of it hold no secondary copy.
func StreamLength(prefix []byte) (length int64, need int, err error) {
	if len(prefix) < PhdrSize {
		return 0, PhdrSize, nil
	}
	if !IsLUKSMagic(prefix) {
		if IsMarked(prefix) {
			return 0, 0, ErrNotLUKS
		}
		return streamSecondary(prefix)
	}
	switch v := binary.BigEndian.Uint16(prefix[offVersion:]); v {
	case 1:
		off := int64(binary.BigEndian.Uint32(prefix[offPayload:])) * SectorSize
		if off == 0 || off > MaxStreamHeader {
			return 0, 0, parseErrorf("payload offset", "%d bytes: not a header whose data follows it", off)
		}
		return off, 0, nil
	case 2:
		if len(prefix) < luks2BinSize {
			return 0, luks2BinSize, nil
		}
		hdr := int64(binary.BigEndian.Uint64(prefix[l2OffHdrSize:]))
		if hdr < luks2BinSize || hdr > 4<<20 {
			return 0, 0, parseErrorf("LUKS2 header", "hdr_size %d out of range", hdr)
		}
		if int64(len(prefix)) < hdr {
			return 0, int(hdr), nil
		}
		b, err := readLUKS2Copy(bytes.NewReader(prefix), 0, 0, int64(len(prefix)), true)
		if err != nil {
			return 0, 0, err
		}
		return luks2StreamLength(b)
	default:
		return 0, 0, fmt.Errorf("%w: LUKS version %d", ErrCorrupt, v)
	}
}

// streamSecondary is StreamLength for a stream that starts with neither
// LUKS magic: a LUKS2 header whose primary copy is lost is found by its
// secondary, as Read finds it, at the first metadata size (16 KiB to
// 4 MiB) where a secondary copy says it is and its checksum holds. A
// stream that is not LUKS is known to be so only after 4 MiB and 4 KiB.
func streamSecondary(prefix []byte) (length int64, need int, err error) {
	be := binary.BigEndian
	for _, s := range luks2HdrSizes {
		if int64(len(prefix)) < s+luks2BinSize {
			return 0, int(s + luks2BinSize), nil
		}
		bin := prefix[s:]
		if !bytes.HasPrefix(bin, secondaryMagic[:]) || int64(be.Uint64(bin[l2OffHdrOffset:])) != s || int64(be.Uint64(bin[l2OffHdrSize:])) != s {
			continue
		}
		if int64(len(prefix)) < 2*s {
			return 0, int(2 * s), nil
		}
		b, err := readLUKS2Copy(bytes.NewReader(prefix), 0, s, int64(len(prefix)), false)
		if err != nil {
			continue
		}
		return luks2StreamLength(b)
	}
	return 0, 0, ErrNotLUKS
}

// luks2StreamLength is the header area a LUKS2 copy's metadata gives: up
// to its first segment.
func luks2StreamLength(b *luks2Bin) (int64, int, error) {
	hdr := b.HdrSize
	js, err := jsonc(b.JSON)
	if err != nil {
		return 0, 0, parseErrorf("LUKS2 metadata", "%v", err)
	}
	var top struct {
		Segments map[string]struct {
			Offset u64s `json:"offset"`
		} `json:"segments"`
		Config struct {
			KeyslotsSize u64s `json:"keyslots_size"`
		} `json:"config"`
	}
	if err := json.Unmarshal(js, &top); err != nil {
		return 0, 0, parseErrorf("LUKS2 metadata", "%v", err)
	}
	// The payload starts at the first segment; the header area (both
	// copies and the keyslots) must end before it, which Read checks.
	length := int64(-1)
	for _, s := range top.Segments {
		if s.Offset == 0 {
			return 0, 0, parseErrorf("segment", "offset 0: a detached header, whose data is not in the stream")
		}
		if length < 0 || int64(s.Offset) < length {
			length = int64(s.Offset)
		}
	}
	if length < 2*hdr+int64(top.Config.KeyslotsSize) {
		return 0, 0, parseErrorf("LUKS2 header", "no segment after the %d-byte header area", 2*hdr+int64(top.Config.KeyslotsSize))
	}
	if length > MaxStreamHeader {
		return 0, 0, parseErrorf("LUKS2 header", "%d bytes before the payload", length)
	}
	return length, 0, nil
}
