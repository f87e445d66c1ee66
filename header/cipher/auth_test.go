package cipher

import (
	"bytes"
	"crypto/aes"
	gocipher "crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/asm"
	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/vectors"
	"golang.org/x/crypto/xts"
)

const (
	specESSIV = "aes-cbc-essiv:sha256"
	specXTS   = "aes-xts-plain64"
	specGCM   = "aes-gcm-random"
)

func mustAuth(t testing.TB, spec string) *AuthMode {
	t.Helper()
	integrity := "hmac(sha256)"
	if spec == specGCM {
		integrity = "aead"
	}
	m, err := ParseAuth(spec, integrity)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// authImpl is one kernel of a mode: every asm implementation for the
// hmac(sha256) modes, crypto/cipher's GCM for gcm.
type authImpl struct {
	name string
	new  func(key []byte) (authKernel, error)
}

func authImpls(spec string) []authImpl {
	var impls []authImpl
	switch spec {
	case specESSIV:
		for _, impl := range asm.Implementations() {
			impls = append(impls, authImpl{impl.Name, func(key []byte) (authKernel, error) { return newAuthESSIV(key, impl) }})
		}
	case specXTS:
		for _, impl := range asm.XTSImplementations() {
			impls = append(impls, authImpl{impl.Name, func(key []byte) (authKernel, error) { return newAuthXTS(key, impl) }})
		}
	case specGCM:
		impls = append(impls, authImpl{"stdlib", func(key []byte) (authKernel, error) { return newAuthGCM(key) }})
	}
	return impls
}

// bindAuth is NewSector with a chosen kernel.
func bindAuth(t testing.TB, m *AuthMode, impl authImpl, key []byte, g Geometry) AuthSector {
	t.Helper()
	if !m.ValidKey(len(key)) {
		t.Fatalf("%s: %d-byte key", m.Name(), len(key))
	}
	k, err := impl.new(key)
	if err != nil {
		t.Fatal(err)
	}
	return &authSector{k: k, g: g, tag: m.TagSize, prefix: "cipher: " + m.Name()}
}

func TestAuthRegistry(t *testing.T) {
	want := []string{"aes-cbc-essiv:sha256 + hmac(sha256)", "aes-gcm-random + aead", "aes-xts-plain64 + hmac(sha256)"}
	if got := SupportedAuth(); !slices.Equal(got, want) {
		t.Fatalf("SupportedAuth() = %q, want %q", got, want)
	}
	for _, c := range []struct {
		spec, integrity, option string
		keys                    []int
		def, mac, tag           int
	}{
		{specESSIV, "hmac(sha256)", "hmac-sha256", []int{48, 56, 64}, 32, 32, 32},
		{specXTS, "hmac(sha256)", "hmac-sha256", []int{64, 80, 96}, 64, 32, 32},
		{specGCM, "aead", "aead", []int{16, 24, 32}, 32, 0, 28},
	} {
		m, err := ParseAuth(c.spec, c.integrity)
		if err != nil {
			t.Fatal(err)
		}
		if m.Spec != c.spec || m.Integrity != c.integrity || m.Option != c.option ||
			m.DefaultCipherKeyBytes != c.def || m.MACKeyBytes != c.mac || m.TagSize != c.tag {
			t.Errorf("%s: %+v", c.spec, m)
		}
		if got := m.KeyBytes(); !slices.Equal(got, c.keys) {
			t.Errorf("%s: KeyBytes() = %v, want %v", c.spec, got, c.keys)
		}
		if !m.ValidKey(m.DefaultCipherKeyBytes + m.MACKeyBytes) {
			t.Errorf("%s: the default key is not valid", c.spec)
		}
		for _, n := range c.keys {
			s, err := m.NewSector(make([]byte, n), Geometry{SectorSize: 4096})
			if err != nil {
				t.Errorf("%s with %d bytes: %v", c.spec, n, err)
				continue
			}
			if s.TagSize() != c.tag || s.Geometry().SectorSize != 4096 {
				t.Errorf("%s: TagSize %d, geometry %+v", c.spec, s.TagSize(), s.Geometry())
			}
		}
		bad := []int{0, c.keys[0] - 1, c.keys[len(c.keys)-1] + 8}
		if !slices.Contains(c.keys, c.def) {
			bad = append(bad, c.def) // the cipher key without its MAC key
		}
		for _, n := range bad {
			var ke *AuthKeySizeError
			if _, err := m.NewSector(make([]byte, n), LUKS1); !errors.As(err, &ke) || ke.Size != n {
				t.Errorf("%s with %d bytes: %v, want an AuthKeySizeError", c.spec, n, err)
			}
		}
		if _, err := m.NewSector(make([]byte, c.keys[0]), Geometry{SectorSize: 4096, LargeIV: true}); err == nil {
			t.Errorf("%s: iv_large_sectors accepted", c.spec)
		}
		if _, err := m.NewSector(make([]byte, c.keys[0]), Geometry{SectorSize: 1000}); err == nil {
			t.Errorf("%s: 1000-byte sectors accepted", c.spec)
		}
		if got, err := IntegrityType(c.option); err != nil || got != c.integrity {
			t.Errorf("IntegrityType(%q) = %q, %v", c.option, got, err)
		}
	}
	for _, p := range [][2]string{
		{specESSIV, "aead"}, {specGCM, "hmac(sha256)"}, {"aes-xts-plain", "hmac(sha256)"},
		{specXTS, "hmac(sha512)"}, {specXTS, "hmac-sha256"}, {"aes-xts-random", "hmac(sha256)"},
	} {
		_, err := ParseAuth(p[0], p[1])
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || ue.Spec != p[0]+" + "+p[1] {
			t.Errorf("ParseAuth(%q, %q): %v", p[0], p[1], err)
		}
	}
	for _, o := range []string{"hmac-sha512", "hmac(sha256)", "poly1305", ""} {
		if _, err := IntegrityType(o); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "aead, hmac-sha256") {
			t.Errorf("IntegrityType(%q): %v", o, err)
		}
	}
	m := mustAuth(t, specXTS)
	err := (&AuthKeySizeError{Mode: m, Size: 32}).Error()
	if want := "256-bit volume key is invalid for aes-xts-plain64 + hmac(sha256) (want a 256, 384 or 512-bit cipher key plus a 256-bit MAC key)"; err != want {
		t.Errorf("AuthKeySizeError: %q, want %q", err, want)
	}
}

// TestAuthKernelVectors runs Linux's essiv(authenc(hmac(sha256),cbc(aes)),
// sha256) vectors (crypto/testmgr.h essiv_hmac_sha256_aes_cbc_tv_temp, see
// vectors/README.md) through the essiv mode's kernel on every
// implementation.
//
// None of the 7 is a dm-crypt sector, so none can go through Seal and Open
// whole: their IVs are 16 random-looking bytes, not le64(N) || 0^8; their
// messages are 16 to 80 bytes, not 512 to 4096; and their associated data
// is IV' alone (16 bytes), or for vector 4 an 8-byte ESP SPI and sequence
// number before it, not le64(N) || E_IV with N the IV's sector. What does
// map is checked for all 7, with the mode's own pieces:
//
//   - the key: the authenc blob (rtattr, be32 enckeylen, MAC key, encryption
//     key) becomes the volume key encryption key || MAC key, cryptsetup's
//     order, and the mode derives the salt from it: its IV cipher turns the
//     vector's iv into the IV' at the end of assoc;
//   - CBC under the encryption key from IV', through the asm kernels: in CBC
//     a ciphertext block is the next block's IV, so the sector IV' || C
//     decrypts to some block || P, and that block || P encrypts back to
//     IV' || C;
//   - the tag: the mode's HMAC over assoc || C is the vector's.
func TestAuthKernelVectors(t *testing.T) {
	raw, err := vectors.ReadFile("essiv/essiv-authenc-hmac-sha256-cbc-aes-sha256.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Index      int    `json:"index"`
		Key        string `json:"key"`
		IV         string `json:"iv"`
		PText      string `json:"ptext"`
		Assoc      string `json:"assoc"`
		CText      string `json:"ctext"`
		Alen       int    `json:"alen"`
		Plen       int    `json:"plen"`
		Authsize   int    `json:"authsize"`
		AuthencKey struct {
			EncKeyLen int    `json:"enckeylen"`
			AuthKey   string `json:"authkey"`
			EncKey    string `json:"enckey"`
		} `json:"authenc_key"`
	}
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) != 7 {
		t.Fatalf("%d vectors, want 7", len(vs))
	}
	m := mustAuth(t, specESSIV)
	for _, impl := range authImpls(specESSIV) {
		t.Run(impl.name, func(t *testing.T) {
			st := getMAC()
			defer st.put()
			for _, v := range vs {
				blob, iv, pt, assoc, ct := unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.PText), unhex(t, v.Assoc), unhex(t, v.CText)
				if len(assoc) != v.Alen || len(pt) != v.Plen || len(ct) != v.Plen+macSize || v.Authsize != macSize {
					t.Fatalf("vector %d: inconsistent lengths", v.Index)
				}
				if bytes.Equal(iv[8:], make([]byte, 8)) && v.Plen >= 512 && v.Alen == 24 {
					t.Fatalf("vector %d is shaped like a dm-crypt sector: test it through Seal", v.Index)
				}
				// The little-endian host form of the blob: struct rtattr
				// {u16 rta_len = 8, u16 rta_type = 1}, then be32 enckeylen.
				if binary.LittleEndian.Uint16(blob[0:]) != 8 || binary.LittleEndian.Uint16(blob[2:]) != 1 {
					t.Fatalf("vector %d: not an authenc key blob", v.Index)
				}
				encLen := int(binary.BigEndian.Uint32(blob[4:]))
				enc, mac := blob[len(blob)-encLen:], blob[8:len(blob)-encLen]
				if encLen != v.AuthencKey.EncKeyLen || !bytes.Equal(enc, unhex(t, v.AuthencKey.EncKey)) || !bytes.Equal(mac, unhex(t, v.AuthencKey.AuthKey)) {
					t.Fatalf("vector %d: blob parsed differently from its authenc_key", v.Index)
				}
				vk := append(append([]byte(nil), enc...), mac...)
				if !m.ValidKey(len(vk)) {
					t.Fatalf("vector %d: %d-byte volume key", v.Index, len(vk))
				}
				k, err := impl.new(vk)
				if err != nil {
					t.Fatal(err)
				}
				e := k.(*authESSIV)

				ivp := bytes.Clone(iv)
				e.c.EncryptIVs(ivp)
				if !bytes.Equal(ivp, assoc[len(assoc)-16:]) {
					t.Errorf("vector %d: E_IV %x, want assoc's %x (salt not SHA-256(enc || mac)?)", v.Index, ivp, assoc[len(assoc)-16:])
				}

				c, tag := ct[:v.Plen], ct[v.Plen:]
				sector := append(bytes.Clone(ivp), c...)
				dec := make([]byte, len(sector))
				e.c.Decrypt(dec, sector, 0)
				if !bytes.Equal(dec[16:], pt) {
					t.Errorf("vector %d: CBC decryption from IV' = %x, want %x", v.Index, dec[16:], pt)
				}
				enc2 := make([]byte, len(sector))
				e.c.Encrypt(enc2, dec, 0)
				if !bytes.Equal(enc2, sector) {
					t.Errorf("vector %d: CBC encryption from IV' = %x, want %x", v.Index, enc2[16:], c)
				}

				got := make([]byte, macSize)
				e.mac.tag(st, got, assoc, c)
				if !bytes.Equal(got, tag) {
					t.Errorf("vector %d: tag %x, want %x", v.Index, got, tag)
				}
				c[0] ^= 1
				e.mac.tag(st, got, assoc, c)
				if bytes.Equal(got, tag) {
					t.Errorf("vector %d: tag does not cover the ciphertext", v.Index)
				}
				c[0] ^= 1
			}
		})
	}
}

// refSeal is docs/INTEGRITY.md §5 written out with crypto/aes,
// crypto/cipher, x/crypto/xts and crypto/hmac, one sector at a time: the
// associated data uses the unit N, the IV N+ivOffset.
func refSeal(t *testing.T, spec string, vk, src []byte, unit, ivOffset uint64, ss int) (ct, tags []byte) {
	enc, mk := vk[:len(vk)-32], vk[len(vk)-32:]
	ct = make([]byte, len(src))
	for i := 0; i < len(src)/ss; i++ {
		n := unit + uint64(i*ss/512)
		p, c := src[i*ss:(i+1)*ss], ct[i*ss:(i+1)*ss]
		iv := make([]byte, 16)
		binary.LittleEndian.PutUint64(iv, n+ivOffset)
		switch spec {
		case specESSIV:
			salt := sha256.Sum256(vk)
			ivc, _ := aes.NewCipher(salt[:])
			ivc.Encrypt(iv, iv)
			b, _ := aes.NewCipher(enc)
			gocipher.NewCBCEncrypter(b, iv).CryptBlocks(c, p)
		case specXTS:
			x, err := xts.NewCipher(aes.NewCipher, enc)
			if err != nil {
				t.Fatal(err)
			}
			x.Encrypt(c, p, n+ivOffset)
		}
		h := hmac.New(sha256.New, mk)
		binary.Write(h, binary.LittleEndian, n)
		h.Write(iv)
		h.Write(c)
		tags = h.Sum(tags)
	}
	return ct, tags
}

// refOpenGCM checks each sector with crypto/cipher's GCM, the IV taken from
// the slot and the associated data le64(N) || IV.
func refOpenGCM(t *testing.T, vk, ct, tags []byte, unit uint64, ss int) []byte {
	b, _ := aes.NewCipher(vk)
	g, _ := gocipher.NewGCM(b)
	var out []byte
	for i := 0; i < len(ct)/ss; i++ {
		slot := tags[i*28 : (i+1)*28]
		aad := binary.LittleEndian.AppendUint64(nil, unit+uint64(i*ss/512))
		aad = append(aad, slot[16:]...)
		p, err := g.Open(nil, slot[16:], append(bytes.Clone(ct[i*ss:(i+1)*ss]), slot[:16]...), aad)
		if err != nil {
			t.Fatalf("sector %d does not open with crypto/cipher GCM: %v", i, err)
		}
		out = append(out, p...)
	}
	return out
}

func TestAuthReference(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		for _, impl := range authImpls(spec) {
			t.Run(spec+"/"+impl.name, func(t *testing.T) { testAuthReference(t, m, impl) })
		}
	}
}

func testAuthReference(t *testing.T, m *AuthMode, impl authImpl) {
	spec := m.Spec
	for _, keyLen := range m.KeyBytes() {
		vk := randBytes(keyLen)
		for _, ss := range []int{512, 1024, 4096} {
			per := chunkSectors(ss)
			for _, n := range []int{1, 3, per + 3} {
				for _, c := range []struct{ unit, ivOffset uint64 }{
					{0, 0}, {1<<32 - 16, 0}, {40, 12345}, {1 << 40, 1<<64 - 8},
				} {
					name := fmt.Sprintf("key%d/ss%d/n%d/unit%d+%d", keyLen, ss, n, c.unit, c.ivOffset)
					g := Geometry{SectorSize: ss, IVOffset: c.ivOffset}
					s := bindAuth(t, m, impl, vk, g)
					src := randBytes(n * ss)
					ct := make([]byte, len(src))
					tags := make([]byte, n*m.TagSize+5)
					if err := s.Seal(ct, tags, src, c.unit); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(tags[n*m.TagSize:], make([]byte, 5)) {
						t.Fatalf("%s: Seal wrote past the tags", name)
					}
					if spec == specGCM {
						if got := refOpenGCM(t, vk, ct, tags, c.unit, ss); !bytes.Equal(got, src) {
							t.Fatalf("%s: crypto/cipher opens to other plaintext", name)
						}
					} else {
						wct, wtags := refSeal(t, spec, vk, src, c.unit, c.ivOffset, ss)
						if !bytes.Equal(ct, wct) {
							t.Fatalf("%s: ciphertext differs from the reference", name)
						}
						if !bytes.Equal(tags[:n*m.TagSize], wtags) {
							t.Fatalf("%s: tags differ from the reference", name)
						}
					}
					pt := make([]byte, len(src))
					if err := s.Open(pt, ct, tags, c.unit); err != nil || !bytes.Equal(pt, src) {
						t.Fatalf("%s: Open: %v", name, err)
					}
					// In place, both ways.
					buf := bytes.Clone(src)
					tags2 := make([]byte, n*m.TagSize)
					if err := s.Seal(buf, tags2, buf, c.unit); err != nil {
						t.Fatal(err)
					}
					if spec != specGCM && (!bytes.Equal(buf, ct) || !bytes.Equal(tags2, tags[:n*m.TagSize])) {
						t.Fatalf("%s: in-place Seal differs", name)
					}
					if spec == specGCM && !bytes.Equal(refOpenGCM(t, vk, buf, tags2, c.unit, ss), src) {
						t.Fatalf("%s: in-place Seal does not open", name)
					}
					if err := s.Open(buf, buf, tags2, c.unit); err != nil || !bytes.Equal(buf, src) {
						t.Fatalf("%s: in-place Open: %v", name, err)
					}
				}
			}
		}
	}
}

func flip(b []byte, bit int) { b[bit/8] ^= 1 << (bit % 8) }

// TestAuthTamper flips single bits in every sector's ciphertext and tag
// slot (for GCM also its IV) and checks that exactly that sector fails, by
// its unit, zeroed, while the others decrypt; in place and not.
func TestAuthTamper(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		for _, ss := range []int{512, 4096} {
			const n = 4
			g := Geometry{SectorSize: ss, IVOffset: 7}
			s, err := m.NewSector(randBytes(m.DefaultCipherKeyBytes+m.MACKeyBytes), g)
			if err != nil {
				t.Fatal(err)
			}
			step := uint64(ss / 512)
			unit := 16 * step
			src := randBytes(n * ss)
			ct := make([]byte, len(src))
			tags := make([]byte, n*m.TagSize)
			if err := s.Seal(ct, tags, src, unit); err != nil {
				t.Fatal(err)
			}
			check := func(name string, bad []int, inPlace bool) {
				t.Helper()
				dst := make([]byte, len(ct))
				in := ct
				if inPlace {
					dst = bytes.Clone(ct)
					in = dst
				}
				err := s.Open(dst, in, tags, unit)
				var te *TagError
				if !errors.As(err, &te) || !errors.Is(err, ErrTag) {
					t.Fatalf("%s %d %s: Open = %v, want a TagError", spec, ss, name, err)
				}
				var want []uint64
				for _, i := range bad {
					want = append(want, unit+uint64(i)*step)
				}
				if !slices.Equal(te.Units, want) {
					t.Fatalf("%s %d %s: units %v, want %v", spec, ss, name, te.Units, want)
				}
				// Check names the same sectors and writes nothing.
				in0, tags0 := bytes.Clone(ct), bytes.Clone(tags)
				err = s.Check(ct, tags, unit)
				if te = nil; !errors.As(err, &te) || !slices.Equal(te.Units, want) {
					t.Fatalf("%s %d %s: Check = %v, want the units %v", spec, ss, name, err, want)
				}
				if !bytes.Equal(ct, in0) || !bytes.Equal(tags, tags0) {
					t.Fatalf("%s %d %s: Check changed its input", spec, ss, name)
				}
				for i := range n {
					got, w := dst[i*ss:(i+1)*ss], src[i*ss:(i+1)*ss]
					if slices.Contains(bad, i) {
						w = make([]byte, ss)
					}
					if !bytes.Equal(got, w) {
						t.Fatalf("%s %d %s: sector %d is neither its plaintext nor zeroed as it should be", spec, ss, name, i)
					}
				}
			}
			for i := range n {
				for _, bit := range []int{0, 7, ss*4 + 3, ss*8 - 1} {
					flip(ct[i*ss:], bit)
					check(fmt.Sprintf("sector %d data bit %d", i, bit), []int{i}, false)
					check(fmt.Sprintf("sector %d data bit %d, in place", i, bit), []int{i}, true)
					flip(ct[i*ss:], bit)
				}
				for bit := 0; bit < m.TagSize*8; bit += 5 {
					flip(tags[i*m.TagSize:], bit)
					check(fmt.Sprintf("sector %d tag bit %d", i, bit), []int{i}, i%2 == 0)
					flip(tags[i*m.TagSize:], bit)
				}
			}
			flip(ct, 100)
			flip(tags[(n-1)*m.TagSize:], 9)
			check("sectors 0 and 3", []int{0, n - 1}, false)
			flip(ct, 100)
			flip(tags[(n-1)*m.TagSize:], 9)

			// The tag binds the unit: the same data at other units fails
			// everywhere. The hmac modes also bind the IV offset.
			pt := make([]byte, len(ct))
			err = s.Open(pt, ct, tags, unit+step)
			if te := (*TagError)(nil); !errors.As(err, &te) || len(te.Units) != n || !bytes.Equal(pt, make([]byte, len(pt))) {
				t.Fatalf("%s %d: Open at another unit: %v", spec, ss, err)
			}
			if want := fmt.Sprintf("integrity tag mismatch in %d sectors, the first %d", n, unit+step); err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			if err := s.Open(pt, ct, tags, unit); err != nil || !bytes.Equal(pt, src) {
				t.Fatalf("%s %d: Open after restoring: %v", spec, ss, err)
			}
			if err := s.Check(ct, tags, unit); err != nil {
				t.Fatalf("%s %d: Check after restoring: %v", spec, ss, err)
			}
			if err := s.Check(ct, tags, unit+step); err == nil {
				t.Fatalf("%s %d: Check at another unit passed", spec, ss)
			}
		}
	}
}

// TestAuthIVOffset: the hmac modes authenticate the IV, so a geometry with
// another IVOffset rejects every sector, and a TagError names the unit
// before the offset.
func TestAuthIVOffset(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS} {
		m := mustAuth(t, spec)
		key := randBytes(m.DefaultCipherKeyBytes + m.MACKeyBytes)
		a, _ := m.NewSector(key, Geometry{SectorSize: 512, IVOffset: 100})
		b, _ := m.NewSector(key, Geometry{SectorSize: 512, IVOffset: 101})
		src := randBytes(2 * 512)
		ct, tags := make([]byte, len(src)), make([]byte, 2*32)
		a.Seal(ct, tags, src, 8)
		err := b.Open(make([]byte, len(ct)), ct, tags, 8)
		if te := (*TagError)(nil); !errors.As(err, &te) || !slices.Equal(te.Units, []uint64{8, 9}) {
			t.Errorf("%s: Open with another IV offset: %v", spec, err)
		}
	}
}

func TestAuthGCMIVs(t *testing.T) {
	m := mustAuth(t, specGCM)
	s, _ := m.NewSector(randBytes(32), Geometry{SectorSize: 512})
	const n = 300
	src := make([]byte, n*512)
	seen := map[string]bool{}
	var cts [][]byte
	for range 2 {
		ct, tags := make([]byte, len(src)), make([]byte, n*28)
		if err := s.Seal(ct, tags, src, 0); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			iv := string(tags[i*28+16 : (i+1)*28])
			if seen[iv] || iv == string(make([]byte, 12)) {
				t.Fatalf("IV %x repeated", iv)
			}
			seen[iv] = true
		}
		cts = append(cts, ct)
	}
	if bytes.Equal(cts[0][:512], cts[1][:512]) {
		t.Fatal("two Seals of the same sector gave the same ciphertext")
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestAuthGCMRandFailure(t *testing.T) {
	m := mustAuth(t, specGCM)
	k, _ := newAuthGCM(randBytes(32))
	boom := errors.New("no entropy")
	k.rand = failingReader{boom}
	s := &authSector{k: k, g: LUKS1, tag: m.TagSize, prefix: "test"}
	dst, tags := make([]byte, 1024), make([]byte, 56)
	if err := s.Seal(dst, tags, randBytes(1024), 0); !errors.Is(err, boom) {
		t.Fatalf("Seal with a failing random source: %v", err)
	}
	if !bytes.Equal(dst, make([]byte, 1024)) || !bytes.Equal(tags, make([]byte, 56)) {
		t.Fatal("Seal wrote output although it failed")
	}
}

func TestAuthMisusePanics(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		s, _ := m.NewSector(make([]byte, m.DefaultCipherKeyBytes+m.MACKeyBytes), LUKS1)
		buf, tags := make([]byte, 2048), make([]byte, 4*m.TagSize)
		for name, f := range map[string]func(){
			"partial sector": func() { s.Seal(buf, tags, buf[:1000], 0) },
			"short output":   func() { s.Open(buf[:512], buf[1024:], tags, 0) },
			"overlap":        func() { s.Seal(buf[16:1040], tags, buf[:1024], 0) },
			"short tags":     func() { s.Seal(buf, tags[:4*m.TagSize-1], buf, 0) },
			"short tags (open)": func() {
				s.Open(buf[:1024], buf[:1024], tags[:m.TagSize], 0)
			},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s: %s did not panic", spec, name)
					}
				}()
				f()
			}()
		}
		if err := s.Seal(nil, nil, nil, 0); err != nil {
			t.Errorf("%s: empty Seal: %v", spec, err)
		}
		if err := s.Open(nil, nil, nil, 0); err != nil {
			t.Errorf("%s: empty Open: %v", spec, err)
		}
	}
}

// TestAuthClear: Clear overwrites the HMAC states and the round keys it can
// reach, and a cleared cipher refuses to work rather than tag with a zero
// key.
func TestAuthClear(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		s, _ := m.NewSector(randBytes(m.DefaultCipherKeyBytes+m.MACKeyBytes), LUKS1)
		k := s.(*authSector).k
		var mac *hmacSHA256
		switch k := k.(type) {
		case *authESSIV:
			mac = k.mac
		case *authXTS:
			mac = k.mac
		}
		var mem []byte
		if mac != nil {
			// The states live in package secmem's memory (locked, out
			// of core dumps), which Clear wipes and returns.
			if mem = mac.mem; runtime.GOOS == "linux" && !secmem.Owns(mem) {
				t.Errorf("%s: HMAC states are not in package secmem's memory", spec)
			}
		}
		s.Clear()
		if mac != nil && (mac.inner != nil || mac.outer != nil || mac.key != nil || secmem.Owns(mem)) {
			t.Errorf("%s: HMAC states survive Clear", spec)
		}
		if g, ok := k.(*authGCM); ok && g.aead != nil {
			t.Errorf("%s: GCM key survives Clear", spec)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Seal after Clear did not panic", spec)
				}
			}()
			s.Seal(make([]byte, 512), make([]byte, m.TagSize), make([]byte, 512), 0)
		}()
	}
}

// TestAuthNoAllocsPerSector: a call allocates at most its TagError and its
// callback, whatever its length.
func TestAuthNoAllocsPerSector(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops objects at random under the race detector")
	}
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		s, _ := m.NewSector(make([]byte, m.DefaultCipherKeyBytes+m.MACKeyBytes), LUKS1)
		allocs := func(n int) (seal, open float64) {
			buf, tags := make([]byte, n*512), make([]byte, n*m.TagSize)
			seal = testing.AllocsPerRun(20, func() { s.Seal(buf, tags, buf, 0) })
			open = testing.AllocsPerRun(20, func() {
				if err := s.Open(buf, buf, tags, 0); err != nil {
					t.Fatal(err)
				}
				s.Seal(buf, tags, buf, 0)
			})
			return seal, open - seal
		}
		s1, o1 := allocs(2)
		s2, o2 := allocs(256)
		if s1 > 0.5 || s2 > 0.5 || o1 > 2.5 || o2 > 2.5 {
			t.Errorf("%s: allocations per call: Seal %.1f and %.1f, Open %.1f and %.1f for 2 and 256 sectors", spec, s1, s2, o1, o2)
		}
	}
}

// TestAuthConcurrent: one AuthSector shared by goroutines gives each the
// results it gives alone (run with -race to check the sharing itself).
func TestAuthConcurrent(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS, specGCM} {
		m := mustAuth(t, spec)
		s, _ := m.NewSector(randBytes(m.DefaultCipherKeyBytes+m.MACKeyBytes), Geometry{SectorSize: 4096})
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Go(func() {
				src := randBytes(9 * 4096)
				ct, tags := make([]byte, len(src)), make([]byte, 9*m.TagSize)
				var first []byte
				for r := range 20 {
					unit := uint64(w*1000 + 8*r)
					if err := s.Seal(ct, tags, src, unit); err != nil {
						errs <- err
						return
					}
					if r == 0 {
						first = bytes.Clone(tags)
					}
					pt := make([]byte, len(src))
					if err := s.Open(pt, ct, tags, unit); err != nil || !bytes.Equal(pt, src) {
						errs <- fmt.Errorf("worker %d round %d: %v", w, r, err)
						return
					}
				}
				if spec != specGCM {
					s.Seal(ct, tags, src, uint64(w*1000))
					if !bytes.Equal(tags, first) {
						errs <- fmt.Errorf("worker %d: tags changed between calls", w)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", spec, err)
		}
	}
}

// macImpls lists every way the hmac(sha256) modes can compute tags: each
// package asm SHA-256 implementation (the kernels and the generic code)
// and crypto/sha256 (nil), which is what machines without a kernel use.
func macImpls() []struct {
	name string
	mac  *asm.SHA256Impl
} {
	impls := []struct {
		name string
		mac  *asm.SHA256Impl
	}{{"crypto-sha256", nil}}
	for _, impl := range asm.SHA256Implementations() {
		impls = append(impls, struct {
			name string
			mac  *asm.SHA256Impl
		}{impl.Name, &impl})
	}
	return impls
}

// macKernel builds spec's kernel with the best AES code and the given MAC
// implementation.
func macKernel(spec string, mac *asm.SHA256Impl) authImpl {
	switch spec {
	case specESSIV:
		return authImpl{"mac", func(key []byte) (authKernel, error) { return newAuthESSIVMAC(key, asm.Best(), mac) }}
	case specXTS:
		return authImpl{"mac", func(key []byte) (authKernel, error) { return newAuthXTSMAC(key, asm.BestXTS(), mac) }}
	}
	panic("no hmac mode " + spec)
}

// The modes use package asm's best kernel where it has one, crypto/sha256
// otherwise (the purego build, arm64, amd64 without SHA-NI).
func TestAuthDefaultMAC(t *testing.T) {
	best := asm.BestSHA256()
	got := defaultMAC()
	switch {
	case best.Name == asm.GenericSHA256.Name && got != nil:
		t.Fatalf("defaultMAC() = %q, want crypto/sha256 (nil)", got.Name)
	case best.Name != asm.GenericSHA256.Name && (got == nil || got.Name != best.Name):
		t.Fatalf("defaultMAC() = %v, want %q", got, best.Name)
	}
	for _, spec := range []string{specESSIV, specXTS} {
		m := mustAuth(t, spec)
		s, _ := m.NewSector(randBytes(m.DefaultCipherKeyBytes+m.MACKeyBytes), LUKS1)
		var mac *hmacSHA256
		switch k := s.(*authSector).k.(type) {
		case *authESSIV:
			mac = k.mac
		case *authXTS:
			mac = k.mac
		}
		if (mac.impl == nil) != (got == nil) || mac.impl != nil && mac.impl.Name != got.Name {
			t.Errorf("%s: NewSector does not use defaultMAC()", spec)
		}
	}
}

// TestAuthMACReference is TestAuthReference for every MAC implementation:
// runs of 1, 3 and a chunk plus 3 sectors, so the multi-buffer kernels see
// counts that are not multiples of their lanes.
func TestAuthMACReference(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS} {
		m := mustAuth(t, spec)
		for _, mi := range macImpls() {
			t.Run(spec+"/"+mi.name, func(t *testing.T) { testAuthReference(t, m, macKernel(spec, mi.mac)) })
		}
	}
}

// TestAuthMACTamper: with every MAC implementation, a flipped bit in any
// sector of a run (or in its tag) fails that sector alone, whatever its
// place among the kernels' lanes.
func TestAuthMACTamper(t *testing.T) {
	for _, spec := range []string{specESSIV, specXTS} {
		m := mustAuth(t, spec)
		for _, mi := range macImpls() {
			for _, ss := range []int{512, 4096} {
				const n = 7
				s := bindAuth(t, m, macKernel(spec, mi.mac), randBytes(m.DefaultCipherKeyBytes+m.MACKeyBytes), Geometry{SectorSize: ss})
				src := randBytes(n * ss)
				ct, tags := make([]byte, len(src)), make([]byte, n*m.TagSize)
				if err := s.Seal(ct, tags, src, 64); err != nil {
					t.Fatal(err)
				}
				step := uint64(ss / 512)
				for i := range n {
					for _, where := range []string{"data", "tag"} {
						b := ct[i*ss : (i+1)*ss]
						if where == "tag" {
							b = tags[i*m.TagSize : (i+1)*m.TagSize]
						}
						bit := (i*131 + 5) % (len(b) * 8)
						flip(b, bit)
						pt := make([]byte, len(ct))
						err := s.Open(pt, ct, tags, 64)
						flip(b, bit)
						var te *TagError
						if !errors.As(err, &te) || !slices.Equal(te.Units, []uint64{64 + uint64(i)*step}) {
							t.Fatalf("%s/%s ss %d: %s bit of sector %d flipped: Open = %v", spec, mi.name, ss, where, i, err)
						}
						for j := range n {
							want := src[j*ss : (j+1)*ss]
							if j == i {
								want = make([]byte, ss)
							}
							if !bytes.Equal(pt[j*ss:(j+1)*ss], want) {
								t.Fatalf("%s/%s ss %d: sector %d wrong after tampering with sector %d", spec, mi.name, ss, j, i)
							}
						}
					}
				}
			}
		}
	}
}

// The single-message tag (the kernel vectors' path) agrees with
// crypto/hmac for every MAC implementation and shape, empty data included.
func TestAuthMACTagShapes(t *testing.T) {
	mk := randBytes(macSize)
	ref := hmac.New(sha256.New, mk)
	st := getMAC()
	defer st.put()
	for _, mi := range macImpls() {
		mac := newHMACSHA256(mk, mi.mac)
		for _, a := range []int{0, 16, 24, 63, 64, 100} {
			for _, d := range []int{0, 1, 16, 32, 40, 55, 56, 64, 80, 512} {
				aad, data := randBytes(a), randBytes(d)
				got := make([]byte, macSize)
				mac.tag(st, got, aad, data)
				ref.Reset()
				ref.Write(aad)
				ref.Write(data)
				if want := ref.Sum(nil); !bytes.Equal(got, want) {
					t.Fatalf("%s: aad %d, data %d: tag %x, want %x", mi.name, a, d, got, want)
				}
			}
		}
	}
}

// Clear also wipes the key package asm's kernels use, and they refuse it
// afterwards.
func TestAuthMACClear(t *testing.T) {
	for _, mi := range macImpls() {
		mac := newHMACSHA256(randBytes(macSize), mi.mac)
		mac.clear()
		if mac.key != nil {
			t.Errorf("%s: the asm key survives clear", mi.name)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: tagging after clear did not panic", mi.name)
				}
			}()
			st := getMAC()
			defer st.put()
			mac.sectors(st, make([]byte, 2*macSize), make([]byte, 48), make([]byte, 1024), 512)
		}()
	}
}

// tagDiffers tells equal tags from ones that differ in any one bit, or in
// all of them.
func TestTagDiffers(t *testing.T) {
	a := randBytes(macSize)
	if tagDiffers(a, bytes.Clone(a)) != 0 {
		t.Fatal("equal tags differ")
	}
	for bit := range 8 * macSize {
		b := bytes.Clone(a)
		b[bit/8] ^= 1 << (bit % 8)
		if tagDiffers(a, b) != 1 {
			t.Fatalf("tags one bit %d apart are equal", bit)
		}
	}
	b := bytes.Clone(a)
	for i := range b {
		b[i] ^= 0xff
	}
	if tagDiffers(a, b) != 1 {
		t.Fatal("complementary tags are equal")
	}
}
