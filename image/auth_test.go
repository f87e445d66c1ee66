package image

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/image/integrity"
)

// authImage encrypts plain into an authenticated raw image in memory.
func authImage(t testing.TB, rng *rand.Rand, plain []byte, spec, integ string, ss int, pass []byte) []byte {
	t.Helper()
	dir, err := os.MkdirTemp("", "cryptimg-auth-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	in := filepath.Join(dir, "plain")
	if err := os.WriteFile(in, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(dir, "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	p := testParams(rng)
	p.Version, p.PBKDF, p.Cipher, p.Integrity, p.SectorSize, p.KeyBytes = 2, "pbkdf2", spec, integ, ss, 0
	if _, err := EncryptRaw(context.Background(), dst, src, EncryptOptions{Header: p, Passphrase: pass}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// authOpen opens an authenticated image held in memory (through a
// temporary file) and unlocks it.
func authOpen(t testing.TB, img, pass []byte) (*Encrypted, *Key, func()) {
	t.Helper()
	f, err := os.CreateTemp("", "cryptimg-auth-")
	if err != nil {
		t.Fatal(err)
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	if _, err := f.Write(img); err != nil {
		cleanup()
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		cleanup()
		t.Fatal(err)
	}
	k, err := e.Unlock(pass, -1)
	if err != nil {
		cleanup()
		t.Fatal(err)
	}
	return e, k, func() { k.Clear(); cleanup() }
}

// authPlain verifies every tag of an authenticated image and returns its
// plaintext and header.
func authPlain(t testing.TB, img, pass []byte) ([]byte, header.Header) {
	t.Helper()
	e, k, done := authOpen(t, img, pass)
	defer done()
	r, err := e.Verify(context.Background(), k, Pipeline{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Corrupt != nil {
		t.Fatalf("verify: %v", r.Corrupt)
	}
	v, err := e.View(e.c.file().(*os.File), k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := make([]byte, v.Size())
	if _, err := v.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	return got, e.Header
}

// authCrashCases reencrypt authenticated images under power loss: after
// every crash and resume, every tag verifies under the new key and the
// plaintext is the old one.
func authCrashCases() []crashCase {
	var cases []crashCase
	for _, m := range []struct {
		name, spec, integ, to string
		ss                    int
		atom                  int64
	}{
		{"reencrypt-integrity-essiv-512", "aes-cbc-essiv:sha256", "hmac(sha256)", "", 512, 512},
		{"reencrypt-integrity-gcm-4096", "aes-gcm-random", "aead", "", 4096, 4096},
		{"reencrypt-integrity-essiv-to-xts-4096", "aes-cbc-essiv:sha256", "hmac(sha256)", "aes-xts-plain64", 4096, 4096},
	} {
		cases = append(cases, crashCase{
			name: m.name, atom: m.atom, points: 100,
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return authImage(&testing.T{}, rng, plain, m.spec, m.integ, m.ss, rePass), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := Reencrypt(ctx, img, js, ReencryptOptions{Passphrases: [][]byte{rePass}, Cipher: m.to,
					PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, before []byte) {
				got, h := authPlain(t, img, rePass)
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
				old, _ := header.Read(bytes.NewReader(before), 0, int64(len(before)))
				vk, _, _ := old.Unlock(bytes.NewReader(before), 0, rePass, -1)
				want := m.spec
				if m.to != "" {
					want = m.to
				}
				if h.VerifyVolumeKey(vk) || h.Info().Integrity != m.integ || h.Info().Cipher != want || len(img) != len(before) {
					t.Fatalf("new header %+v (the key must change, the integrity stay)", h.Info())
				}
				// Outside the data areas and the tag runs nothing moved:
				// the superblock and journal are as they were.
				off := int64(16 << 20)
				if !bytes.Equal(img[off:off+8<<10], before[off:off+8<<10]) {
					t.Fatal("the integrity superblock or journal changed")
				}
			},
		})
	}
	return cases
}

// TestAuthReencryptRefusesCorrupt: a sector that fails its tag stops the
// reencryption with the sector's number; nothing before it is lost, and
// once the sector is put back the run completes.
func TestAuthReencryptRefusesCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	plain := testPlain(rng, faultImage)
	img0 := authImage(t, rng, plain, "aes-xts-plain64", "hmac(sha256)", 4096, rePass)
	e, _, done := authOpen(t, img0, rePass)
	off := e.c.tagLayout().DataOffset(4000)
	done()
	bad := bytes.Clone(img0)
	bad[off+9] ^= 1
	d := newFaultDisk(1)
	f := d.add("img", bad)
	js := faultJournal{d, "img.journal"}
	_, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{rePass}, PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts()})
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Sectors[0] != 4000 {
		t.Fatalf("reencrypt of a corrupt image: %v, want a CorruptError at sector 4000", err)
	}
	f.cur[off+9] ^= 1
	if _, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{rePass}, PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts()}); err != nil {
		t.Fatal(err)
	}
	if got, _ := authPlain(t, f.cur, rePass); !bytes.Equal(got, plain) {
		t.Fatal("plaintext changed")
	}
}

// TestAuthReencryptRefusesLayoutChange: a new mode with another tag size
// would move every tag, so it is refused before anything is written.
func TestAuthReencryptRefusesLayoutChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	plain := testPlain(rng, 1<<20)
	img0 := authImage(t, rng, plain, "aes-xts-plain64", "hmac(sha256)", 4096, rePass)
	d := newFaultDisk(1)
	f := d.add("img", img0)
	js := faultJournal{d, "img.journal"}
	_, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{rePass}, Cipher: "aes-gcm-random", PBKDF: "pbkdf2", ForceIterations: 1000})
	if err == nil || !bytes.Equal(f.cur, img0) {
		t.Fatalf("reencrypt to another tag size: %v, image changed %v", err, !bytes.Equal(f.cur, img0))
	}
	if _, ok := d.files[js.name]; ok {
		t.Fatal("a journal was left")
	}
}

// TestAuthReseal: Reseal with the tags of a Seal gives back the same
// ciphertext and tags, for every mode.
func TestAuthReseal(t *testing.T) {
	for _, n := range cipher.SupportedAuth() {
		t.Run(n, func(t *testing.T) {
			var m *cipher.AuthMode
			for _, spec := range []string{"aes-cbc-essiv:sha256", "aes-xts-plain64", "aes-gcm-random"} {
				for _, it := range []string{"hmac(sha256)", "aead"} {
					if x, err := cipher.ParseAuth(spec, it); err == nil && x.Name() == n {
						m = x
					}
				}
			}
			key := make([]byte, m.DefaultCipherKeyBytes+m.MACKeyBytes)
			c, err := m.NewSector(key, cipher.Geometry{SectorSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			src := bytes.Repeat([]byte{7}, 4*4096)
			ct, tags := make([]byte, len(src)), make([]byte, 4*m.TagSize)
			if err := c.Seal(ct, tags, src, 80); err != nil {
				t.Fatal(err)
			}
			ct2, tags2 := make([]byte, len(src)), bytes.Clone(tags)
			if err := c.Reseal(ct2, tags2, src, 80); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ct, ct2) || !bytes.Equal(tags, tags2) {
				t.Fatal("Reseal differs from the Seal it repeats")
			}
		})
	}
}

// tagWrites records the writes made to it.
type tagWrites struct {
	mu  sync.Mutex
	buf []byte
	n   int
}

func (w *tagWrites) WriteAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	copy(w.buf[off:], p)
	w.n++
	return len(p), nil
}

// TestSealTags: the tags of chunks sealed in any order and from several
// goroutines land where the integrity geometry says, equal to one Seal of
// each whole area, in one write per area.
func TestSealTags(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		m, err := cipher.ParseAuth("aes-cbc-essiv:sha256", "hmac(sha256)")
		if err != nil {
			t.Fatal(err)
		}
		key := bytes.Repeat([]byte{7}, m.KeyBytes()[0])
		a, err := m.NewSector(key, cipher.Geometry{SectorSize: ss})
		if err != nil {
			t.Fatal(err)
		}
		// Two full areas and a short third.
		g, err := integrity.New(2<<15+16384, 0, a.TagSize(), ss)
		if err != nil {
			t.Fatal(err)
		}
		if g.NumAreas() != 3 || g.Area(2).Sectors >= g.Area(0).Sectors {
			t.Fatalf("%d areas", g.NumAreas())
		}
		rng := rand.New(rand.NewPCG(uint64(ss), 3))
		plain := make([]byte, g.DataSectors()*512)
		for i := range plain {
			plain[i] = byte(rng.Uint32())
		}
		w := &tagWrites{buf: make([]byte, g.End())}
		seal := sealTransform(w, g, a)
		type job struct{ n, off, len uint64 }
		var jobs []job
		const chunk = 64 << 10
		for ar := range g.Areas() {
			for off := uint64(0); off < uint64(ar.DataLen); off += chunk {
				jobs = append(jobs, job{ar.FirstSector + off/512, ar.FirstSector*512 + off, min(chunk, uint64(ar.DataLen)-off)})
			}
		}
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		var wg sync.WaitGroup
		ch := make(chan job)
		for range 3 {
			wg.Go(func() {
				for j := range ch {
					b := bytes.Clone(plain[j.off : j.off+j.len])
					if err := seal(b, b, j.n); err != nil {
						t.Error(err)
					}
				}
			})
		}
		for _, j := range jobs {
			ch <- j
		}
		close(ch)
		wg.Wait()
		if w.n != 3 {
			t.Errorf("%d-byte sectors: %d tag writes, want one per area (3)", ss, w.n)
		}
		for ar := range g.Areas() {
			data := bytes.Clone(plain[ar.FirstSector*512 : ar.FirstSector*512+uint64(ar.DataLen)])
			tags := make([]byte, ar.TagLen)
			if err := a.Seal(data, tags, data, ar.FirstSector); err != nil {
				t.Fatal(err)
			}
			if got := w.buf[ar.TagOffset : ar.TagOffset+ar.TagLen]; !bytes.Equal(got, tags) {
				t.Errorf("%d-byte sectors, area %d: the tags differ from one Seal of the area", ss, ar.Index)
			}
		}
	}
}
