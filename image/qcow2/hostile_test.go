package qcow2

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// hostileBase builds a small valid image with Writer: 4 KiB clusters, 4 MiB
// virtual (two L1 entries), a one-cluster LUKS area, data at guest 0 (two
// clusters) and 128 KiB (one cluster), zero clusters at 64 KiB.
func hostileBase(t testing.TB, cs int64, crypt bool) []byte {
	t.Helper()
	var m memFile
	o := CreateOptions{ClusterSize: cs}
	if crypt {
		o.CryptLength = 1000
	}
	w, err := Create(&m, 4<<20, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int64{{0, 2 * cs}, {32 * cs, cs}} {
		host, err := w.AllocateData(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		m.WriteAt(bytes.Repeat([]byte{0xa5}, int(r[1])), host)
	}
	if err := w.SetZero(16*cs, cs); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return m.b
}

// layout holds the offsets of hostileBase's structures.
type layout struct {
	l1, l2, rt, rb, crypt, data0, data1 int64
}

func layoutOf(b []byte) layout {
	be := binary.BigEndian
	var l layout
	l.l1 = int64(be.Uint64(b[40:]))
	l.rt = int64(be.Uint64(b[48:]))
	l.l2 = int64(be.Uint64(b[l.l1:]) & offsetMask)
	l.rb = int64(be.Uint64(b[l.rt:]))
	if be.Uint32(b[112:]) == extCrypto {
		l.crypt = int64(be.Uint64(b[120:]))
	}
	l.data0 = int64(be.Uint64(b[l.l2:]) & offsetMask)
	l.data1 = int64(be.Uint64(b[l.l2+32*8:]) & offsetMask)
	return l
}

func put64(b []byte, off int64, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }
func put32(b []byte, off int64, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }

// compressedEntry builds a compressed L2 descriptor for a stream of n bytes
// at host offset off.
func compressedEntry(cb uint32, off, n int64) uint64 {
	x := 62 - (cb - 8)
	sectors := (off+n-1)/512 - off/512 // additional sectors
	return flagCompressed | uint64(sectors)<<x | uint64(off)
}

func deflateBytes(t testing.TB, p []byte) []byte {
	var buf bytes.Buffer
	fw, _ := flate.NewWriter(&buf, flate.BestCompression)
	fw.Write(p)
	fw.Close()
	return buf.Bytes()
}

func zstdBytes(t testing.TB, p []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(p, nil)
}

// TestHostile feeds mutated images to Open, Extents and ReadCompressed:
// each must fail with the right sentinel (or, for the controls, succeed),
// never panic, and never allocate much.
func TestHostile(t *testing.T) {
	const cs = 4096
	base := hostileBase(t, cs, true)
	L := layoutOf(base)
	if _, _, _, err := readGuest(bytes.NewReader(base), int64(len(base))); err != nil {
		t.Fatalf("base image: %v", err)
	}
	pattern := bytes.Repeat([]byte("0123456789abcdef"), 4096/16)
	// setStream writes a compressed stream into data1's host cluster and
	// points guest cluster 32 at it.
	setStream := func(b []byte, stream []byte) {
		copy(b[L.data1:L.data1+cs], make([]byte, cs))
		copy(b[L.data1:], stream)
		put64(b, L.l2+32*8, compressedEntry(12, L.data1, int64(len(stream))))
	}
	useZstd := func(b []byte) {
		put64(b, 72, incompatCompression)
		b[104] = CompressionZstd
	}
	none := error(nil)
	cases := []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"control", func(b []byte) []byte { return b }, none},
		{"empty", func(b []byte) []byte { return b[:0] }, ErrNotQcow2},
		{"3 bytes", func(b []byte) []byte { return b[:3] }, ErrNotQcow2},
		{"bad magic", func(b []byte) []byte { b[3] = 0xfc; return b }, ErrNotQcow2},
		{"truncated header", func(b []byte) []byte { return b[:50] }, ErrCorrupt},
		{"truncated v3 header", func(b []byte) []byte { return b[:90] }, ErrCorrupt},
		{"truncated to one cluster", func(b []byte) []byte { return b[:cs] }, ErrCorrupt},
		{"truncated before l2", func(b []byte) []byte { return b[:L.l2+100] }, ErrCorrupt},
		{"version 1", func(b []byte) []byte { put32(b, 4, 1); return b }, ErrUnsupported},
		{"version 4", func(b []byte) []byte { put32(b, 4, 4); return b }, ErrUnsupported},
		{"cluster_bits 8", func(b []byte) []byte { put32(b, 20, 8); return b }, ErrCorrupt},
		{"cluster_bits 22", func(b []byte) []byte { put32(b, 20, 22); return b }, ErrCorrupt},
		{"cluster_bits huge", func(b []byte) []byte { put32(b, 20, 0xffffffff); return b }, ErrCorrupt},
		{"cluster_bits beyond file", func(b []byte) []byte { put32(b, 20, 21); return b }, ErrCorrupt},
		{"header_length 100", func(b []byte) []byte { put32(b, 100, 100); return b }, ErrCorrupt},
		{"header_length 108", func(b []byte) []byte { put32(b, 100, 108); return b }, ErrCorrupt},
		{"header_length beyond cluster", func(b []byte) []byte { put32(b, 100, 2*cs); return b }, ErrCorrupt},
		{"size overflow", func(b []byte) []byte { put64(b, 24, 1<<63+4096); return b }, ErrCorrupt},
		{"size 2^62", func(b []byte) []byte { put64(b, 24, 1<<62); return b }, ErrCorrupt},
		{"size beyond l1_size", func(b []byte) []byte { put64(b, 24, 1<<40); return b }, ErrCorrupt},
		{"l1_size huge", func(b []byte) []byte { put32(b, 36, 0xffffffff); return b }, ErrCorrupt},
		{"l1_size beyond eof", func(b []byte) []byte { put32(b, 36, 1<<20); return b }, ErrCorrupt},
		{"l1 beyond eof", func(b []byte) []byte { put64(b, 40, 1<<30); return b }, ErrCorrupt},
		{"l1 misaligned", func(b []byte) []byte { put64(b, 40, uint64(L.l1+8)); return b }, ErrCorrupt},
		{"l1 over header", func(b []byte) []byte { put64(b, 40, 0); return b }, ErrCorrupt},
		{"l1 over refcount table", func(b []byte) []byte { put64(b, 40, uint64(L.rt)); return b }, ErrCorrupt},
		{"l1 offset top bit", func(b []byte) []byte { put64(b, 40, 1<<63|uint64(L.l1)); return b }, ErrCorrupt},
		{"refcount table beyond eof", func(b []byte) []byte { put64(b, 48, 1<<30); return b }, ErrCorrupt},
		{"refcount table misaligned", func(b []byte) []byte { put64(b, 48, uint64(L.rt+512)); return b }, ErrCorrupt},
		{"refcount table over l1", func(b []byte) []byte { put64(b, 48, uint64(L.l1)); return b }, ErrCorrupt},
		{"refcount table over header", func(b []byte) []byte { put64(b, 48, 0); return b }, ErrCorrupt},
		{"refcount table huge offset", func(b []byte) []byte { put64(b, 48, 1<<63); return b }, ErrCorrupt},
		{"refcount table 0 clusters", func(b []byte) []byte { put32(b, 56, 0); return b }, ErrCorrupt},
		{"refcount table huge", func(b []byte) []byte { put32(b, 56, 0xffffffff); return b }, ErrCorrupt},
		{"refcount table beyond eof size", func(b []byte) []byte { put32(b, 56, 100); return b }, ErrCorrupt},
		{"refcount block misaligned", func(b []byte) []byte { put64(b, L.rt, uint64(L.rb+512)); return b }, ErrCorrupt},
		{"refcount block beyond eof", func(b []byte) []byte { put64(b, L.rt, 1<<30); return b }, ErrCorrupt},
		{"refcount block over l1", func(b []byte) []byte { put64(b, L.rt, uint64(L.l1)); return b }, ErrCorrupt},
		{"l1 entry reserved bits", func(b []byte) []byte { put64(b, L.l1, uint64(L.l2)|flagCopied|1); return b }, ErrCorrupt},
		{"l2 beyond eof", func(b []byte) []byte { put64(b, L.l1, 1<<30|flagCopied); return b }, ErrCorrupt},
		{"l2 misaligned", func(b []byte) []byte { put64(b, L.l1, uint64(L.l2+512)|flagCopied); return b }, ErrCorrupt},
		{"l2 over l1", func(b []byte) []byte { put64(b, L.l1, uint64(L.l1)|flagCopied); return b }, ErrCorrupt},
		{"l2 over crypto area", func(b []byte) []byte { put64(b, L.l1, uint64(L.crypt)|flagCopied); return b }, ErrCorrupt},
		{"l2 shared by two l1 entries", func(b []byte) []byte { put64(b, L.l1+8, uint64(L.l2)|flagCopied); return b }, ErrCorrupt},
		{"l2 entry reserved bits", func(b []byte) []byte { put64(b, L.l2, uint64(L.data0)|flagCopied|0x100); return b }, ErrCorrupt},
		{"l2 entry high reserved bits", func(b []byte) []byte { put64(b, L.l2, uint64(L.data0)|flagCopied|1<<58); return b }, ErrCorrupt},
		{"data misaligned", func(b []byte) []byte { put64(b, L.l2, uint64(L.data0+512)|flagCopied); return b }, ErrCorrupt},
		{"data beyond eof", func(b []byte) []byte { put64(b, L.l2, 1<<40|flagCopied); return b }, ErrCorrupt},
		{"data over l1", func(b []byte) []byte { put64(b, L.l2, uint64(L.l1)|flagCopied); return b }, ErrCorrupt},
		{"data over l2", func(b []byte) []byte { put64(b, L.l2, uint64(L.l2)|flagCopied); return b }, ErrCorrupt},
		{"data over refcount block", func(b []byte) []byte { put64(b, L.l2, uint64(L.rb)|flagCopied); return b }, ErrCorrupt},
		{"data over crypto area", func(b []byte) []byte { put64(b, L.l2, uint64(L.crypt)|flagCopied); return b }, ErrCorrupt},
		{"zero alloc misaligned", func(b []byte) []byte { put64(b, L.l2, uint64(L.data0+512)|1); return b }, ErrCorrupt},
		{"zero flag in v2", func(b []byte) []byte {
			put32(b, 4, 2)
			put32(b, 32, 0)
			put32(b, 72, 0)
			return b
		}, ErrCorrupt},
		{"compressed with copied flag", func(b []byte) []byte {
			put64(b, L.l2+32*8, compressedEntry(12, L.data1, 100)|flagCopied)
			return b
		}, ErrCorrupt},
		{"compressed beyond eof", func(b []byte) []byte {
			put64(b, L.l2+32*8, compressedEntry(12, int64(len(b))+512, 100))
			return b
		}, ErrCorrupt},
		{"compressed over l1", func(b []byte) []byte { put64(b, L.l2+32*8, compressedEntry(12, L.l1+100, 100)); return b }, ErrCorrupt},
		{"deflate control", func(b []byte) []byte { setStream(b, deflateBytes(t, pattern)); return b }, none},
		{"deflate beyond cluster", func(b []byte) []byte {
			setStream(b, deflateBytes(t, append(pattern, "more"...)))
			return b
		}, ErrCorrupt},
		{"deflate short", func(b []byte) []byte { setStream(b, deflateBytes(t, pattern[:100])); return b }, ErrCorrupt},
		{"deflate garbage", func(b []byte) []byte { setStream(b, bytes.Repeat([]byte{0xff, 0x13}, 300)); return b }, ErrCorrupt},
		{"zstd control", func(b []byte) []byte { useZstd(b); setStream(b, zstdBytes(t, pattern)); return b }, none},
		{"zstd beyond cluster", func(b []byte) []byte {
			useZstd(b)
			setStream(b, zstdBytes(t, append(pattern, "more"...)))
			return b
		}, ErrCorrupt},
		{"zstd short", func(b []byte) []byte { useZstd(b); setStream(b, zstdBytes(t, pattern[:100])); return b }, ErrCorrupt},
		{"zstd garbage", func(b []byte) []byte { useZstd(b); setStream(b, bytes.Repeat([]byte{0xff, 0x13}, 300)); return b }, ErrCorrupt},
		{"zstd truncated frame", func(b []byte) []byte {
			useZstd(b)
			s := zstdBytes(t, bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, 600))
			setStream(b, s[:len(s)/2])
			put64(b, L.l2+32*8, compressedEntry(12, L.data1, int64(len(s)/2)))
			return b
		}, ErrCorrupt},
		{"unknown incompatible bit", func(b []byte) []byte { put64(b, 72, 1<<5); return b }, ErrUnsupported},
		{"unknown incompatible bit 63", func(b []byte) []byte { put64(b, 72, 1<<63); return b }, ErrUnsupported},
		{"external data file", func(b []byte) []byte { put64(b, 72, incompatDataFile); return b }, ErrUnsupported},
		{"marked corrupt", func(b []byte) []byte { put64(b, 72, incompatCorrupt); return b }, ErrCorrupt},
		{"extended l2 with 4k clusters", func(b []byte) []byte { put64(b, 72, incompatExtendedL2); return b }, ErrCorrupt},
		{"zstd without incompatible bit", func(b []byte) []byte { b[104] = 1; return b }, ErrCorrupt},
		{"deflate with incompatible bit", func(b []byte) []byte { put64(b, 72, incompatCompression); return b }, ErrCorrupt},
		{"compression type 2", func(b []byte) []byte { put64(b, 72, incompatCompression); b[104] = 2; return b }, ErrUnsupported},
		{"refcount_order 7", func(b []byte) []byte { put32(b, 96, 7); return b }, ErrCorrupt},
		{"backing file", func(b []byte) []byte { put64(b, 8, 0x200); put32(b, 16, 4); return b }, ErrUnsupported},
		{"snapshots", func(b []byte) []byte { put32(b, 60, 1); put64(b, 64, uint64(L.rb)); return b }, ErrUnsupported},
		{"legacy aes", func(b []byte) []byte { put32(b, 32, 1); return b }, ErrUnsupported},
		{"crypt method 3", func(b []byte) []byte { put32(b, 32, 3); return b }, ErrUnsupported},
		{"luks without extension", func(b []byte) []byte { put32(b, 112, 0); return b }, ErrCorrupt},
		{"crypto extension without luks", func(b []byte) []byte { put32(b, 32, 0); return b }, ErrCorrupt},
		{"crypto area over l1", func(b []byte) []byte { put64(b, 120, uint64(L.l1)); return b }, ErrCorrupt},
		{"crypto area over data", func(b []byte) []byte { put64(b, 128, 2*cs); return b }, ErrCorrupt},
		{"crypto area over header", func(b []byte) []byte { put64(b, 120, 0); return b }, ErrCorrupt},
		{"crypto area misaligned", func(b []byte) []byte { put64(b, 120, uint64(L.crypt+512)); return b }, ErrCorrupt},
		{"crypto area beyond eof", func(b []byte) []byte { put64(b, 128, 1<<40); return b }, ErrCorrupt},
		{"crypto area length 2^63", func(b []byte) []byte { put64(b, 128, 1<<63); return b }, ErrCorrupt},
		{"crypto area empty", func(b []byte) []byte { put64(b, 128, 0); return b }, ErrCorrupt},
		{"crypto extension length 8", func(b []byte) []byte { put32(b, 116, 8); return b }, ErrCorrupt},
		{"crypto extension twice", func(b []byte) []byte { copy(b[136:], b[112:136]); return b }, ErrCorrupt},
		{"extension beyond cluster", func(b []byte) []byte { put32(b, 116, 0xfff0); return b }, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.mutate(bytes.Clone(base))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, view, err := readGuest(bytes.NewReader(b), int64(len(b)))
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20+uint64(len(view)) {
				t.Errorf("allocated %d bytes", alloc)
			}
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("want success, got %v", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("got %v, want %v", err, c.want)
			case c.want != nil:
				t.Logf("%v", err)
			}
			if c.want == nil && len(view) >= 33*cs && !bytes.Equal(view[32*cs:33*cs], pattern) && view[32*cs] != 0xa5 {
				t.Fatalf("cluster 32 reads %x...", view[32*cs:32*cs+16])
			}
		})
	}
}

// TestHostileExtendedL2 checks subcluster bitmap validation on an image
// whose L2 table is rewritten in the extended format.
func TestHostileExtendedL2(t *testing.T) {
	const cs = 16 << 10
	base := hostileBase(t, cs, false)
	L := layoutOf(base)
	// Turn the standard L2 table into an extended one: entry 0 keeps data0.
	ext := func(b []byte, word0, bitmap uint64) []byte {
		put64(b, 72, incompatExtendedL2)
		clear(b[L.l2 : L.l2+cs])
		put64(b, L.l2, word0)
		put64(b, L.l2+8, bitmap)
		return b
	}
	sc := int64(cs / 32)
	data := uint64(L.data0) | flagCopied
	cases := []struct {
		name   string
		word0  uint64
		bitmap uint64
		want   error
	}{
		{"allocated and zero subclusters", data, 0x0000_00f0_0000_000f, nil},
		{"all zero", 0, 0xffffffff_00000000, nil},
		{"both bits", data, 0x0000_0001_0000_0001, ErrCorrupt},
		{"allocated without cluster", 0, 1, ErrCorrupt},
		{"bit 0 set", data | 1, 1, ErrCorrupt},
		{"compressed with bitmap", compressedEntry(14, L.data0, 100), 1, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := ext(bytes.Clone(base), c.word0, c.bitmap)
			_, exts, view, err := readGuest(bytes.NewReader(b), int64(len(b)))
			if !errors.Is(err, c.want) && (c.want != nil || err != nil) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if c.want != nil {
				return
			}
			if c.word0 == data {
				// Subclusters 0..3 hold 0xa5, the rest of the image reads zeros.
				want := make([]byte, len(view))
				copy(want, bytes.Repeat([]byte{0xa5}, int(4*sc)))
				if !bytes.Equal(view, want) {
					t.Fatalf("view: %s", firstDiff(view, want))
				}
				if len(exts) != 3 || exts[0].Kind != Data || exts[0].Length != 4*sc || exts[0].HostOffset != L.data0 ||
					exts[1].Kind != Zero || exts[1].Length != 4*sc || exts[2].Kind != Unallocated {
					t.Fatalf("extents %+v", exts[:3])
				}
			}
		})
	}
}
