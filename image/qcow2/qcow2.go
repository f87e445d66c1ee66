// Package qcow2 reads and writes the qcow2 image format (versions 2 and 3) as
// specified in QEMU's docs/interop/qcow2.rst (formerly qcow2.txt).
//
// It is the format layer only and knows no cryptography: for a LUKS image
// (crypt_method 2) it reports where the LUKS header area lives
// ([Image.CryptOffset], [Image.CryptLength]) and where each guest range is
// stored on the host ([Image.Extents]); decrypting, with the IV sector taken
// from the host offset, is the caller's job. Likewise [Writer] lays out a
// new image's clusters and metadata and lets the caller write (possibly
// encrypted) data at the host offsets it hands out, and [Editor] changes an
// existing image in place (allocating clusters, resizing) in qemu's order of
// writes, so that a crash leaks clusters at worst. Compressed clusters
// (deflate, zstd) are read, and extended L2 entries are understood.
//
// The reader treats every input as hostile: each size and offset taken from
// the file is checked against the file size before anything is allocated or
// read, and malformed structures yield errors wrapping [ErrCorrupt].
// Features the package does not implement (backing files, internal
// snapshots, external data files, legacy AES encryption, unknown
// incompatible feature bits) yield errors wrapping [ErrUnsupported].
package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

var (
	// ErrNotQcow2 reports a file that does not start with the qcow2 magic.
	ErrNotQcow2 = errors.New("not a qcow2 image")
	// ErrCorrupt reports a malformed or hostile qcow2 structure.
	ErrCorrupt = errors.New("corrupt qcow2 image")
	// ErrUnsupported reports a valid qcow2 feature this package does not handle.
	ErrUnsupported = errors.New("unsupported qcow2 feature")
)

// Crypt methods (header field crypt_method).
const (
	CryptNone = 0
	CryptAES  = 1 // legacy, refused
	CryptLUKS = 2
)

// Compression types (header field compression_type).
const (
	CompressionDeflate = 0
	CompressionZstd    = 1
)

const (
	magic = 0x514649fb

	minClusterBits         = 9
	maxClusterBits         = 21 // qemu's limit (2 MiB clusters)
	minClusterBitsExtended = 14 // extended L2 needs 16 KiB clusters or more

	v2HeaderLength = 72
	v3HeaderLength = 104

	// qemu's QCOW_MAX_L1_SIZE and QCOW_MAX_REFTABLE_SIZE: no valid image has
	// bigger tables, so anything beyond is refused before allocating.
	maxL1Bytes       = 32 << 20
	maxRefTableBytes = 8 << 20

	offsetMask        = 0x00fffffffffffe00 // L1E_OFFSET_MASK, L2E_OFFSET_MASK
	l1ReservedMask    = 0x7f000000000001ff
	l2StdReservedMask = 0x3f000000000001fe
	refTableRsvdMask  = 0x1ff

	flagCopied     = uint64(1) << 63
	flagCompressed = uint64(1) << 62
	flagZero       = uint64(1)

	incompatDirty       = 1 << 0
	incompatCorrupt     = 1 << 1
	incompatDataFile    = 1 << 2
	incompatCompression = 1 << 3
	incompatExtendedL2  = 1 << 4
	incompatKnown       = incompatDirty | incompatCorrupt | incompatDataFile | incompatCompression | incompatExtendedL2

	extEnd          = 0x00000000
	extBackingFmt   = 0xe2792aca
	extFeatureNames = 0x6803f857
	extBitmaps      = 0x23852875
	extCrypto       = 0x0537be77
	extDataFile     = 0x44415441

	subclusters = 32 // per cluster with extended L2
)

// Image is a parsed qcow2 header with its validated L1 table. It holds no
// reference to the file: methods that read take the io.ReaderAt again. An
// Image is safe for concurrent use.
type Image struct {
	Version         int
	ClusterBits     uint32
	ClusterSize     int64
	Size            int64 // virtual size in bytes
	CryptMethod     uint32
	CryptOffset     int64 // LUKS header area (FDE extension 0x0537be77); 0 when absent
	CryptLength     int64
	ExtendedL2      bool
	CompressionType int
	RefcountBits    int
	Dirty           bool // incompatible bit 0: refcounts may be stale; mappings are still valid

	fileSize  int64
	l2Entries int64 // guest clusters per L2 table
	l2Bytes   int64 // bytes per L2 entry: 8, or 16 with extended L2
	l1Needed  int64 // L1 entries that cover [0, Size)
	l1        []uint64
	meta      []span // sorted, non-overlapping metadata clusters (header, L1, refcounts, crypto, L2s)
	dcPool    decoderPools
}

// span is a half-open host byte range [off, end).
type span struct {
	off, end int64
	what     string
}

// IsQcow2 reports whether r starts with the qcow2 magic.
func IsQcow2(r io.ReaderAt) bool {
	var b [4]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return false
	}
	return binary.BigEndian.Uint32(b[:]) == magic
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("qcow2: "+format+": %w", append(args, ErrCorrupt)...)
}

func unsupportedf(format string, args ...any) error {
	return fmt.Errorf("qcow2: "+format+": %w", append(args, ErrUnsupported)...)
}

// readFull reads exactly len(b) bytes at off; callers have already checked
// that the range lies inside the file, so a short read is an I/O error.
func readFull(r io.ReaderAt, b []byte, off int64) error {
	n, err := r.ReadAt(b, off)
	if n == len(b) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("qcow2: failed to read %d bytes at %#x: %w", len(b), off, err)
}

// inFile reports whether [off, off+n) lies within a file of the given size,
// without overflowing.
func inFile(off, n, fileSize int64) bool {
	return off >= 0 && n >= 0 && off <= fileSize && n <= fileSize-off
}

func ceilDiv(a, b int64) int64 { return a/b + min(a%b, 1) }

// Open parses and validates the header, header extensions, refcount table
// and L1 table of a qcow2 image of fileSize bytes. Every size the header
// claims is checked against fileSize before memory is allocated for it.
func Open(r io.ReaderAt, fileSize int64) (*Image, error) {
	if fileSize < 4 {
		return nil, ErrNotQcow2
	}
	var fixed [v3HeaderLength]byte
	n := min(int64(len(fixed)), fileSize)
	if err := readFull(r, fixed[:n], 0); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	if be.Uint32(fixed[0:]) != magic {
		return nil, ErrNotQcow2
	}
	if n < v2HeaderLength {
		return nil, corruptf("file of %d bytes too short for a header", fileSize)
	}
	im := &Image{fileSize: fileSize}
	version := be.Uint32(fixed[4:])
	if version != 2 && version != 3 {
		return nil, unsupportedf("version %d", version)
	}
	im.Version = int(version)
	if v := be.Uint64(fixed[8:]); v != 0 {
		return nil, unsupportedf("backing file (name at %#x)", v)
	}
	cb := be.Uint32(fixed[20:])
	if cb < minClusterBits || cb > maxClusterBits {
		return nil, corruptf("cluster_bits %d outside %d..%d", cb, minClusterBits, maxClusterBits)
	}
	im.ClusterBits = cb
	cs := int64(1) << cb
	im.ClusterSize = cs
	if fileSize < cs {
		return nil, corruptf("file of %d bytes shorter than one %d-byte cluster", fileSize, cs)
	}
	size := be.Uint64(fixed[24:])
	if size > 1<<62 {
		return nil, corruptf("virtual size %#x too large", size)
	}
	im.Size = int64(size)
	im.CryptMethod = be.Uint32(fixed[32:])
	l1Size := int64(be.Uint32(fixed[36:]))
	l1Off := int64(be.Uint64(fixed[40:]) & (1<<63 - 1))
	if be.Uint64(fixed[40:])>>63 != 0 {
		return nil, corruptf("l1 table offset %#x", be.Uint64(fixed[40:]))
	}
	rtRaw := be.Uint64(fixed[48:])
	rtClusters := int64(be.Uint32(fixed[56:]))
	if nb := be.Uint32(fixed[60:]); nb != 0 {
		return nil, unsupportedf("internal snapshots (%d)", nb)
	}

	headerLen := int64(v2HeaderLength)
	im.RefcountBits = 16
	var incompat uint64
	if version == 3 {
		if n < v3HeaderLength {
			return nil, corruptf("file of %d bytes too short for a version 3 header", fileSize)
		}
		incompat = be.Uint64(fixed[72:])
		order := be.Uint32(fixed[96:])
		if order > 6 {
			return nil, corruptf("refcount_order %d above 6", order)
		}
		im.RefcountBits = 1 << order
		headerLen = int64(be.Uint32(fixed[100:]))
		if headerLen < v3HeaderLength || headerLen%8 != 0 || headerLen > cs {
			return nil, corruptf("header_length %d (need a multiple of 8 in %d..%d)", headerLen, v3HeaderLength, cs)
		}
	}
	if unknown := incompat &^ incompatKnown; unknown != 0 {
		return nil, unsupportedf("unknown incompatible feature bits %#x", unknown)
	}
	if incompat&incompatDataFile != 0 {
		return nil, unsupportedf("external data file")
	}
	if incompat&incompatCorrupt != 0 {
		return nil, corruptf("image is marked corrupt (incompatible bit 1)")
	}
	im.Dirty = incompat&incompatDirty != 0
	im.ExtendedL2 = incompat&incompatExtendedL2 != 0
	if im.ExtendedL2 && cb < minClusterBitsExtended {
		return nil, corruptf("extended L2 entries with cluster_bits %d below %d", cb, minClusterBitsExtended)
	}

	switch im.CryptMethod {
	case CryptNone, CryptLUKS:
	case CryptAES:
		return nil, unsupportedf("legacy AES encryption (crypt_method 1)")
	default:
		return nil, unsupportedf("crypt_method %d", im.CryptMethod)
	}

	// Header cluster: the optional compression_type byte and the extensions.
	hdr := make([]byte, cs)
	if err := readFull(r, hdr, 0); err != nil {
		return nil, err
	}
	if headerLen > 104 {
		im.CompressionType = int(hdr[104])
	}
	switch {
	case im.CompressionType > CompressionZstd:
		return nil, unsupportedf("compression_type %d", im.CompressionType)
	case im.CompressionType != CompressionDeflate && incompat&incompatCompression == 0:
		return nil, corruptf("compression_type %d without incompatible bit 3", im.CompressionType)
	case im.CompressionType == CompressionDeflate && incompat&incompatCompression != 0:
		return nil, corruptf("incompatible bit 3 set with deflate compression")
	}
	if err := im.parseExtensions(hdr, headerLen); err != nil {
		return nil, err
	}
	if im.CryptMethod == CryptLUKS && im.CryptLength == 0 {
		return nil, corruptf("crypt_method 2 without the crypto header extension")
	}

	// Geometry: how many L1 entries the virtual size needs.
	im.l2Bytes = 8
	if im.ExtendedL2 {
		im.l2Bytes = 16
	}
	im.l2Entries = cs / im.l2Bytes
	clusters := ceilDiv(im.Size, cs)
	im.l1Needed = ceilDiv(clusters, im.l2Entries)
	if im.l1Needed > maxL1Bytes/8 {
		return nil, corruptf("virtual size %d needs %d L1 entries, above qemu's limit", im.Size, im.l1Needed)
	}
	if l1Size > maxL1Bytes/8 {
		return nil, corruptf("l1_size %d above qemu's limit %d", l1Size, maxL1Bytes/8)
	}
	if l1Size < im.l1Needed {
		return nil, corruptf("l1_size %d too small for virtual size %d (need %d)", l1Size, im.Size, im.l1Needed)
	}

	// Metadata areas, each checked to be aligned and inside the file.
	im.meta = append(im.meta, span{0, cs, "header"})
	if l1Size > 0 {
		if l1Off%cs != 0 {
			return nil, corruptf("l1 table offset %#x not cluster aligned", l1Off)
		}
		if !inFile(l1Off, l1Size*8, fileSize) {
			return nil, corruptf("l1 table at %#x (%d entries) beyond end of file", l1Off, l1Size)
		}
		im.meta = append(im.meta, span{l1Off, l1Off + ceilDiv(l1Size*8, cs)*cs, "l1 table"})
	}
	if rtRaw > 1<<62 || int64(rtRaw)%cs != 0 {
		return nil, corruptf("refcount table offset %#x not cluster aligned", rtRaw)
	}
	rtOff := int64(rtRaw)
	if rtClusters == 0 || rtClusters > maxRefTableBytes/cs {
		return nil, corruptf("refcount_table_clusters %d", rtClusters)
	}
	if !inFile(rtOff, rtClusters*cs, fileSize) {
		return nil, corruptf("refcount table at %#x (%d clusters) beyond end of file", rtOff, rtClusters)
	}
	im.meta = append(im.meta, span{rtOff, rtOff + rtClusters*cs, "refcount table"})
	if im.CryptLength > 0 {
		im.meta = append(im.meta, span{im.CryptOffset, im.CryptOffset + ceilDiv(im.CryptLength, cs)*cs, "LUKS area"})
	}
	if err := sortDisjoint(im.meta); err != nil {
		return nil, err
	}

	rt := make([]byte, rtClusters*cs)
	if err := readFull(r, rt, rtOff); err != nil {
		return nil, err
	}
	for i := 0; i < len(rt); i += 8 {
		e := be.Uint64(rt[i:])
		if e == 0 {
			continue
		}
		if e&refTableRsvdMask != 0 || e > 1<<62 || int64(e)%cs != 0 {
			return nil, corruptf("refcount table entry %d: refcount block offset %#x not cluster aligned", i/8, e)
		}
		if !inFile(int64(e), cs, fileSize) {
			return nil, corruptf("refcount block offset %#x beyond end of file", e)
		}
		im.meta = append(im.meta, span{int64(e), int64(e) + cs, "refcount block"})
	}
	if err := sortDisjoint(im.meta); err != nil {
		return nil, err
	}

	// L1 table: entries covering the virtual size must point to distinct,
	// aligned L2 tables inside the file that do not overlap other metadata.
	if im.l1Needed > 0 {
		raw := make([]byte, im.l1Needed*8)
		if err := readFull(r, raw, l1Off); err != nil {
			return nil, err
		}
		im.l1 = make([]uint64, im.l1Needed)
		var l2 []span
		for i := range im.l1 {
			e := be.Uint64(raw[i*8:])
			if e&l1ReservedMask != 0 {
				return nil, corruptf("l1 entry %d (%#x) has reserved bits set", i, e)
			}
			off := int64(e & offsetMask)
			if off == 0 {
				continue
			}
			if off%cs != 0 {
				return nil, corruptf("l2 table offset %#x not cluster aligned", off)
			}
			if !inFile(off, cs, fileSize) {
				return nil, corruptf("l2 table offset %#x beyond end of file", off)
			}
			if s, ok := overlaps(im.meta, off, off+cs); ok {
				return nil, corruptf("l2 table at %#x overlaps the %s at %#x", off, s.what, s.off)
			}
			im.l1[i] = uint64(off)
			l2 = append(l2, span{off, off + cs, "l2 table"})
		}
		if err := sortDisjoint(l2); err != nil {
			return nil, err
		}
		im.meta = mergeSpans(im.meta, l2)
	}
	return im, nil
}

// parseExtensions walks the header extensions between headerLen and the end
// of the header cluster.
func (im *Image) parseExtensions(hdr []byte, headerLen int64) error {
	be := binary.BigEndian
	seen := map[uint32]bool{}
	off := headerLen
	end := int64(len(hdr))
	for off+8 <= end {
		typ := be.Uint32(hdr[off:])
		ln := int64(be.Uint32(hdr[off+4:]))
		if typ == extEnd {
			return nil
		}
		off += 8
		if ln > end-off {
			return corruptf("header extension %#x of %d bytes beyond the header cluster", typ, ln)
		}
		data := hdr[off : off+ln]
		if seen[typ] && typ != extFeatureNames {
			return corruptf("header extension %#x repeated", typ)
		}
		seen[typ] = true
		switch typ {
		case extCrypto:
			if ln != 16 {
				return corruptf("crypto header extension of %d bytes, want 16", ln)
			}
			if im.CryptMethod != CryptLUKS {
				return corruptf("crypto header extension with crypt_method %d", im.CryptMethod)
			}
			o, l := be.Uint64(data), be.Uint64(data[8:])
			if o > 1<<62 || l > 1<<62 {
				return corruptf("crypto header at %#x length %#x beyond end of file", o, l)
			}
			co, cl := int64(o), int64(l)
			if co == 0 || co%im.ClusterSize != 0 {
				return corruptf("crypto header offset %#x not a cluster-aligned offset past the header", co)
			}
			if cl == 0 || !inFile(co, cl, im.fileSize) {
				return corruptf("crypto header at %#x length %d beyond end of file", co, cl)
			}
			im.CryptOffset, im.CryptLength = co, cl
		case extDataFile:
			// Only meaningful with incompatible bit 2, which Open refuses.
		case extBackingFmt, extFeatureNames, extBitmaps:
			// No effect on the guest view of an image without a backing file.
		}
		off += (ln + 7) &^ 7
	}
	return nil
}

// sortDisjoint sorts s by offset and fails if two spans overlap.
func sortDisjoint(s []span) error {
	slices.SortFunc(s, func(a, b span) int {
		switch {
		case a.off < b.off:
			return -1
		case a.off > b.off:
			return 1
		}
		return 0
	})
	for i := 1; i < len(s); i++ {
		if s[i].off < s[i-1].end {
			return corruptf("%s at %#x overlaps the %s at %#x", s[i].what, s[i].off, s[i-1].what, s[i-1].off)
		}
	}
	return nil
}

// mergeSpans merges two sorted disjoint span lists that do not overlap each
// other into one sorted list.
func mergeSpans(a, b []span) []span {
	out := make([]span, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i].off < b[j].off) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	return out
}

// overlaps reports the span of the sorted list s that intersects [off, end),
// if any.
func overlaps(s []span, off, end int64) (span, bool) {
	// First span whose end is past off.
	i, _ := slices.BinarySearchFunc(s, off, func(x span, t int64) int {
		if x.end <= t {
			return -1
		}
		return 1
	})
	if i < len(s) && s[i].off < end {
		return s[i], true
	}
	return span{}, false
}
