package cipher

import (
	"crypto/sha256"

	"github.com/cryptimg/cryptimg/asm"
	"github.com/cryptimg/cryptimg/essiv"
)

// aes-cbc-essiv:sha256 with integrity hmac(sha256): dm-crypt's
// capi:authenc(hmac(sha256),cbc(aes))-essiv:sha256, the kernel's AEAD
// essiv(authenc(hmac(sha256),cbc(aes)),sha256) (Linux crypto/essiv.c and
// crypto/authenc.c; verified against kernel-written images by
// TestKernelIntegrityFormats). For sector N (before the IV offset):
//
//	vk    = enc_key || mac_key           (the MAC key is the last 32 bytes)
//	salt  = SHA-256(vk)                  (the whole volume key, not enc_key)
//	E_IV  = AES-256_salt(le64(N+IVOffset) || 0^8)
//	C     = AES-CBC(enc_key, E_IV, sector)   (a 4096-byte sector is one chain)
//	tag   = HMAC-SHA256(mac_key, le64(N) || E_IV || C)
//
// essiv_aead_setkey hashes the encryption key and then the MAC key, which
// is where the salt differs from the plain mode's SHA-256(enc_key). The
// essiv template writes E_IV over the IV half of the associated data, so
// the tag covers the encrypted IV.
func init() {
	registerAuth(&AuthMode{Spec: "aes-cbc-essiv:sha256", Integrity: "hmac(sha256)", Option: "hmac-sha256",
		CipherKeyBytes: []int{16, 24, 32}, DefaultCipherKeyBytes: 32, MACKeyBytes: macSize, TagSize: macSize,
		new: func(key []byte) (authKernel, error) { return newAuthESSIV(key, asm.Best()) }})
}

type authESSIV struct {
	c   *essiv.Cipher
	mac *hmacSHA256
}

func newAuthESSIV(vk []byte, impl asm.Impl) (*authESSIV, error) {
	return newAuthESSIVMAC(vk, impl, defaultMAC())
}

// newAuthESSIVMAC is newAuthESSIV with the tags computed by mac (nil:
// crypto/sha256).
func newAuthESSIVMAC(vk []byte, impl asm.Impl, mac *asm.SHA256Impl) (*authESSIV, error) {
	salt := sha256.Sum256(vk)
	defer clear(salt[:])
	c, err := essiv.NewCipherWithSaltImpl(vk[:len(vk)-macSize], salt[:], impl)
	if err != nil {
		return nil, err
	}
	return &authESSIV{c: c, mac: newHMACSHA256(vk[len(vk)-macSize:], mac)}, nil
}

// records fills the associated data of n sectors: le64(aadUnit) || E_IV.
func (e *authESSIV) records(st *macState, n int, aadUnit, iv, step uint64) []byte {
	recs := grow(&st.recs, 24*n)
	aadRecords(recs, n, aadUnit, iv, step)
	for j := range n {
		e.c.EncryptIVs(recs[24*j+8 : 24*j+24])
	}
	return recs
}

func (e *authESSIV) seal(dst, tags, src []byte, aadUnit, iv uint64, ss int) error {
	st := getMAC()
	defer st.put()
	step := uint64(ss / UnitSize)
	n, per := len(src)/ss, chunkSectors(ss)
	for i := 0; i < n; i += per {
		m := min(per, n-i)
		d := dst[i*ss : (i+m)*ss]
		recs := e.records(st, m, aadUnit+uint64(i)*step, iv+uint64(i)*step, step)
		e.c.EncryptSectors(d, src[i*ss:(i+m)*ss], iv+uint64(i)*step, ss)
		e.mac.sectors(st, tags[i*macSize:(i+m)*macSize], recs, d, ss)
	}
	return nil
}

func (e *authESSIV) open(dst, src, tags []byte, aadUnit, iv uint64, ss int, bad func(int)) {
	st := getMAC()
	defer st.put()
	step := uint64(ss / UnitSize)
	n, per := len(src)/ss, chunkSectors(ss)
	for i := 0; i < n; i += per {
		m := min(per, n-i)
		d, s := span(dst, i*ss, (i+m)*ss), src[i*ss:(i+m)*ss]
		first := iv + uint64(i)*step
		recs := e.records(st, m, aadUnit+uint64(i)*step, first, step)
		badMask := e.mac.check(st, tags[i*macSize:(i+m)*macSize], recs, s, ss)
		openRuns(d, m, ss, badMask, i, bad, func(j, k int) {
			e.c.DecryptSectors(d[j*ss:k*ss], s[j*ss:k*ss], first+uint64(j)*step, ss)
		})
	}
}

// clear wipes the round keys and the HMAC states; the crypto/aes copy of
// the IV key inside essiv.Cipher can only be dropped.
func (e *authESSIV) clear() {
	e.c.Clear()
	e.mac.clear()
}
