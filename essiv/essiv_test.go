package essiv

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/cryptimg/cryptimg/asm"
	"github.com/cryptimg/cryptimg/vectors"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// forEachImpl runs f once per kernel this CPU has, not just the one that
// dispatch picks.
func forEachImpl(t *testing.T, f func(t *testing.T, impl asm.Impl)) {
	for _, impl := range asm.Implementations() {
		t.Run(impl.Name, func(t *testing.T) { f(t, impl) })
	}
}

func TestKernelVectors(t *testing.T) {
	data, err := vectors.ReadFile("essiv/essiv-cbc-aes-sha256.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Index int    `json:"index"`
		Key   string `json:"key"`
		IV    string `json:"iv"`
		PText string `json:"ptext"`
		CText string `json:"ctext"`
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) != 5 {
		t.Fatalf("got %d kernel vectors, want 5", len(vs))
	}
	forEachImpl(t, func(t *testing.T, impl asm.Impl) {
		for _, v := range vs {
			key, iv, pt, ct := unhex(t, v.Key), unhex(t, v.IV), unhex(t, v.PText), unhex(t, v.CText)
			if !bytes.Equal(iv[8:], make([]byte, 8)) {
				t.Fatalf("vector %d: iv is not a zero-padded sector number", v.Index)
			}
			sector := binary.LittleEndian.Uint64(iv)
			c, err := newCipher(key, impl)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(pt))
			c.Encrypt(got, pt, sector)
			if !bytes.Equal(got, ct) {
				t.Errorf("vector %d: encrypt = %x, want %x", v.Index, got, ct)
			}
			c.Decrypt(got, got, sector)
			if !bytes.Equal(got, pt) {
				t.Errorf("vector %d: in-place decrypt = %x, want %x", v.Index, got, pt)
			}
		}
	})
}

func TestCryptsetupStorageVectors(t *testing.T) {
	data, err := vectors.ReadFile("essiv/cryptsetup-essiv-sha256-storage.json")
	if err != nil {
		t.Fatal(err)
	}
	var vs []struct {
		Key        string `json:"key"`
		IVOffset   uint64 `json:"iv_offset"`
		DataLength int    `json:"data_length"`
		Out        []struct {
			SectorSize int    `json:"sector_size"`
			LargeIV    bool   `json:"large_iv"`
			OutSHA256  string `json:"out_sha256"`
		} `json:"out"`
	}
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	checked := 0
	forEachImpl(t, func(t *testing.T, impl asm.Impl) {
		for _, v := range vs {
			c, err := newCipher(unhex(t, v.Key), impl)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range v.Out {
				if o.LargeIV {
					continue // LUKS never uses iv_large_sectors
				}
				buf := make([]byte, v.DataLength)
				c.EncryptSectors(buf, buf, v.IVOffset, o.SectorSize)
				sum := sha256.Sum256(buf)
				if got := hex.EncodeToString(sum[:]); got != o.OutSHA256 {
					t.Errorf("sector size %d: sha256 = %s, want %s", o.SectorSize, got, o.OutSHA256)
				}
				c.DecryptSectors(buf, buf, v.IVOffset, o.SectorSize)
				if !bytes.Equal(buf, make([]byte, v.DataLength)) {
					t.Errorf("sector size %d: decrypt did not restore zeros", o.SectorSize)
				}
				checked++
			}
		}
	})
	if checked == 0 {
		t.Fatal("no cryptsetup vector checked")
	}
}

// referenceEncrypt is ESSIV-CBC built from crypto/cipher alone.
func referenceEncrypt(key, src []byte, first uint64, sectorSize int) []byte {
	b, _ := aes.NewCipher(key)
	salt := sha256.Sum256(key)
	ivc, _ := aes.NewCipher(salt[:])
	out := make([]byte, len(src))
	for i := 0; i*sectorSize < len(src); i++ {
		var iv [16]byte
		binary.LittleEndian.PutUint64(iv[:], first+uint64(i*sectorSize/512))
		ivc.Encrypt(iv[:], iv[:])
		s := src[i*sectorSize : (i+1)*sectorSize]
		cipher.NewCBCEncrypter(b, iv[:]).CryptBlocks(out[i*sectorSize:], s)
	}
	return out
}

func TestDifferential(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl asm.Impl) {
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			rand.Read(key)
			c, err := newCipher(key, impl)
			if err != nil {
				t.Fatal(err)
			}
			for _, ss := range []int{512, 4096} {
				for n := 1; n <= 64; n++ {
					if ss == 4096 && n > 20 && n%7 != 0 {
						continue
					}
					name := fmt.Sprintf("key%d/ss%d/n%d", keyLen*8, ss, n)
					// Unaligned source and destination, separate buffers.
					raw := make([]byte, n*ss+3)
					src := raw[3:]
					rand.Read(src)
					first := uint64(n)*0x1_0000_0001 + 7
					want := referenceEncrypt(key, src, first, ss)
					dst := make([]byte, n*ss+1)[1:]
					c.EncryptSectors(dst, src, first, ss)
					if !bytes.Equal(dst, want) {
						t.Fatalf("%s: EncryptSectors differs from crypto/cipher", name)
					}
					back := make([]byte, len(dst))
					c.DecryptSectors(back, dst, first, ss)
					if !bytes.Equal(back, src) {
						t.Fatalf("%s: DecryptSectors did not invert", name)
					}
					// In place.
					inplace := append([]byte(nil), src...)
					c.EncryptSectors(inplace, inplace, first, ss)
					if !bytes.Equal(inplace, want) {
						t.Fatalf("%s: in-place EncryptSectors differs", name)
					}
					c.DecryptSectors(inplace, inplace, first, ss)
					if !bytes.Equal(inplace, src) {
						t.Fatalf("%s: in-place DecryptSectors did not invert", name)
					}
				}
			}
		}
	})
}

func TestSingleSectorMatchesBatch(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	c, err := NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 4*512)
	rand.Read(src)
	batch := make([]byte, len(src))
	c.EncryptSectors(batch, src, 100, 512)
	for i := 0; i < 4; i++ {
		one := make([]byte, 512)
		c.Encrypt(one, src[i*512:(i+1)*512], uint64(100+i))
		if !bytes.Equal(one, batch[i*512:(i+1)*512]) {
			t.Fatalf("sector %d: Encrypt differs from EncryptSectors", i)
		}
	}
}

func TestNewCipherKeySizes(t *testing.T) {
	for _, n := range []int{0, 8, 15, 17, 31, 33, 64} {
		c, err := NewCipher(make([]byte, n))
		if err == nil || c != nil {
			t.Errorf("NewCipher(%d bytes) = %v, %v; want nil, error", n, c, err)
		}
	}
}

func TestMisusePanics(t *testing.T) {
	c, _ := NewCipher(make([]byte, 32))
	buf := make([]byte, 1024)
	cases := map[string]func(){
		"partial block":   func() { c.Encrypt(buf[:20], buf[:20], 0) },
		"empty sector":    func() { c.Encrypt(buf[:0], buf[:0], 0) },
		"short output":    func() { c.Encrypt(buf[:16], buf[:32], 0) },
		"overlap":         func() { c.Encrypt(buf[16:48], buf[:32], 0) },
		"bad sector size": func() { c.EncryptSectors(buf, buf, 0, 256) },
		"partial sector":  func() { c.DecryptSectors(buf[:1000], buf[:1000], 0, 512) },
		"batch overlap":   func() { c.EncryptSectors(buf[256:], buf[:512], 0, 512) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func TestZeroAllocs(t *testing.T) {
	c, _ := NewCipher(make([]byte, 32))
	buf := make([]byte, 16*4096)
	for _, ss := range []int{512, 4096} {
		if n := testing.AllocsPerRun(20, func() { c.EncryptSectors(buf, buf, 9, ss) }); n != 0 {
			t.Errorf("EncryptSectors(%d) allocates %v times", ss, n)
		}
		if n := testing.AllocsPerRun(20, func() { c.DecryptSectors(buf, buf, 9, ss) }); n != 0 {
			t.Errorf("DecryptSectors(%d) allocates %v times", ss, n)
		}
	}
}
