package cipher

import (
	"github.com/cryptimg/cryptimg/asm"
)

// aes-xts-plain64 with integrity hmac(sha256): dm-crypt's
// capi:authenc(hmac(sha256),xts(aes))-plain64 (Linux drivers/md/dm-crypt.c
// crypt_convert_block_aead; verified against kernel-written images by
// TestKernelIntegrityFormats). For sector N (before the IV offset), with
// vk = xts_key || mac_key:
//
//	IV  = le64(N+IVOffset) || 0^8        (plain64, the XTS tweak)
//	C   = AES-XTS(xts_key, IV, sector)   (a 4096-byte sector is one unit)
//	tag = HMAC-SHA256(mac_key, le64(N) || IV || C)
//
// The cipher key sizes are XTS's (two AES keys): 32, 48 or 64 bytes, 64 by
// default as cryptsetup's. The sector kernels are package asm's, as for the
// plain mode.
func init() {
	registerAuth(&AuthMode{Spec: "aes-xts-plain64", Integrity: "hmac(sha256)", Option: "hmac-sha256",
		CipherKeyBytes: []int{32, 48, 64}, DefaultCipherKeyBytes: 64, MACKeyBytes: macSize, TagSize: macSize,
		new: func(key []byte) (authKernel, error) { return newAuthXTS(key, asm.BestXTS()) }})
}

type authXTS struct {
	x   *xtsCipher
	mac *hmacSHA256
}

func newAuthXTS(vk []byte, impl asm.XTSImpl) (*authXTS, error) {
	return newAuthXTSMAC(vk, impl, defaultMAC())
}

// newAuthXTSMAC is newAuthXTS with the tags computed by mac (nil:
// crypto/sha256).
func newAuthXTSMAC(vk []byte, impl asm.XTSImpl, mac *asm.SHA256Impl) (*authXTS, error) {
	x, err := newXTS(vk[:len(vk)-macSize], ^uint64(0), impl)
	if err != nil {
		return nil, err
	}
	return &authXTS{x: x, mac: newHMACSHA256(vk[len(vk)-macSize:], mac)}, nil
}

func (a *authXTS) seal(dst, tags, src []byte, aadUnit, iv uint64, ss int) error {
	st := getMAC()
	defer st.put()
	step := uint64(ss / UnitSize)
	n, per := len(src)/ss, chunkSectors(ss)
	recs := grow(&st.recs, 24*per)
	for i := 0; i < n; i += per {
		m := min(per, n-i)
		d := dst[i*ss : (i+m)*ss]
		a.x.EncryptSectors(d, src[i*ss:(i+m)*ss], iv+uint64(i)*step, ss)
		aadRecords(recs, m, aadUnit+uint64(i)*step, iv+uint64(i)*step, step)
		a.mac.sectors(st, tags[i*macSize:(i+m)*macSize], recs[:24*m], d, ss)
	}
	return nil
}

func (a *authXTS) open(dst, src, tags []byte, aadUnit, iv uint64, ss int, bad func(int)) {
	st := getMAC()
	defer st.put()
	step := uint64(ss / UnitSize)
	n, per := len(src)/ss, chunkSectors(ss)
	recs := grow(&st.recs, 24*per)
	for i := 0; i < n; i += per {
		m := min(per, n-i)
		d, s := span(dst, i*ss, (i+m)*ss), src[i*ss:(i+m)*ss]
		first := iv + uint64(i)*step
		aadRecords(recs, m, aadUnit+uint64(i)*step, first, step)
		badMask := a.mac.check(st, tags[i*macSize:(i+m)*macSize], recs[:24*m], s, ss)
		openRuns(d, m, ss, badMask, i, bad, func(j, k int) {
			a.x.DecryptSectors(d[j*ss:k*ss], s[j*ss:k*ss], first+uint64(j)*step, ss)
		})
	}
}

func (a *authXTS) clear() {
	a.x.Clear()
	a.mac.clear()
}
