package cipher

import (
	"bytes"
	"crypto/aes"
	gocipher "crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/asm"
	"github.com/cryptimg/cryptimg/essiv"
	"github.com/cryptimg/cryptimg/vectors"
	"golang.org/x/crypto/xts"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustSector(t *testing.T, spec string, key []byte, g Geometry) Sector {
	t.Helper()
	m, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewSector(key, g)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRegistry(t *testing.T) {
	want := "aes-cbc-essiv:sha256 aes-cbc-plain aes-cbc-plain64 aes-xts-plain aes-xts-plain64"
	if got := strings.Join(Supported(), " "); got != want {
		t.Fatalf("Supported() = %s, want %s", got, want)
	}
	_, err := Parse("twofish-xts-plain64")
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "aes-xts-plain64)") {
		t.Fatalf("Parse of an unknown spec: %v", err)
	}
	if _, err := Lookup("aes", "xts-plain64"); err != nil {
		t.Fatal(err)
	}
	if _, err := Lookup("AES", "xts-plain64"); err == nil {
		t.Fatal("cipher names are matched exactly, as the kernel does")
	}
	for _, c := range []struct {
		spec string
		good []int
		bad  []int
		def  int
	}{
		{"aes-xts-plain64", []int{32, 48, 64}, []int{16, 24, 0, 128}, 64},
		{"aes-xts-plain", []int{32, 48, 64}, []int{16}, 64},
		{"aes-cbc-plain64", []int{16, 24, 32}, []int{64, 8}, 32},
		{"aes-cbc-plain", []int{16, 24, 32}, []int{48}, 32},
		{"aes-cbc-essiv:sha256", []int{16, 24, 32}, []int{64}, 32},
	} {
		m, _ := Parse(c.spec)
		if m.DefaultKeyBytes != c.def {
			t.Errorf("%s: default key %d bytes", c.spec, m.DefaultKeyBytes)
		}
		for _, n := range c.good {
			if _, err := m.NewSector(make([]byte, n), LUKS1); err != nil {
				t.Errorf("%s with %d bytes: %v", c.spec, n, err)
			}
		}
		for _, n := range c.bad {
			var ke *KeySizeError
			if _, err := m.NewSector(make([]byte, n), LUKS1); !errors.As(err, &ke) {
				t.Errorf("%s with %d bytes: %v, want a KeySizeError", c.spec, n, err)
			}
		}
	}
}

// TestXTSVectors: IEEE Std 1619-2007 Annex B, vectors 1 to 3 (XTS-AES-128,
// one 32-byte data unit); the data unit sequence number is the sector.
func TestXTSVectors(t *testing.T) {
	for i, v := range []struct {
		key    string
		sector uint64
		pt, ct string
	}{
		{"00000000000000000000000000000000" + "00000000000000000000000000000000", 0,
			"0000000000000000000000000000000000000000000000000000000000000000",
			"917cf69ebd68b2ec9b9fe9a3eadda692cd43d2f59598ed858c02c2652fbf922e"},
		{"11111111111111111111111111111111" + "22222222222222222222222222222222", 0x3333333333,
			"4444444444444444444444444444444444444444444444444444444444444444",
			"c454185e6a16936e39334038acef838bfb186fff7480adc4289382ecd6d394f0"},
		{"fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0" + "22222222222222222222222222222222", 0x3333333333,
			"4444444444444444444444444444444444444444444444444444444444444444",
			"af85336b597afc1a900b2eb21ec949d292df4c047e0b21532186a5971a227a89"},
	} {
		// The vectors' data units are 32 bytes; the kernels take whole
		// LUKS sectors, so the generic code checks them.
		c, err := newXTS(unhex(t, v.key), ^uint64(0), asm.GenericXTS)
		if err != nil {
			t.Fatal(err)
		}
		pt, ct := unhex(t, v.pt), unhex(t, v.ct)
		got := make([]byte, len(pt))
		asm.GenericXTS.Encrypt(c.k, c.tk, got, pt, v.sector, ^uint64(0), len(pt))
		if !bytes.Equal(got, ct) {
			t.Errorf("vector %d: got %x, want %x", i+1, got, ct)
		}
	}
}

// TestXTSSectors: a batch of sectors equals x/crypto/xts sector by sector,
// with the IV stepping sectorSize/512, and plain keeps only 32 bits.
func TestXTSSectors(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	ref, _ := xts.NewCipher(aes.NewCipher, key)
	for _, ss := range []int{512, 4096} {
		src := make([]byte, 4*ss)
		rand.Read(src)
		first := uint64(1<<32 - 9)
		for _, spec := range []string{"aes-xts-plain64", "aes-xts-plain"} {
			c := mustSector(t, spec, key, Geometry{SectorSize: ss})
			got := make([]byte, len(src))
			c.EncryptSectors(got, src, first)
			for i := 0; i < 4; i++ {
				iv := first + uint64(i*ss/512)
				if spec == "aes-xts-plain" {
					iv &= 1<<32 - 1
				}
				want := make([]byte, ss)
				ref.Encrypt(want, src[i*ss:(i+1)*ss], iv)
				if !bytes.Equal(got[i*ss:(i+1)*ss], want) {
					t.Fatalf("%s, %d-byte sectors: sector %d differs", spec, ss, i)
				}
			}
			back := make([]byte, len(src))
			c.DecryptSectors(back, got, first)
			if !bytes.Equal(back, src) {
				t.Fatalf("%s: decrypt does not invert encrypt", spec)
			}
			c.EncryptSectors(got, got, first) // in place
		}
	}
}

// TestCBCPlain: sector i is AES-CBC with the IV le64(i) (plain64) or
// le32(i mod 2^32) (plain) padded with zeros, as dm-crypt's IV generators.
func TestCBCPlain(t *testing.T) {
	key := make([]byte, 24)
	rand.Read(key)
	b, _ := aes.NewCipher(key)
	for _, ss := range []int{512, 4096} {
		src := make([]byte, 3*ss)
		rand.Read(src)
		first := uint64(1<<32 - 1)
		for _, spec := range []string{"aes-cbc-plain64", "aes-cbc-plain"} {
			c := mustSector(t, spec, key, Geometry{SectorSize: ss})
			got := make([]byte, len(src))
			c.EncryptSectors(got, src, first)
			for i := 0; i < 3; i++ {
				n := first + uint64(i*ss/512)
				if spec == "aes-cbc-plain" {
					n &= 1<<32 - 1
				}
				iv := make([]byte, 16)
				binary.LittleEndian.PutUint64(iv, n)
				want := make([]byte, ss)
				gocipher.NewCBCEncrypter(b, iv).CryptBlocks(want, src[i*ss:(i+1)*ss])
				if !bytes.Equal(got[i*ss:(i+1)*ss], want) {
					t.Fatalf("%s, %d-byte sectors: sector %d differs", spec, ss, i)
				}
			}
			back := make([]byte, len(src))
			c.DecryptSectors(back, got, first)
			if !bytes.Equal(back, src) {
				t.Fatalf("%s: decrypt does not invert encrypt", spec)
			}
		}
	}
}

// The registry's ESSIV is package essiv's.
func TestESSIV(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	src := make([]byte, 8192)
	rand.Read(src)
	e, _ := essiv.NewCipher(key)
	want := make([]byte, len(src))
	e.EncryptSectors(want, src, 77, 512)
	got := make([]byte, len(src))
	mustSector(t, "aes-cbc-essiv:sha256", key, LUKS1).EncryptSectors(got, src, 77)
	if !bytes.Equal(got, want) {
		t.Fatal("registry essiv differs from package essiv")
	}
}

func TestMisusePanics(t *testing.T) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-plain64"} {
		m, _ := Parse(spec)
		c, _ := m.NewSector(make([]byte, m.DefaultKeyBytes), LUKS1)
		buf := make([]byte, 2048)
		for name, f := range map[string]func(){
			"partial sector": func() { c.EncryptSectors(buf, buf[:1000], 0) },
			"short output":   func() { c.DecryptSectors(buf[:512], buf[1024:], 0) },
			"overlap":        func() { c.EncryptSectors(buf[16:1040], buf[:1024], 0) },
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
	}
}

func TestNoAllocsPerSector(t *testing.T) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-plain64", "aes-cbc-essiv:sha256"} {
		c := mustSector(t, spec, make([]byte, 32), LUKS1)
		buf := make([]byte, 64<<10)
		n := testing.AllocsPerRun(20, func() { c.EncryptSectors(buf, buf, 0) })
		if n > 2 {
			t.Errorf("%s: %.0f allocations for 128 sectors", spec, n)
		}
	}
}

// TestCryptsetupStorageVectors: cryptsetup's own vectors for cbc-plain and
// cbc-plain64 (vectors/cipher), which start 8 sectors below 2^32 so that
// plain wraps and plain64 does not, and for essiv:sha256, which cover every
// sector size with and without large_iv, all through the registry.
func TestCryptsetupStorageVectors(t *testing.T) {
	type vector struct {
		IVName     string `json:"iv_name"`
		Key        string `json:"key"`
		IVOffset   uint64 `json:"iv_offset"`
		DataLength int    `json:"data_length"`
		Out        []struct {
			SectorSize int    `json:"sector_size"`
			LargeIV    bool   `json:"large_iv"`
			OutSHA256  string `json:"out_sha256"`
		} `json:"out"`
	}
	var vs []vector
	for _, name := range []string{"cipher/cryptsetup-plain-storage.json", "essiv/cryptsetup-essiv-sha256-storage.json"} {
		raw, err := vectors.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var v []vector
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v...)
	}
	n, large := 0, 0
	for _, v := range vs {
		for _, o := range v.Out {
			g := Geometry{SectorSize: o.SectorSize, LargeIV: o.LargeIV}
			c := mustSector(t, "aes-cbc-"+v.IVName, unhex(t, v.Key), g)
			buf := make([]byte, v.DataLength)
			if err := c.EncryptSectors(buf, buf, v.IVOffset); err != nil {
				t.Fatal(err)
			}
			if got := sha256.Sum256(buf); hex.EncodeToString(got[:]) != o.OutSHA256 {
				t.Errorf("cbc-%s, %+v: sha256 %x, want %s", v.IVName, g, got, o.OutSHA256)
			}
			c.DecryptSectors(buf, buf, v.IVOffset)
			if !bytes.Equal(buf, make([]byte, v.DataLength)) {
				t.Errorf("cbc-%s, %+v: decrypt does not give zeros back", v.IVName, g)
			}
			n++
			if o.LargeIV {
				large++
			}
		}
	}
	if n != 15 || large != 3 {
		t.Fatalf("%d vectors checked, %d with large_iv; want 15 and 3", n, large)
	}
}

func TestGeometry(t *testing.T) {
	m, _ := Parse("aes-xts-plain64")
	for _, ss := range []int{0, 256, 1000, 8192} {
		if _, err := m.NewSector(make([]byte, 64), Geometry{SectorSize: ss}); err == nil || !strings.Contains(err.Error(), "sector size") {
			t.Errorf("sector size %d: %v", ss, err)
		}
	}
	g := Geometry{SectorSize: 2048, LargeIV: true}
	c, err := m.NewSector(make([]byte, 64), g)
	if err != nil || c.Geometry() != g {
		t.Fatalf("Geometry() = %+v, %v", c.Geometry(), err)
	}
}

// TestLargeIV checks XTS with large_iv sector by sector against
// x/crypto/xts, where sector i of a run starting at unit u has the tweak
// u/(ss/512) + i. (ESSIV's large_iv is in cryptsetup's storage vectors.)
func TestLargeIV(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	ref, _ := xts.NewCipher(aes.NewCipher, key)
	for _, ss := range []int{512, 1024, 4096} {
		c := mustSector(t, "aes-xts-plain64", key, Geometry{SectorSize: ss, LargeIV: true})
		src := make([]byte, 5*ss)
		rand.Read(src)
		unit := uint64(40)
		got := make([]byte, len(src))
		c.EncryptSectors(got, src, unit)
		for i := range 5 {
			want := make([]byte, ss)
			ref.Encrypt(want, src[i*ss:(i+1)*ss], unit/uint64(ss/512)+uint64(i))
			if !bytes.Equal(got[i*ss:(i+1)*ss], want) {
				t.Fatalf("%d-byte sectors: sector %d differs", ss, i)
			}
		}
		back := make([]byte, len(src))
		c.DecryptSectors(back, got, unit)
		if !bytes.Equal(back, src) {
			t.Fatalf("%d-byte sectors: decrypt does not invert encrypt", ss)
		}
	}
}
