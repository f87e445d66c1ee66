package cipher

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"hash"
	"sync"
	"unsafe"

	"github.com/cryptimg/cryptimg/asm"
	"github.com/cryptimg/cryptimg/asm/secmem"
)

// What the hmac(sha256) modes share: the MAC, the per-call scratch, and
// the associated data records.

// macSize is the HMAC-SHA256 tag, stored whole (dm-crypt's authsize 32).
const macSize = sha256.Size

// A call works in chunks: it encrypts up to authChunk bytes and then
// hashes them, while they are still in the cache. 64 KiB gives package
// asm's CBC encryption 16 sectors of 4096 bytes for its widest kernel. A
// chunk has at most 64 sectors, so its bad sectors fit in a uint64.
const (
	authChunk        = 64 << 10
	authChunkSectors = 64
)

func chunkSectors(sectorSize int) int { return min(authChunkSectors, max(1, authChunk/sectorSize)) }

// hmacSHA256 is HMAC-SHA256 (FIPS 198-1, RFC 2104) under one key. The
// SHA-256 states after the blocks K0^ipad and K0^opad are computed once
// (FIPS 198-1 section 6 allows this), so a tag costs no key block and clear
// can overwrite them. crypto/hmac precomputes the same two states but keeps
// them where nothing can wipe them.
//
// Tags are computed by a multi-buffer kernel of package asm (impl), which
// hashes several sectors side by side: one SHA-256 stream cannot keep the
// SHA unit busy, and a 512-byte sector is only ten blocks. Where package
// asm has no kernel (impl nil: no SHA-NI, arm64, the purego build),
// crypto/sha256 tags one sector at a time, with the assembly it has for
// more CPUs than package asm.
type hmacSHA256 struct {
	// inner and outer are the states marshaled by crypto/sha256, for
	// tags without impl and of empty messages, which impl's interface
	// cannot express; key holds the same two states for impl. All three
	// live in mem, package secmem's memory (locked, out of core dumps);
	// clear wipes and returns it, and sets them to nil.
	inner, outer []byte
	key          *asm.HMACSHA256Key
	impl         *asm.SHA256Impl
	mem          []byte
}

// hmacKeySize is the room of an asm.HMACSHA256Key in mem, rounded up to
// keep the states after it aligned.
const hmacKeySize = (int(unsafe.Sizeof(asm.HMACSHA256Key{})) + 15) &^ 15

// defaultMAC is the implementation the hmac(sha256) modes use: package
// asm's best kernel, or nil (crypto/sha256) when package asm has only its
// generic code. That is slower than crypto/sha256 where crypto/sha256 has
// assembly, and no faster where it has none (the purego build selects
// pure Go in both packages).
func defaultMAC() *asm.SHA256Impl {
	if best := asm.BestSHA256(); best.Name != asm.GenericSHA256.Name {
		return &best
	}
	return nil
}

// MACKernel names what computes the hmac(sha256) modes' tags: package
// asm's SHA-256 implementation ("avx512", "sha-ni"), or crypto/sha256.
func MACKernel() string {
	if m := defaultMAC(); m != nil {
		return m.Name
	}
	return "crypto/sha256"
}

// newHMACSHA256 takes a key of at most one SHA-256 block: the modes here
// use 32 bytes, so the key is never hashed first (FIPS 198-1 step 2).
func newHMACSHA256(key []byte, impl *asm.SHA256Impl) *hmacSHA256 {
	if len(key) > sha256.BlockSize {
		panic("cipher: internal error: HMAC key longer than a block")
	}
	m := &hmacSHA256{impl: impl}
	h := sha256.New()
	var pad [sha256.BlockSize]byte
	var states [2][]byte
	for _, p := range []struct {
		b   byte
		dst *[]byte
	}{{0x36, &states[0]}, {0x5c, &states[1]}} {
		for i := range pad {
			pad[i] = p.b
		}
		for i, k := range key {
			pad[i] ^= k
		}
		h.Reset()
		h.Write(pad[:])
		// A whole block is compressed straight from pad, so the state
		// holds the chaining value only, no copy of the key.
		*p.dst, _ = h.(encoding.BinaryMarshaler).MarshalBinary()
	}
	clear(pad[:])
	h.Reset()
	// asm.HMACSHA256Key holds no pointers, so it may live outside the Go
	// heap; mem is page-aligned.
	n := len(states[0])
	m.mem = secmem.Alloc(hmacKeySize + 2*n)
	m.key = (*asm.HMACSHA256Key)(unsafe.Pointer(&m.mem[0]))
	m.inner = m.mem[hmacKeySize : hmacKeySize+n : hmacKeySize+n]
	m.outer = m.mem[hmacKeySize+n:]
	copy(m.inner, states[0])
	copy(m.outer, states[1])
	clear(states[0])
	clear(states[1])
	if impl != nil {
		m.key.Init(key)
	}
	return m
}

// tag writes HMAC(aad || data) to out[:32], for any lengths.
func (m *hmacSHA256) tag(st *macState, out, aad, data []byte) {
	if m.impl != nil && len(data) > 0 {
		m.impl.HMAC(m.key, out[:macSize], aad, data, len(data))
		return
	}
	if st.innerU.UnmarshalBinary(m.inner) != nil {
		panic("cipher: authenticated sector cipher used after Clear")
	}
	st.inner.Write(aad)
	st.inner.Write(data)
	st.inner.Sum(st.sum[:0])
	st.outerU.UnmarshalBinary(m.outer)
	st.outer.Write(st.sum[:])
	st.outer.Sum(out[:0])
}

// sectors writes the tags of the n = len(data)/sectorSize sectors of data,
// HMAC(recs[24j:24j+24] || sector j), to out[32j:32j+32].
func (m *hmacSHA256) sectors(st *macState, out, recs, data []byte, sectorSize int) {
	if len(recs) != 24*(len(data)/sectorSize) {
		panic("cipher: internal error: associated data records do not match the sectors")
	}
	if m.impl != nil {
		m.impl.HMAC(m.key, out, recs, data, sectorSize)
		return
	}
	for j := range len(data) / sectorSize {
		m.tag(st, out[j*macSize:], recs[24*j:24*j+24], data[j*sectorSize:(j+1)*sectorSize])
	}
}

// check computes the tags of the sectors of data as sectors does and
// returns a mask with bit j set where sector j's differs from
// want[32j:32j+32]. Each comparison takes constant time; at most 64
// sectors.
func (m *hmacSHA256) check(st *macState, want, recs, data []byte, sectorSize int) uint64 {
	n := len(data) / sectorSize
	got := grow(&st.tags, n*macSize)
	m.sectors(st, got, recs, data, sectorSize)
	var bad uint64
	for j := range n {
		bad |= tagDiffers(got[j*macSize:(j+1)*macSize], want[j*macSize:(j+1)*macSize]) << j
	}
	return bad
}

// tagDiffers returns 1 if the 32-byte tags a and b differ and 0 if they
// are equal, in time independent of their contents, as crypto/hmac.Equal
// but a word at a time instead of its byte loop (about 2% of an open at
// 512-byte sectors, BenchmarkAuth).
func tagDiffers(a, b []byte) uint64 {
	_, _ = a[macSize-1], b[macSize-1]
	var x uint64
	for i := 0; i < macSize; i += 8 {
		x |= binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:])
	}
	return (x | -x) >> 63
}

// clear overwrites the states and returns their memory; tag panics
// afterwards (a nil key or state).
func (m *hmacSHA256) clear() {
	if m.key != nil {
		m.key.Clear()
	}
	secmem.Free(m.mem)
	m.mem, m.inner, m.outer, m.key = nil, nil, nil, nil
}

// macState is the scratch of one Seal or Open: two SHA-256 states and the
// buffers handed to them, to crypto/aes and to crypto/cipher, which would
// move from the stack to the heap through those interface calls. It holds
// no key material between calls (put resets the states).
type macState struct {
	inner, outer   hash.Hash
	innerU, outerU encoding.BinaryUnmarshaler
	sum            [macSize]byte // inner digest
	tags           []byte        // computed tags of a chunk, to compare
	aad            [24]byte      // gcm's associated data
	save           [16]byte      // gcm: bytes a Seal's tag lands on
	recs           []byte        // associated data records, or gcm IVs
	buf            []byte        // gcm: one sector and its tag
}

var macPool = sync.Pool{New: func() any {
	st := &macState{inner: sha256.New(), outer: sha256.New()}
	st.innerU = st.inner.(encoding.BinaryUnmarshaler)
	st.outerU = st.outer.(encoding.BinaryUnmarshaler)
	return st
}}

func getMAC() *macState { return macPool.Get().(*macState) }

// put resets the states (the outer one still holds the K0^opad state
// after a tag) and wipes the buffers, which hold IVs and plaintext.
func (st *macState) put() {
	st.inner.Reset()
	st.outer.Reset()
	clear(st.sum[:])
	clear(st.tags)
	clear(st.recs)
	clear(st.buf)
	macPool.Put(st)
}

// span is b[lo:hi], or nil for a nil b (an open that only checks).
func span(b []byte, lo, hi int) []byte {
	if b == nil {
		return nil
	}
	return b[lo:hi]
}

func grow(b *[]byte, n int) []byte {
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}

// aadRecords fills n 24-byte records, one per sector: dm-crypt's
// associated data le64(aadUnit) || IV with the plain64 IV
// le64(iv) || 0^8 (crypt_convert_block_aead), units stepping by step. The
// essiv mode encrypts the IV half in place.
func aadRecords(recs []byte, n int, aadUnit, iv, step uint64) {
	for j := range n {
		r := recs[24*j : 24*j+24]
		binary.LittleEndian.PutUint64(r[:8], aadUnit)
		binary.LittleEndian.PutUint64(r[8:16], iv)
		clear(r[16:])
		aadUnit += step
		iv += step
	}
}

// openRuns finishes a chunk of n sectors whose tags have been checked:
// bit j of badMask is set for each sector that failed. It calls dec once
// per run of good sectors (sector indexes j to k-1) and zeroes and reports
// the bad ones, in order; first is the chunk's first sector in the call.
// With dst nil (a check) it only reports.
func openRuns(dst []byte, n, sectorSize int, badMask uint64, first int, bad func(int), dec func(j, k int)) {
	for j := 0; j < n; {
		if dst == nil {
			if badMask>>j&1 != 0 {
				bad(first + j)
			}
			j++
			continue
		}
		if badMask>>j&1 != 0 {
			clear(dst[j*sectorSize : (j+1)*sectorSize])
			bad(first + j)
			j++
			continue
		}
		k := j + 1
		for k < n && badMask>>k&1 == 0 {
			k++
		}
		dec(j, k)
		j = k
	}
}
