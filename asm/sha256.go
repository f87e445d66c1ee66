package asm

import (
	"crypto/sha256"
	"encoding/binary"
)

// Multi-buffer SHA-256 (FIPS 180-4) and HMAC-SHA256 (FIPS 198-1) for the
// sector tags of LUKS2 integrity modes: HMAC(mac_key, le64(N) || IV || C)
// over many sectors of one key. One SHA-256 stream is a chain of dependent
// rounds, so a single sector cannot keep the SHA-NI unit busy; the kernels
// run several independent messages side by side instead, one lane each.
//
// Every implementation computes exactly what GenericSHA256 computes, which
// is FIPS 180-4 written out in Go (sha256_generic.go); the tests compare
// each of them with it and with crypto/hmac.

// HMACSHA256Size is the size of an HMAC-SHA256 tag.
const HMACSHA256Size = 32

const (
	sha256BlockSize = 64
	// sha256Lanes is how many messages the HMAC driver takes at a time:
	// the widest kernel's lane count.
	sha256Lanes = 16
)

// SHA256State is a SHA-256 chaining value, the words H0..H7 of FIPS 180-4
// section 6.2.
type SHA256State [8]uint32

// SHA256IV returns SHA-256's initial hash value (FIPS 180-4 section
// 5.3.3): the chaining value before the first block of a message.
func SHA256IV() SHA256State { return sha256IV }

// HMACSHA256Key is an HMAC-SHA256 key reduced to the two chaining values
// after the blocks K0^ipad and K0^opad, which FIPS 198-1 section 6 allows
// to precompute: a tag then costs no key block. The zero value is not a
// key; Init makes one. A key is read-only after Init and safe for
// concurrent use.
type HMACSHA256Key struct {
	inner, outer SHA256State
	set          bool
}

// Init sets k to the HMAC-SHA256 key key, of any length (FIPS 198-1
// section 4: keys longer than a block are hashed first).
func (k *HMACSHA256Key) Init(key []byte) {
	var k0 [sha256BlockSize]byte
	if len(key) > sha256BlockSize {
		sum := sha256.Sum256(key)
		copy(k0[:], sum[:])
		clear(sum[:])
	} else {
		copy(k0[:], key)
	}
	var pad [sha256BlockSize]byte
	for i, b := range k0 {
		pad[i] = b ^ 0x36
	}
	k.inner = sha256IV
	sha256BlocksGeneric(&k.inner, pad[:])
	for i, b := range k0 {
		pad[i] = b ^ 0x5c
	}
	k.outer = sha256IV
	sha256BlocksGeneric(&k.outer, pad[:])
	clear(pad[:])
	clear(k0[:])
	k.set = true
}

// Clear overwrites the key. It must not be used afterwards: the HMAC
// functions panic on a cleared key.
func (k *HMACSHA256Key) Clear() {
	clear(k.inner[:])
	clear(k.outer[:])
	k.set = false
}

// SHA256BlocksFunc compresses whole blocks into several chaining values:
// for every j, the blocks of blocks[j] into h[j] (FIPS 180-4 section 6.2.2
// for each block in turn). len(h) == len(blocks), and every blocks[j] has
// the same length, a multiple of 64 bytes.
type SHA256BlocksFunc func(h []SHA256State, blocks [][]byte)

// HMACSHA256Func writes n tags, one per message: for i < n,
// tags[32i:32i+32] = HMAC-SHA256(k, aad_i || msg_i), where the n =
// len(msgs)/msgSize messages are msg_i = msgs[i*msgSize:(i+1)*msgSize] and
// their associated data aad_i = aads[i*a:(i+1)*a] with a = len(aads)/n
// (possibly 0). msgSize > 0, len(msgs) is a multiple of it, len(aads) a
// multiple of n, and tags, of at least 32n bytes, overlaps neither input.
// It panics if these conditions fail or k is not an initialized key.
//
// This is the sector tag of LUKS2's hmac(sha256) integrity: aads holds
// the 24-byte records le64(N) || IV, msgs the ciphertext sectors.
type HMACSHA256Func func(k *HMACSHA256Key, tags, aads, msgs []byte, msgSize int)

// SHA256Impl is one implementation of multi-buffer SHA-256.
type SHA256Impl struct {
	Name string
	// Lanes is how many independent SHA-256 streams a kernel interleaves
	// (1: one message at a time).
	Lanes  int
	Blocks SHA256BlocksFunc
	HMAC   HMACSHA256Func
}

// sha256Kernel names a compression kernel. The HMAC driver calls kernels
// through a switch rather than a function value, so that its scratch
// buffers stay on the stack.
type sha256Kernel uint8

const (
	sha256KernelGeneric sha256Kernel = iota
	sha256KernelSHANI                // amd64 SHA-NI, 4 lanes for long runs, else 2 (and 1)
	sha256KernelSHANI2               // amd64 SHA-NI, 2 lanes (and 1)
	sha256KernelSHANI4               // amd64 SHA-NI, 4 lanes (and 2 and 1)
	sha256KernelAVX512               // amd64 AVX-512, 16 lanes (fewer on SHA-NI when there is SHA-NI)
)

func newSHA256Impl(name string, lanes int, kern sha256Kernel) SHA256Impl {
	return SHA256Impl{
		Name:   name,
		Lanes:  lanes,
		Blocks: func(h []SHA256State, blocks [][]byte) { sha256Blocks(kern, h, blocks) },
		HMAC: func(k *HMACSHA256Key, tags, aads, msgs []byte, msgSize int) {
			hmacSHA256(kern, k, tags, aads, msgs, msgSize)
		},
	}
}

// GenericSHA256 is the pure-Go implementation, one message at a time.
var GenericSHA256 = newSHA256Impl("generic", 1, sha256KernelGeneric)

// SHA256Implementations returns every SHA-256 implementation this CPU can
// run, best first; the last is GenericSHA256.
func SHA256Implementations() []SHA256Impl {
	return append(append([]SHA256Impl(nil), sha256ArchImpls()...), GenericSHA256)
}

// BestSHA256 returns the fastest SHA-256 implementation this CPU can run.
func BestSHA256() SHA256Impl { return SHA256Implementations()[0] }

// sha256Compress runs the kernel over nblocks blocks of each of the first
// lanes lanes: p[j] into h[j].
func sha256Compress(kern sha256Kernel, h *[sha256Lanes]SHA256State, p *[sha256Lanes][]byte, lanes, nblocks int) {
	if nblocks == 0 {
		return
	}
	for j := range lanes {
		if len(p[j]) < nblocks*sha256BlockSize {
			panic("asm: internal error: short SHA-256 lane")
		}
	}
	if kern == sha256KernelGeneric {
		for j := range lanes {
			sha256BlocksGeneric(&h[j], p[j][:nblocks*sha256BlockSize])
		}
		return
	}
	sha256ArchCompress(kern, h, p, lanes, nblocks)
}

func sha256Blocks(kern sha256Kernel, hs []SHA256State, blocks [][]byte) {
	if len(hs) != len(blocks) {
		panic("asm: SHA-256 lanes and block lists differ in number")
	}
	if len(hs) == 0 {
		return
	}
	size := len(blocks[0])
	if size%sha256BlockSize != 0 {
		panic("asm: SHA-256 input is not whole blocks")
	}
	for _, b := range blocks {
		if len(b) != size {
			panic("asm: SHA-256 lanes of different lengths")
		}
	}
	var h [sha256Lanes]SHA256State
	var p [sha256Lanes][]byte
	for i := 0; i < len(hs); i += sha256Lanes {
		lanes := min(sha256Lanes, len(hs)-i)
		copy(h[:lanes], hs[i:])
		copy(p[:lanes], blocks[i:])
		sha256Compress(kern, &h, &p, lanes, size/sha256BlockSize)
		copy(hs[i:i+lanes], h[:lanes])
	}
	clear(h[:])
}

// hmacSHA256 is the HMAC driver, for up to sha256Lanes messages at a time.
// The inner hash covers K0^ipad || aad || msg, so aad || msg is hashed
// from the 64-byte mark: first the whole blocks of aad, then the block
// that joins the end of aad to the start of msg (assembled in buf), then
// the whole blocks left in msg, read in place, then the last bytes with
// the padding (FIPS 180-4 section 5.1.1) in one or two blocks of buf. The
// outer hash is one block after K0^opad's: the inner digest and padding.
//
// It is one function so that h, p and buf, which p points into, stay on
// the stack: escape analysis loses track of a pointer stored through
// another pointer.
func hmacSHA256(kern sha256Kernel, k *HMACSHA256Key, tags, aads, msgs []byte, m int) {
	if !k.set {
		panic("asm: HMAC-SHA256 key not initialized or cleared")
	}
	if m <= 0 || len(msgs)%m != 0 {
		panic("asm: HMAC-SHA256 messages are not whole multiples of the message size")
	}
	n := len(msgs) / m
	if n == 0 {
		if len(aads) != 0 {
			panic("asm: HMAC-SHA256 associated data without messages")
		}
		return
	}
	if len(aads)%n != 0 {
		panic("asm: HMAC-SHA256 associated data is not split evenly between the messages")
	}
	if len(tags) < n*HMACSHA256Size {
		panic("asm: HMAC-SHA256 tag buffer too small")
	}
	a := len(aads) / n
	var (
		h   [sha256Lanes]SHA256State
		p   [sha256Lanes][]byte
		buf [sha256Lanes][2 * sha256BlockSize]byte
	)
	// Per message, independent of the group: whole blocks of aad, what
	// is left of it (r), the joining block if aad || msg fills one, the
	// whole blocks of msg after it and the t bytes before the padding, in
	// tb blocks.
	nbA := a / sha256BlockSize
	aOff := nbA * sha256BlockSize
	r := a - aOff
	join := r > 0 && r+m >= sha256BlockSize
	mOff := 0
	if join {
		mOff = sha256BlockSize - r
	}
	nbM := (m - mOff) / sha256BlockSize
	rest := r // associated data bytes in the last block(s)
	if join {
		rest = 0
	}
	t := rest + m - mOff - nbM*sha256BlockSize
	tb := 1
	if t > sha256BlockSize-9 {
		tb = 2
	}
	bits := uint64(sha256BlockSize+a+m) * 8

	for i := 0; i < n; i += sha256Lanes {
		lanes := min(sha256Lanes, n-i)
		aad := aads[i*a : (i+lanes)*a]
		msg := msgs[i*m : (i+lanes)*m]
		for j := range lanes {
			h[j] = k.inner
			p[j] = aad[j*a : j*a+aOff]
		}
		sha256Compress(kern, &h, &p, lanes, nbA)
		if join {
			for j := range lanes {
				b := buf[j][:sha256BlockSize]
				copy(b, aad[j*a+aOff:(j+1)*a])
				copy(b[r:], msg[j*m:j*m+mOff])
				p[j] = b
			}
			sha256Compress(kern, &h, &p, lanes, 1)
		}
		for j := range lanes {
			p[j] = msg[j*m+mOff : (j+1)*m]
		}
		sha256Compress(kern, &h, &p, lanes, nbM)
		for j := range lanes {
			b := buf[j][:tb*sha256BlockSize]
			copy(b, aad[(j+1)*a-rest:(j+1)*a])
			copy(b[rest:], msg[j*m+mOff+nbM*sha256BlockSize:(j+1)*m])
			b[t] = 0x80
			clear(b[t+1 : len(b)-8])
			binary.BigEndian.PutUint64(b[len(b)-8:], bits)
			p[j] = b
		}
		sha256Compress(kern, &h, &p, lanes, tb)
		for j := range lanes {
			b := buf[j][:sha256BlockSize]
			putDigest(b, &h[j])
			b[32] = 0x80
			clear(b[33:56])
			binary.BigEndian.PutUint64(b[56:], (sha256BlockSize+32)*8)
			h[j] = k.outer
			p[j] = b
		}
		sha256Compress(kern, &h, &p, lanes, 1)
		out := tags[i*HMACSHA256Size : (i+lanes)*HMACSHA256Size]
		for j := range lanes {
			putDigest(out[j*HMACSHA256Size:], &h[j])
		}
	}
	// buf holds inner digests, from which the tags of their messages can
	// be forged, and h chaining values.
	clear(buf[:])
	clear(h[:])
}

// putDigest writes the chaining value h as a SHA-256 digest: its words
// big-endian (FIPS 180-4 section 6.2.2, step 4).
func putDigest(b []byte, h *SHA256State) {
	_ = b[31]
	for i, w := range h {
		binary.BigEndian.PutUint32(b[4*i:], w)
	}
}
