package header

// LUKS2: the binary header copies and how one is chosen. The layout and the
// read rules are cryptsetup's (docs/on-disk-format-luks2.pdf v1.1.4;
// lib/luks2/luks2_disk_metadata.c LUKS2_disk_hdr_read, hdr_checksum_check).

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// LUKS2 binary header fields (big-endian), offsets in the 4096-byte header.
const (
	luks2BinSize     = 4096
	l2OffVersion     = 6
	l2OffHdrSize     = 8
	l2OffSeqID       = 16
	l2OffLabel       = 24
	l2OffCsumAlg     = 72
	l2OffSalt        = 104
	l2OffUUID        = 168
	l2OffSubsystem   = 208
	l2OffHdrOffset   = 256
	l2OffCsum        = 448
	l2LabelSize      = 48
	l2CsumAlgSize    = 32
	l2SaltSize       = 64
	l2UUIDSize       = 40
	l2SubsystemSize  = 48
	l2CsumSize       = 64
	luks2MinHdrSize  = 0x4000
	luks2MaxHdrSize  = 0x400000
	luks2MaxSlots    = 32
	luks2DefaultKDFT = 4
)

// secondaryMagic starts the second header copy.
var secondaryMagic = [6]byte{'S', 'K', 'U', 'L', 0xba, 0xbe}

// luks2HdrSizes are the metadata sizes cryptsetup allows: 16 KiB to 4 MiB,
// powers of two. The secondary copy starts at one of them.
var luks2HdrSizes = []int64{0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000}

// luks2Bin is one parsed binary header with its JSON area.
type luks2Bin struct {
	HdrSize   int64
	SeqID     uint64
	Label     string
	CsumAlg   string
	UUID      string
	Subsystem string
	HdrOffset int64
	JSON      []byte // the JSON text, without the NUL and the zero fill
}

// ErrLUKS2Reencrypt reports a LUKS2 image that a cryptsetup reencryption
// left unfinished (an online-reencrypt or offline-reencrypt requirement):
// its data is partly under the old key and partly under the new one.
var ErrLUKS2Reencrypt = errors.New("the LUKS2 header records an unfinished cryptsetup reencryption; finish it with cryptsetup reencrypt --resume-only first")

// readLUKS2Copy reads and checks the header copy at off (0 for the
// primary): magic, version, hdr_offset, size, checksum and the JSON area's
// framing. The JSON itself is checked by the caller.
func readLUKS2Copy(r io.ReaderAt, base, off, size int64, primary bool) (*luks2Bin, error) {
	if off+luks2BinSize > size {
		return nil, parseErrorf("LUKS2 header", "copy at %d lies beyond the end of the %d-byte area", off, size)
	}
	bin := make([]byte, luks2BinSize)
	if err := readAt(r, bin, base+off); err != nil {
		return nil, err
	}
	want := magic[:]
	if !primary {
		want = secondaryMagic[:]
	}
	if !bytes.Equal(bin[:6], want) {
		return nil, parseErrorf("LUKS2 header", "no header copy at %d (bad magic)", off)
	}
	be := binary.BigEndian
	if v := be.Uint16(bin[l2OffVersion:]); v != 2 {
		return nil, parseErrorf("LUKS2 header", "copy at %d has version %d", off, v)
	}
	b := &luks2Bin{
		HdrSize: int64(be.Uint64(bin[l2OffHdrSize:])), SeqID: be.Uint64(bin[l2OffSeqID:]),
		HdrOffset: int64(be.Uint64(bin[l2OffHdrOffset:])),
	}
	if b.HdrOffset != off {
		return nil, parseErrorf("LUKS2 header", "copy at %d says it is at %d", off, b.HdrOffset)
	}
	okSize := false
	for _, s := range luks2HdrSizes {
		okSize = okSize || s == b.HdrSize
	}
	if !okSize {
		return nil, parseErrorf("LUKS2 header", "metadata size %d is not one of 16 KiB to 4 MiB", b.HdrSize)
	}
	if !primary && b.HdrSize != off {
		return nil, parseErrorf("LUKS2 header", "secondary copy at %d has metadata size %d", off, b.HdrSize)
	}
	if off+b.HdrSize > size {
		return nil, parseErrorf("LUKS2 header", "metadata of copy at %d ends beyond the end of the %d-byte area", off, size)
	}
	var err error
	for _, f := range []struct {
		dst  *string
		at   int
		n    int
		name string
	}{{&b.Label, l2OffLabel, l2LabelSize, "label"}, {&b.CsumAlg, l2OffCsumAlg, l2CsumAlgSize, "checksum_alg"},
		{&b.UUID, l2OffUUID, l2UUIDSize, "uuid"}, {&b.Subsystem, l2OffSubsystem, l2SubsystemSize, "subsystem"}} {
		if *f.dst, err = cString(bin[f.at:f.at+f.n], f.name); err != nil {
			return nil, err
		}
	}
	area := make([]byte, b.HdrSize-luks2BinSize)
	if err := readAt(r, area, base+off+luks2BinSize); err != nil {
		return nil, err
	}
	hf, err := hashFunc(b.CsumAlg)
	if err != nil {
		return nil, parseErrorf("checksum_alg", "unsupported checksum algorithm %q", b.CsumAlg)
	}
	h := hf()
	if h.Size() > l2CsumSize {
		return nil, parseErrorf("checksum_alg", "checksum %q too long", b.CsumAlg)
	}
	stored := bytes.Clone(bin[l2OffCsum : l2OffCsum+l2CsumSize])
	clear(bin[l2OffCsum : l2OffCsum+l2CsumSize])
	h.Write(bin)
	h.Write(area)
	if subtle.ConstantTimeCompare(h.Sum(nil), stored[:h.Size()]) != 1 {
		return nil, parseErrorf("LUKS2 header", "checksum of the copy at %d does not match", off)
	}
	end := bytes.IndexByte(area, 0)
	if end < 0 {
		return nil, parseErrorf("LUKS2 metadata", "JSON area of the copy at %d is not NUL-terminated", off)
	}
	if end == 0 || area[0] != '{' {
		return nil, parseErrorf("LUKS2 metadata", "JSON area of the copy at %d does not start with '{'", off)
	}
	for _, c := range area[end:] {
		if c != 0 {
			return nil, parseErrorf("LUKS2 metadata", "JSON area of the copy at %d has bytes after its terminator", off)
		}
	}
	b.JSON = area[:end]
	return b, nil
}

func readAt(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return parseErrorf("LUKS2 header", "file ends inside the metadata at byte %d", off+int64(n))
	}
	return fmt.Errorf("reading LUKS2 header: %w", err)
}

// readLUKS2 reads both copies as cryptsetup does (LUKS2_disk_hdr_read):
// the primary at 0; the secondary at the primary's metadata size when the
// primary's binary header and checksum are good, else at each allowed size
// from 16 KiB up, stopping at the first copy whose binary header and
// checksum are good (the lost primary no longer says where its secondary
// is). The valid copy with the higher seqid wins. A bad or stale copy is
// not repaired (a read never writes): Warning says so, and Recovered says
// where the secondary in use is.
func readLUKS2(r io.ReaderAt, base, size int64) (*LUKS2, error) {
	var copies []*LUKS2
	var errs []error
	// try reads the copy at off; its binary header and checksum were good
	// when it returns that copy, whatever its JSON.
	try := func(off int64, primary bool) *luks2Bin {
		b, err := readLUKS2Copy(r, base, off, size, primary)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		h, err := parseLUKS2(b, size)
		if err != nil {
			errs = append(errs, err)
		} else {
			copies = append(copies, h)
		}
		return b
	}
	if b := try(0, true); b != nil {
		try(b.HdrSize, false)
	} else {
		for _, s := range luks2HdrSizes {
			if try(s, false) != nil {
				break
			}
		}
	}
	switch {
	case len(copies) == 0:
		return nil, errs[0]
	case len(copies) == 2:
		if copies[1].bin.SeqID > copies[0].bin.SeqID {
			copies[0], copies[1] = copies[1], copies[0]
		}
		h := copies[0]
		if copies[0].bin.SeqID != copies[1].bin.SeqID {
			h.Warning = fmt.Sprintf("LUKS2 header copies differ (seqid %d and %d), using the newer %s", copies[0].bin.SeqID, copies[1].bin.SeqID, h.copyName())
		}
		return h, nil
	}
	h := copies[0]
	if h.bin.HdrOffset != 0 {
		h.Warning = "primary LUKS2 header damaged, using the " + h.copyName()
	} else {
		h.Warning = fmt.Sprintf("secondary LUKS2 header at %s damaged, using the primary", sizeName(h.bin.HdrSize))
	}
	return h, nil
}

// copyName names the copy h was read from: "primary", or "secondary copy
// at 16 KiB".
func (h *LUKS2) copyName() string {
	if h.bin.HdrOffset == 0 {
		return "primary"
	}
	return "secondary copy at " + sizeName(h.bin.HdrOffset)
}

// sizeName writes one of the metadata sizes, powers of two from 16 KiB to
// 4 MiB, as cryptsetup's --luks2-metadata-size takes them.
func sizeName(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Recovered is the offset of the secondary copy h was read from because
// the primary is damaged, missing or older; 0 when the primary is in use.
// Any change to h (Repair, or any other Update) writes both copies from
// it, the primary first.
func (h *LUKS2) Recovered() int64 { return h.bin.HdrOffset }
