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
// offset 0) is ErrCorrupt: its data is not in the stream.
func StreamLength(prefix []byte) (length int64, need int, err error) {
	if len(prefix) < PhdrSize {
		return 0, PhdrSize, nil
	}
	if !IsLUKSMagic(prefix) {
		return 0, 0, ErrNotLUKS
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
	default:
		return 0, 0, fmt.Errorf("%w: LUKS version %d", ErrCorrupt, v)
	}
}
