package header

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"
	"math/rand/v2"
	"testing"
)

func testRand(seed string) *rand.ChaCha8 {
	var s [32]byte
	copy(s[:], seed)
	return rand.NewChaCha8(s)
}

func TestAFRoundTrip(t *testing.T) {
	t.Parallel()
	for _, hashName := range []string{"sha1", "sha256", "sha512"} {
		for _, n := range []int{16, 24, 32, 64} {
			t.Run(fmt.Sprintf("%s/%d", hashName, n), func(t *testing.T) {
				t.Parallel()
				rnd := testRand("af " + hashName)
				key := make([]byte, n)
				rnd.Read(key)
				m, err := AFSplit(key, Stripes, hashName, rnd)
				if err != nil {
					t.Fatal(err)
				}
				if len(m) != n*Stripes {
					t.Fatalf("split length %d, want %d", len(m), n*Stripes)
				}
				got, err := AFMerge(m, n, Stripes, hashName)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, key) {
					t.Fatalf("merge = %x, want %x", got, key)
				}
				// Sector padding after the stripes is ignored.
				padded := append(m, make([]byte, 512)...)
				if got, _ := AFMerge(padded, n, Stripes, hashName); !bytes.Equal(got, key) {
					t.Fatal("merge of padded material differs")
				}
				// Every stripe matters: damaging the first one changes the key.
				m[0] ^= 1
				if got, _ := AFMerge(m, n, Stripes, hashName); bytes.Equal(got, key) {
					t.Fatal("merge ignored a damaged first stripe")
				}
				// Different randomness, different material, same key.
				m2, _ := AFSplit(key, Stripes, hashName, testRand("other"))
				if bytes.Equal(m2[:n], m[:n]) {
					t.Fatal("split did not use the random source")
				}
			})
		}
	}
}

// refDiffuse is the diffusion written straight from the specification's
// pseudo-code: whole digest-sized blocks hashed with their big-endian index,
// then the tail hashed the same way and truncated.
func refDiffuse(newHash func() hash.Hash, in []byte) []byte {
	ds := newHash().Size()
	var out []byte
	i := 0
	for ; (i+1)*ds <= len(in); i++ {
		h := newHash()
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
		h.Write(in[i*ds : (i+1)*ds])
		out = h.Sum(out)
	}
	if tail := in[i*ds:]; len(tail) > 0 {
		h := newHash()
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(i)))
		h.Write(tail)
		out = append(out, h.Sum(nil)[:len(tail)]...)
	}
	return out
}

// TestAFTwoStripes checks the construction by hand with two stripes, where
// the material is s0 || diffuse(s0) XOR key, for keys that are and are not a
// multiple of the digest size (sha1 and sha512 with 32 bytes have a tail).
func TestAFTwoStripes(t *testing.T) {
	t.Parallel()
	hashes := map[string]func() hash.Hash{"sha1": sha1.New, "sha256": sha256.New, "sha512": sha512.New}
	for name, newHash := range hashes {
		for _, n := range []int{16, 20, 32, 50, 64} {
			key := bytes.Repeat([]byte{0x5a}, n)
			m, err := AFSplit(key, 2, name, testRand("two"))
			if err != nil {
				t.Fatal(err)
			}
			s0 := m[:n]
			d := refDiffuse(newHash, s0)
			want := make([]byte, n)
			for i := range want {
				want[i] = d[i] ^ key[i]
			}
			if !bytes.Equal(m[n:], want) {
				t.Errorf("%s/%d: second stripe %x, want %x", name, n, m[n:], want)
			}
		}
	}
}

// TestDiffuseKnownAnswer pins diffuse against fixed digests: SHA-1 over a
// 32-byte buffer of zeros gives SHA-1(00000000 || 0^20) followed by the first
// 12 bytes of SHA-1(00000001 || 0^12).
func TestDiffuseKnownAnswer(t *testing.T) {
	buf := make([]byte, 32)
	diffuse(sha1.New(), buf, make([]byte, 24))
	b0 := sha1.Sum(append([]byte{0, 0, 0, 0}, make([]byte, 20)...))
	b1 := sha1.Sum(append([]byte{0, 0, 0, 1}, make([]byte, 12)...))
	want := append(b0[:], b1[:12]...)
	if !bytes.Equal(buf, want) {
		t.Fatalf("diffuse = %x, want %x", buf, want)
	}
}

func TestAFErrors(t *testing.T) {
	if _, err := AFSplit(nil, Stripes, "sha256", nil); err == nil {
		t.Error("split of an empty key succeeded")
	}
	if _, err := AFSplit(make([]byte, 16), 0, "sha256", nil); err == nil {
		t.Error("split into 0 stripes succeeded")
	}
	if _, err := AFSplit(make([]byte, 16), Stripes, "md5", nil); err == nil {
		t.Error("split with md5 succeeded")
	}
	if _, err := AFMerge(make([]byte, 100), 16, Stripes, "sha256"); err == nil {
		t.Error("merge of short material succeeded")
	}
	if _, err := AFMerge(make([]byte, 16*Stripes), 16, Stripes, "whirlpool"); err == nil {
		t.Error("merge with an unknown hash succeeded")
	}
}

// BenchmarkAFMerge measures the AF merge of one key slot (4000 stripes), the
// part of an unlock besides PBKDF2.
func BenchmarkAFMerge(b *testing.B) {
	for _, hashName := range []string{"sha1", "sha256", "sha512"} {
		b.Run(hashName, func(b *testing.B) {
			key := make([]byte, 32)
			m, err := AFSplit(key, Stripes, hashName, testRand("bench"))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(m)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := AFMerge(m, 32, Stripes, hashName); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
