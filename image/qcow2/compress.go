package qcow2

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// maxZstdWindow bounds the zstd window a hostile frame may ask for; qemu
// compresses one cluster (at most 2 MiB) per frame.
const maxZstdWindow = 4 << 20

// decoderPools keeps decompressors for reuse across ReadCompressed calls.
type decoderPools struct {
	flate sync.Pool // io.ReadCloser implementing flate.Resetter
	zstd  sync.Pool // *zstd.Decoder
}

// ReadCompressed decompresses the compressed cluster e (from [Image.Extents])
// into dst, which must be ClusterSize bytes long. Deflate streams are raw
// (no zlib header), as qemu writes them; zstd streams are one frame. The
// stream must produce exactly one cluster: less, or more, yields an error
// wrapping [ErrCorrupt]. Bytes after the end of the stream are ignored, since
// the descriptor only gives the length rounded to 512-byte sectors.
func (im *Image) ReadCompressed(r io.ReaderAt, e Extent, dst []byte) error {
	if e.Kind != Compressed {
		panic("qcow2: ReadCompressed called on a " + e.Kind.String() + " extent")
	}
	if int64(len(dst)) != im.ClusterSize {
		panic("qcow2: ReadCompressed destination is not one cluster long")
	}
	// One cluster's descriptor can name at most 2^(cluster_bits-8) sectors.
	if e.CompressedLength <= 0 || e.CompressedLength > im.ClusterSize*2 ||
		!inFile(e.HostOffset, e.CompressedLength, im.fileSize) {
		return corruptf("compressed cluster at %#x length %d outside the file", e.HostOffset, e.CompressedLength)
	}
	src := make([]byte, e.CompressedLength)
	if err := readFull(r, src, e.HostOffset); err != nil {
		return err
	}
	var err error
	switch im.CompressionType {
	case CompressionDeflate:
		err = im.inflate(dst, src)
	case CompressionZstd:
		err = im.unzstd(dst, src)
	default:
		err = unsupportedf("compression_type %d", im.CompressionType)
	}
	if err != nil {
		return fmt.Errorf("%w (compressed cluster at %#x, guest offset %#x)", err, e.HostOffset, e.GuestOffset)
	}
	return nil
}

func (im *Image) inflate(dst, src []byte) error {
	var fr io.ReadCloser
	if v := im.dcPool.flate.Get(); v != nil {
		fr = v.(io.ReadCloser)
		if err := fr.(flate.Resetter).Reset(bytes.NewReader(src), nil); err != nil {
			return corruptf("deflate reset: %v", err)
		}
	} else {
		fr = flate.NewReader(bytes.NewReader(src))
	}
	defer im.dcPool.flate.Put(fr)
	return fillCluster(fr, dst, "deflate", func(err error) bool {
		// The stream ended, or the sector-rounded input ran out right
		// after a full cluster (qemu accepts both).
		return err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF)
	})
}

func (im *Image) unzstd(dst, src []byte) error {
	// Compressed clusters are packed back to back, so the bytes after this
	// frame are usually the next cluster's frame: cut the input at the end
	// of the frame, or a streaming decoder would run on into it.
	n, err := zstdFrameLen(src)
	if err != nil {
		return err
	}
	src = src[:n]
	var d *zstd.Decoder
	if v := im.dcPool.zstd.Get(); v != nil {
		d = v.(*zstd.Decoder)
		if err := d.Reset(bytes.NewReader(src)); err != nil {
			return corruptf("zstd reset: %v", err)
		}
	} else {
		var err error
		d, err = zstd.NewReader(bytes.NewReader(src),
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecoderMaxMemory(maxZstdWindow))
		if err != nil {
			return corruptf("zstd: %v", err)
		}
	}
	defer im.dcPool.zstd.Put(d)
	return fillCluster(d, dst, "zstd", func(err error) bool { return err == io.EOF })
}

// zstdFrameLen returns the length of the zstd frame at the start of src by
// walking its header and block headers (RFC 8878 section 3.1.1).
func zstdFrameLen(src []byte) (int, error) {
	const frameMagic = 0xfd2fb528
	if len(src) < 5 || binary.LittleEndian.Uint32(src) != frameMagic {
		return 0, corruptf("zstd frame magic missing")
	}
	fhd := src[4]
	single := fhd&0x20 != 0
	if fhd&0x08 != 0 {
		return 0, corruptf("zstd frame header reserved bit set")
	}
	n := 5
	if !single {
		n++ // window descriptor
	}
	n += [4]int{0, 1, 2, 4}[fhd&3] // dictionary ID
	fcsSize := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcsSize == 0 && single {
		fcsSize = 1
	}
	n += fcsSize
	for {
		if n+3 > len(src) {
			return 0, corruptf("zstd frame truncated")
		}
		bh := uint32(src[n]) | uint32(src[n+1])<<8 | uint32(src[n+2])<<16
		n += 3
		size := int(bh >> 3)
		switch (bh >> 1) & 3 {
		case 0, 2: // raw, compressed
		case 1: // RLE: one byte repeated size times
			size = 1
		default:
			return 0, corruptf("zstd reserved block type")
		}
		if size > len(src)-n {
			return 0, corruptf("zstd block beyond the compressed cluster")
		}
		n += size
		if bh&1 != 0 {
			break
		}
	}
	if fhd&0x04 != 0 {
		n += 4 // content checksum
		if n > len(src) {
			return 0, corruptf("zstd frame truncated")
		}
	}
	return n, nil
}

// fillCluster reads exactly len(dst) bytes from dec and then checks that the
// stream yields no more: ok decides which error after a full cluster is
// acceptable.
func fillCluster(dec io.Reader, dst []byte, name string, ok func(error) bool) error {
	n, err := io.ReadFull(dec, dst)
	if err != nil {
		return corruptf("%s stream gave %d bytes, want a full cluster of %d: %v", name, n, len(dst), err)
	}
	var extra [1]byte
	m, err := dec.Read(extra[:])
	for i := 0; m == 0 && err == nil && i < 100; i++ {
		m, err = dec.Read(extra[:])
	}
	if m > 0 {
		return corruptf("%s stream inflates beyond the cluster size %d", name, len(dst))
	}
	if !ok(err) {
		return corruptf("%s stream after a full cluster: %v", name, err)
	}
	return nil
}
