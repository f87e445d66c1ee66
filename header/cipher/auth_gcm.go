package cipher

import (
	"crypto/aes"
	gocipher "crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
)

// aes-gcm-random with integrity aead: dm-crypt's capi:gcm(aes)-random
// (Linux drivers/md/dm-crypt.c; verified against kernel-written images by
// TestKernelIntegrityFormats).
// Every write draws a fresh 12-byte IV (dm-crypt's "random" IV generator,
// crypt_iv_random_gen), so the IV offset plays no part. For sector N:
//
//	(C, tag16) = AES-GCM(vk, nonce = IV, aad = le64(N) || IV, sector)
//	slot       = tag16 || IV             (28 bytes)
//
// and a read takes the IV from the slot. With random 96-bit nonces, NIST
// SP 800-38D section 8.3 allows 2^32 GCM writes under one key; that bound is
// the format's, not ours.
func init() {
	registerAuth(&AuthMode{Spec: "aes-gcm-random", Integrity: "aead", Option: "aead",
		CipherKeyBytes: []int{16, 24, 32}, DefaultCipherKeyBytes: 32, MACKeyBytes: 0, TagSize: gcmTag + gcmIV,
		new: func(key []byte) (authKernel, error) { return newAuthGCM(key) }})
}

const (
	gcmTag = 16
	gcmIV  = 12
)

type authGCM struct {
	aead gocipher.AEAD // crypto/cipher's GCM: read-only, safe for concurrent use
	rand io.Reader     // crypto/rand.Reader; tests replace it
}

func newAuthGCM(key []byte) (*authGCM, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	g, err := gocipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return &authGCM{aead: g, rand: rand.Reader}, nil
}

// gcmAAD writes le64(unit) || IV to st.aad and returns those 20 bytes, the
// associated data of one sector.
func gcmAAD(st *macState, unit uint64, iv []byte) []byte {
	binary.LittleEndian.PutUint64(st.aad[:8], unit)
	copy(st.aad[8:], iv)
	return st.aad[:8+gcmIV]
}

func (g *authGCM) seal(dst, tags, src []byte, aadUnit, _ uint64, ss int) error {
	st := getMAC()
	defer st.put()
	n, step := len(src)/ss, uint64(ss/UnitSize)
	ivs := grow(&st.recs, n*gcmIV)
	if _, err := io.ReadFull(g.rand, ivs); err != nil {
		return fmt.Errorf("cipher: aes-gcm-random: reading random IVs: %w", err)
	}
	for j := range n {
		slot := tags[j*(gcmTag+gcmIV) : (j+1)*(gcmTag+gcmIV)]
		nonce := slot[gcmTag:]
		copy(nonce, ivs[j*gcmIV:])
		aad := gcmAAD(st, aadUnit+uint64(j)*step, nonce)
		off := j * ss
		if j < n-1 {
			// crypto/cipher appends the tag to the ciphertext; let it
			// land on the next sector's first 16 bytes and put them back.
			next := dst[off+ss : off+ss+gcmTag]
			copy(st.save[:], next)
			out := g.aead.Seal(dst[off:off], nonce, src[off:off+ss], aad)
			copy(slot[:gcmTag], out[ss:])
			copy(next, st.save[:])
			continue
		}
		out := g.aead.Seal(grow(&st.buf, ss+gcmTag)[:0], nonce, src[off:off+ss], aad)
		copy(dst[off:off+ss], out[:ss])
		copy(slot[:gcmTag], out[ss:])
	}
	clear(st.save[:])
	return nil
}

// open copies each sector and its tag next to each other, as crypto/cipher
// wants them, and opens the copy in place: dst receives only plaintext
// whose tag matched (crypto/cipher's assembly decrypts while it hashes),
// and an in-place ciphertext survives a bad tag until it is zeroed. A
// check (dst nil) decrypts into the copy all the same, crypto/cipher
// having no check alone, and drops it.
func (g *authGCM) open(dst, src, tags []byte, aadUnit, _ uint64, ss int, bad func(int)) {
	st := getMAC()
	defer st.put()
	n, step := len(src)/ss, uint64(ss/UnitSize)
	buf := grow(&st.buf, ss+gcmTag)
	for j := range n {
		slot := tags[j*(gcmTag+gcmIV) : (j+1)*(gcmTag+gcmIV)]
		nonce := slot[gcmTag:]
		aad := gcmAAD(st, aadUnit+uint64(j)*step, nonce)
		off := j * ss
		copy(buf, src[off:off+ss])
		copy(buf[ss:], slot[:gcmTag])
		pt, err := g.aead.Open(buf[:0], nonce, buf, aad)
		if err != nil {
			if dst != nil {
				clear(dst[off : off+ss])
			}
			bad(j)
			continue
		}
		if dst != nil {
			copy(dst[off:off+ss], pt)
		}
	}
}

// clear drops the key: crypto/aes and crypto/cipher's GCM cannot wipe
// their expanded key and hash key.
func (g *authGCM) clear() { g.aead = nil }
