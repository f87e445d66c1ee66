package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cryptimg/cryptimg/header"
)

var rePass = []byte("correct horse")

// testPlain returns size bytes of random data with some all-zero runs.
func testPlain(rng *rand.Rand, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	for i := 0; i < 4; i++ {
		off := rng.IntN(size/512) * 512
		clear(b[off:min(size, off+64<<10)])
	}
	return b
}

func testParams(rng *rand.Rand) header.Params {
	var seed [32]byte
	for i := range seed {
		seed[i] = byte(rng.Uint32())
	}
	return header.Params{ForceIterations: 1000, Rand: rand.NewChaCha8(seed)}
}

// testLUKS encrypts plain into a raw LUKS1 image in memory.
func testLUKS(t testing.TB, rng *rand.Rand, plain []byte, keyBytes int, passes ...[]byte) []byte {
	t.Helper()
	p := testParams(rng)
	p.KeyBytes = keyBytes
	f, vk, area, err := header.Format(passes[0], p)
	if err != nil {
		t.Fatal(err)
	}
	h := f.(*header.LUKS1)
	for i, pass := range passes[1:] {
		m, err := h.SetKeySlot(i+1, pass, vk, 1000, nil)
		if err != nil {
			t.Fatal(err)
		}
		copy(area[int(h.Slots[i+1].KeyMaterialOffset)*512:], m)
	}
	copy(area, h.Marshal())
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(area)+len(plain))
	copy(out, area)
	c.EncryptSectors(out[len(area):], plain, 0)
	return out
}

// testLUKS2 encrypts plain into a raw LUKS2 image in memory: aes-xts-plain64
// with ss-byte sectors, label "crash", passes in keyslots 0, 1, ..., and a
// keyring token bound to keyslot 1 if there is one.
func testLUKS2(t testing.TB, rng *rand.Rand, plain []byte, ss int, passes ...[]byte) []byte {
	t.Helper()
	p := testParams(rng)
	p.Version, p.PBKDF, p.SectorSize, p.Cipher, p.Label = 2, "pbkdf2", ss, "aes-xts-plain64", "crash"
	h, vk, area, err := header.Format(passes[0], p)
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, len(area)+len(plain))
	copy(img, area)
	apply := func(u *header.Update, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range u.Writes {
			copy(img[w.Offset:], w.Data)
		}
		h = u.Header
	}
	for i, pass := range passes[1:] {
		apply(h.AddSlot(i+1, pass, vk, header.KDF{Type: "pbkdf2", Iterations: 1000}, p.Rand))
	}
	if len(passes) > 1 {
		u, _, err := h.(*header.LUKS2).AddKeyringToken(0, "crash-test", 1)
		apply(u, err)
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.EncryptSectors(img[len(area):], plain, 0); err != nil {
		t.Fatal(err)
	}
	return img
}

// testDecryptAny returns the plaintext of a raw LUKS image of either
// version and its header.
func testDecryptAny(t testing.TB, img, pass []byte) ([]byte, header.Header) {
	t.Helper()
	h, err := header.Read(bytes.NewReader(img), 0, int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	vk, _, err := h.Unlock(bytes.NewReader(img), 0, pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	p := h.Info().PayloadOffset
	out := make([]byte, int64(len(img))-p)
	if err := c.DecryptSectors(out, img[p:], 0); err != nil {
		t.Fatal(err)
	}
	return out, h
}

// testDecrypt returns the plaintext of a raw LUKS1 image and its header.
func testDecrypt(t testing.TB, img, pass []byte) ([]byte, *header.LUKS1) {
	t.Helper()
	r, err := header.Read(bytes.NewReader(img), 0, int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	h := r.(*header.LUKS1)
	vk, _, err := h.Unlock(bytes.NewReader(img), 0, pass, -1)
	if err != nil {
		t.Fatal(err)
	}
	c, err := h.NewSectorCipher(vk)
	if err != nil {
		t.Fatal(err)
	}
	p := int64(h.PayloadOffset) * 512
	out := make([]byte, int64(len(img))-p)
	c.DecryptSectors(out, img[p:], 0)
	return out, h
}

const (
	faultImage  = 4 << 20
	faultWindow = 64 << 10
)

func faultOpts() InPlaceOptions {
	return InPlaceOptions{Window: faultWindow, Pipeline: Pipeline{Jobs: 2, ChunkSize: 16 << 10}}
}

// crashCase is one operation under power-loss test.
type crashCase struct {
	name   string
	atom   int64 // the sector size whose writes land whole (faultDisk.atom)
	points int   // crash points, if fewer than TestPowerLoss's default (the 16 MiB LUKS2 header makes each one slow)
	setup  func(rng *rand.Rand) (img []byte, plain []byte)
	run    func(ctx context.Context, img File, js JournalStore) error
	check  func(t *testing.T, img, plain, before []byte)
}

// detachedCases are the in-place operations with a detached header, which
// is the file "hdr" on the same fault disk: run finds (or makes) it there,
// and check reads it from the disk of the last run.
func detachedCases() []crashCase {
	// Each case has its own last disk: the cases run in parallel.
	disk := func() (hdrOf func(JournalStore, func() []byte) File, last func() *faultDisk) {
		var d *faultDisk
		return func(js JournalStore, initial func() []byte) File {
				d = js.(faultJournal).d
				if f := d.files["hdr"]; f != nil {
					return f
				}
				return d.add("hdr", initial())
			}, func() *faultDisk {
				return d
			}
	}
	encHdrOf, encLast := disk()
	decHdrOf, decLast := disk()
	var encHdr []byte // the header of the decrypt case's image
	return []crashCase{
		{
			name: "encrypt-detached",
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return bytes.Clone(plain), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := EncryptDetachedInPlace(ctx, img, encHdrOf(js, func() []byte { return nil }), js,
					EncryptInPlaceOptions{Header: header.Params{ForceIterations: 1000}, Passphrase: rePass, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				hdr := encLast().files["hdr"].cur
				h, err := header.Read(bytes.NewReader(hdr), 0, int64(len(hdr)))
				if err != nil {
					t.Fatal(err)
				}
				vk, _, err := h.Unlock(bytes.NewReader(hdr), 0, rePass, -1)
				if err != nil {
					t.Fatal(err)
				}
				c, _ := h.NewSectorCipher(vk)
				got := make([]byte, len(img))
				c.DecryptSectors(got, img, 0)
				if h.Info().PayloadOffset != 0 || !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
			},
		},
		{
			name:   "decrypt-detached-luks2",
			atom:   4096,
			points: 100,
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				p := testParams(rng)
				p.Version, p.PBKDF, p.Detached = 2, "pbkdf2", true
				h, vk, area, err := header.Format(rePass, p)
				if err != nil {
					panic(err)
				}
				c, _ := h.NewSectorCipher(vk)
				img := make([]byte, len(plain))
				c.EncryptSectors(img, plain, 0)
				encHdr = area
				return img, plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := DecryptDetachedInPlace(ctx, img, decHdrOf(js, func() []byte { return bytes.Clone(encHdr) }), js, rePass, -1, faultOpts())
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				if n := len(decLast().files["hdr"].cur); !bytes.Equal(img, plain) || n != 0 {
					t.Fatalf("plaintext changed, or the header file is left (%d bytes)", n)
				}
			},
		},
	}
}

func crashCases() []crashCase {
	reencrypt := func(ctx context.Context, img File, js JournalStore) error {
		_, err := Reencrypt(ctx, img, js, ReencryptOptions{Passphrases: [][]byte{rePass}, ForceIterations: 1000, InPlaceOptions: faultOpts()})
		return err
	}
	return []crashCase{
		{
			// LUKS2 with 4096-byte sectors: the mark is a requirement in
			// both copies, the new header goes in at two seqids past the
			// old one, and a removed slot's token loses it.
			name:   "reencrypt-luks2",
			atom:   4096,
			points: 100,
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return testLUKS2(&testing.T{}, rng, plain, 4096, rePass, []byte("removed")), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := Reencrypt(ctx, img, js, ReencryptOptions{Passphrases: [][]byte{rePass}, PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, before []byte) {
				got, h := testDecryptAny(t, img, rePass)
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
				old, _ := header.Read(bytes.NewReader(before), 0, int64(len(before)))
				l2, ok := h.(*header.LUKS2)
				if !ok || l2.Label() != "crash" || h.Info().SectorSize != 4096 || h.Info().UUID != old.Info().UUID ||
					h.ActiveSlots() != 1 || len(img) != len(before) || l2.Warning != "" {
					t.Fatalf("new header: %+v, label %q, %d slots, warning %q", h.Info(), l2.Label(), h.ActiveSlots(), l2.Warning)
				}
				if js, _ := l2.TokenJSON(0); !bytes.Contains(js, []byte(`"keyslots":[]`)) {
					t.Fatalf("token 0 still names the removed slot: %s", js)
				}
				vk, _, _ := old.Unlock(bytes.NewReader(before), 0, rePass, -1)
				if h.VerifyVolumeKey(vk) {
					t.Fatal("the volume key did not change")
				}
			},
		},
		{
			name:   "encrypt-luks2",
			atom:   4096,
			points: 100,
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return bytes.Clone(plain), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := EncryptInPlace(ctx, img, js, EncryptInPlaceOptions{Header: header.Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: 1000},
					Passphrase: rePass, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				got, h := testDecryptAny(t, img, rePass)
				l2, ok := h.(*header.LUKS2)
				if !ok || !bytes.Equal(got, plain) || l2.Warning != "" || h.Info().SectorSize != 4096 || int64(len(img)) != int64(len(plain))+h.Info().PayloadOffset {
					t.Fatalf("plaintext changed, or header %+v (warning %q)", h.Info(), l2.Warning)
				}
			},
		},
		{
			name:   "decrypt-luks2",
			atom:   4096,
			points: 100,
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return testLUKS2(&testing.T{}, rng, plain, 4096, rePass), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := DecryptInPlace(ctx, img, js, rePass, -1, faultOpts())
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				if !bytes.Equal(img, plain) {
					t.Fatalf("plaintext changed (%d bytes, want %d)", len(img), len(plain))
				}
			},
		},
		{
			name: "reencrypt",
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return testLUKS(&testing.T{}, rng, plain, 32, rePass), plain
			},
			run: reencrypt,
			check: func(t *testing.T, img, plain, before []byte) {
				got, h := testDecrypt(t, img, rePass)
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
				old, _ := header.Parse(before[:1024])
				if h.MKDigest == old.MKDigest || len(img) != len(before) || h.UUID != old.UUID {
					t.Fatal("volume key digest unchanged, size or UUID changed")
				}
			},
		},
		{
			// reencrypt --cipher: ESSIV with a 256-bit key to XTS with a
			// 512-bit key, whose key slots need a larger header area.
			name: "reencrypt-to-xts",
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return testLUKS(&testing.T{}, rng, plain, 32, rePass), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := Reencrypt(ctx, img, js, ReencryptOptions{Passphrases: [][]byte{rePass}, Cipher: "aes-xts-plain64",
					ForceIterations: 1000, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, before []byte) {
				got, h := testDecrypt(t, img, rePass)
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
				old, _ := header.Parse(before[:1024])
				if h.CipherSpec() != "aes-xts-plain64" || h.KeyBytes != 64 || h.UUID != old.UUID || h.PayloadOffset != old.PayloadOffset {
					t.Fatalf("new header: %s, %d-byte key, payload %d", h.CipherSpec(), h.KeyBytes, h.PayloadOffset)
				}
			},
		},
		{
			name: "encrypt",
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return bytes.Clone(plain), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := EncryptInPlace(ctx, img, js, EncryptInPlaceOptions{Header: header.Params{ForceIterations: 1000}, Passphrase: rePass, InPlaceOptions: faultOpts()})
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				got, h := testDecrypt(t, img, rePass)
				if !bytes.Equal(got, plain) || int64(len(img)) != int64(len(plain))+int64(h.PayloadOffset)*512 {
					t.Fatal("plaintext changed")
				}
			},
		},
		{
			name: "decrypt",
			setup: func(rng *rand.Rand) ([]byte, []byte) {
				plain := testPlain(rng, faultImage)
				return testLUKS(&testing.T{}, rng, plain, 32, rePass), plain
			},
			run: func(ctx context.Context, img File, js JournalStore) error {
				_, err := DecryptInPlace(ctx, img, js, rePass, -1, faultOpts())
				return err
			},
			check: func(t *testing.T, img, plain, _ []byte) {
				if !bytes.Equal(img, plain) {
					t.Fatalf("plaintext changed (%d bytes, want %d)", len(img), len(plain))
				}
			},
		},
	}
}

// TestPowerLoss crashes each operation at 200 random points (a quarter of
// them crash again while resuming) and checks that resuming loses nothing.
func TestPowerLoss(t *testing.T) {
	points := 200
	switch {
	case raceEnabled:
		points = 12 // the race run looks for data races; the normal run takes all 200
	case testing.Short():
		points = 40
	}
	for ci, c := range append(append(crashCases(), detachedCases()...), authCrashCases()...) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			img0, plain := c.setup(rng)
			// A clean run counts the crash points.
			d := newFaultDisk(1)
			d.atom = c.atom
			f := d.add("img", img0)
			js := faultJournal{d, "img.journal"}
			if err := c.run(context.Background(), f, js); err != nil {
				t.Fatal(err)
			}
			c.check(t, f.cur, plain, img0)
			total := d.ops
			survived := 0
			n := points
			if c.points > 0 && c.points < n {
				n = c.points
			}
			if raceEnabled && (c.atom > SectorSize || c.name[:min(len(c.name), 19)] == "reencrypt-integrity") {
				n = 6 // each point copies a 16 MiB LUKS2 header; the race run looks for data races, not crash states
			}
			for i := range n {
				d := newFaultDisk(uint64(i))
				d.atom = c.atom
				f := d.add("img", img0)
				js := faultJournal{d, "img.journal"}
				d.crashAt = 1 + d.rng.IntN(total)
				if err := c.run(context.Background(), f, js); !errors.Is(err, errCrash) {
					t.Fatalf("point %d: run ended with %v, want a crash", d.crashAt, err)
				}
				d.crash()
				if i%4 == 0 { // crash again while resuming
					d.crashAt = 1 + d.rng.IntN(total)
					if err := c.run(context.Background(), f, js); err != nil && !errors.Is(err, errCrash) {
						t.Fatalf("point %d: first resume: %v", i, err)
					}
					d.crash()
				}
				if err := c.run(context.Background(), f, js); err != nil {
					t.Fatalf("point %d (of %d ops): resume: %v", i, total, err)
				}
				if _, ok := d.files[js.name]; ok {
					t.Fatalf("point %d: journal left behind", i)
				}
				c.check(t, f.cur, plain, img0)
				survived++
			}
			t.Logf("%s: %d crash points survived (%d mutating operations per run)", c.name, survived, total)
		})
	}
}

// TestFaults fails a read (EIO) or a write (ENOSPC) in the middle of each
// operation: the error says what failed, and running again completes.
func TestFaults(t *testing.T) {
	for ci, c := range append(append(crashCases(), detachedCases()...), authCrashCases()...) {
		for ki, kind := range []string{"EIO", "ENOSPC"} {
			if raceEnabled && ki != ci%2 {
				continue // the race run takes one kind per case, alternately
			}
			t.Run(c.name+"/"+kind, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), 9))
				img0, plain := c.setup(rng)
				d := newFaultDisk(3)
				f := d.add("img", img0)
				js := faultJournal{d, "img.journal"}
				if err := c.run(context.Background(), f, js); err != nil {
					t.Fatal(err)
				}
				reads, writes := d.reads, d.writes
				failed, points, least := 0, []int{5, 10, 25, 50, 75, 95}, 4
				if raceEnabled {
					// The race run looks for data races, not for every
					// fault position (each case copies whole images).
					points, least = []int{25, 75}, 1
				}
				for _, at := range points {
					d := newFaultDisk(uint64(at))
					f := d.add("img", img0)
					js := faultJournal{d, "img.journal"}
					want := syscall.EIO
					if kind == "EIO" {
						d.failReadAt = max(1, reads*at/100)
					} else {
						d.failWrite = max(1, writes*at/100)
						want = syscall.ENOSPC
					}
					err := c.run(context.Background(), f, js)
					if err == nil {
						// The failed read was a format probe (qcow2
						// magic), which counts a failure as "not
						// qcow2"; the run must still be right.
						c.check(t, f.cur, plain, img0)
						continue
					}
					failed++
					if !errors.Is(err, want) {
						t.Fatalf("fault at %d%%: got %v, want %v", at, err, want)
					}
					d.failReadAt, d.failWrite = 0, 0
					if err := c.run(context.Background(), f, js); err != nil {
						t.Fatalf("fault at %d%%: run after the fault: %v", at, err)
					}
					c.check(t, f.cur, plain, img0)
				}
				if failed < least {
					t.Fatalf("only %d of %d injected faults surfaced", failed, len(points))
				}
			})
		}
	}
}

// TestBusy: while an operation is unfinished, the image is marked for
// cryptsetup and cryptimg, other operations are refused with ErrBusy,
// --resume without a journal fails, and a lost journal is reported.
func TestBusy(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	plain := testPlain(rng, 1<<20)
	img0 := testLUKS(t, rng, plain, 32, rePass)
	d := newFaultDisk(1)
	f := d.add("img", img0)
	js := faultJournal{d, "img.journal"}
	o := ReencryptOptions{Passphrases: [][]byte{rePass}, ForceIterations: 1000, InPlaceOptions: faultOpts()}
	if _, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: o.Passphrases, InPlaceOptions: InPlaceOptions{Resume: true}}); !errors.Is(err, ErrNothingToResume) {
		t.Fatalf("resume without journal: %v", err)
	}
	d.crashAt = 30
	if _, err := Reencrypt(context.Background(), f, js, o); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	d.crash()
	if _, err := header.Read(bytes.NewReader(f.cur), 0, int64(len(f.cur))); !errors.Is(err, header.ErrMarked) || !errors.Is(err, header.ErrNotLUKS) {
		t.Fatalf("header.Read of a marked image: %v", err)
	}
	p, err := Pending(f, js)
	if err != nil || p == nil || p.Op != OpReencrypt {
		t.Fatalf("Pending = %v, %v", p, err)
	}
	if _, err := DecryptInPlace(context.Background(), f, js, rePass, -1, faultOpts()); !errors.Is(err, ErrBusy) {
		t.Fatalf("decrypt during reencrypt: %v", err)
	}
	if _, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{[]byte("wrong")}, InPlaceOptions: faultOpts()}); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Fatalf("resume with a wrong key: %v", err)
	}
	saved := d.files[js.name]
	delete(d.files, js.name)
	if _, err := Pending(f, js); !errors.Is(err, ErrJournalMissing) {
		t.Fatalf("lost journal: %v", err)
	}
	d.files[js.name] = saved
	if _, err := Reencrypt(context.Background(), f, js, o); err != nil {
		t.Fatal(err)
	}
	if got, _ := testDecrypt(t, f.cur, rePass); !bytes.Equal(got, plain) {
		t.Fatal("plaintext changed")
	}
}

// TestReencryptSlots keeps the slots whose keys are given, removes and
// wipes the others, and can change the key size and hash.
func TestReencryptSlots(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	plain := testPlain(rng, 1<<20)
	p1, p2, p3 := []byte("one"), []byte("two"), []byte("three")
	img0 := testLUKS(t, rng, plain, 32, p1, p2, p3)
	d := newFaultDisk(1)
	f := d.add("img", img0)
	js := faultJournal{d, "img.journal"}
	var asked []int
	r, err := Reencrypt(context.Background(), f, js, ReencryptOptions{
		Passphrases: [][]byte{p3, p1}, KeyBytes: 16, Hash: "sha512", ForceIterations: 1000,
		Confirm: func(removed []int) error { asked = removed; return nil }, InPlaceOptions: faultOpts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Kept, r.Removed, asked) != "[0 2] [1] [1]" {
		t.Fatalf("kept %v removed %v asked %v", r.Kept, r.Removed, asked)
	}
	for _, p := range [][]byte{p1, p3} {
		got, h := testDecrypt(t, f.cur, p)
		if !bytes.Equal(got, plain) || h.KeyBytes != 16 || h.HashSpec != "sha512" {
			t.Fatalf("key %q: wrong plaintext or header %d %s", p, h.KeyBytes, h.HashSpec)
		}
	}
	h, _ := header.Read(bytes.NewReader(f.cur), 0, int64(len(f.cur)))
	if _, _, err := h.Unlock(bytes.NewReader(f.cur), 0, p2, -1); !errors.Is(err, header.ErrNoMatchingKeyslot) {
		t.Fatalf("removed key: %v", err)
	}
	// The old slot 1 material is gone: the old header no longer opens.
	old, _ := header.Parse(img0[:1024])
	if _, _, err := old.Unlock(bytes.NewReader(f.cur), 0, p2, 1); err == nil {
		t.Fatal("old key material of slot 1 still unlocks")
	}
	// A refused confirmation writes nothing.
	before := bytes.Clone(f.cur)
	errNo := errors.New("no")
	if _, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{p1}, ForceIterations: 1000,
		Confirm: func([]int) error { return errNo }, InPlaceOptions: faultOpts()}); !errors.Is(err, errNo) || !bytes.Equal(before, f.cur) {
		t.Fatalf("refused confirmation: %v", err)
	}
}

// TestReencryptQcow2 reencrypts a qcow2+LUKS file made by Encrypt and
// checks the plaintext through DecryptTo.
func TestReencryptQcow2(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(8, 8))
	plain := testPlain(rng, 3<<20)
	clear(plain[1<<20 : 2<<20]) // unallocated clusters
	src := filepath.Join(dir, "plain.raw")
	if err := os.WriteFile(src, plain, 0o600); err != nil {
		t.Fatal(err)
	}
	in, _ := os.Open(src)
	defer in.Close()
	pl, err := OpenPlain(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "enc.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := Encrypt(context.Background(), out, pl, EncryptOptions{Header: header.Params{ForceIterations: 1000}, Passphrase: rePass, Format: Qcow2}); err != nil {
		t.Fatal(err)
	}
	e0, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	// Interrupt it after the first window: the qcow2 image is marked in
	// its LUKS area and refused by Open, then the run resumes.
	ctx, cancel := context.WithCancel(context.Background())
	o := ReencryptOptions{Passphrases: [][]byte{rePass}, ForceIterations: 1000, InPlaceOptions: faultOpts()}
	o.Pipeline.Progress = func(done, _ int64) {
		if done > 0 {
			cancel()
		}
	}
	if _, err := Reencrypt(ctx, out, Sidecar(out.Name()), o); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted: %v", err)
	}
	if _, err := Open(out); !errors.Is(err, header.ErrMarked) {
		t.Fatalf("Open of a qcow2 image in reencryption: %v", err)
	}
	o.Pipeline.Progress = nil
	r, err := Reencrypt(context.Background(), out, Sidecar(out.Name()), o)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Resumed {
		t.Fatal("not resumed")
	}
	if r.Format != Qcow2 || r.Bytes != 2<<20 {
		t.Fatalf("result %+v", r)
	}
	e, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if e.Header.(*header.LUKS1).MKDigest == e0.Header.(*header.LUKS1).MKDigest {
		t.Fatal("volume key unchanged")
	}
	k, err := e.Unlock(rePass, -1)
	if err != nil {
		t.Fatal(err)
	}
	dec, _ := os.Create(filepath.Join(dir, "dec.raw"))
	defer dec.Close()
	if err := e.DecryptTo(context.Background(), dec, k, DecryptOptions{Format: Raw}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dec.Name())
	if !bytes.Equal(got, plain) {
		t.Fatal("plaintext changed")
	}
	if _, err := os.Stat(out.Name() + JournalSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left behind: %v", err)
	}
}

// TestPendingChangesNothing: a journal that never became valid (a crash
// while it was being created) is no pending operation; Pending reports
// none and leaves the file, and the next operation removes it and runs.
func TestPendingChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	plain := testPlain(rng, 1<<20)
	dir := t.TempDir()
	path := filepath.Join(dir, "img")
	if err := os.WriteFile(path, testLUKS(t, rng, plain, 32, rePass), 0o600); err != nil {
		t.Fatal(err)
	}
	js := Sidecar(path)
	if err := os.WriteFile(js.Name(), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p, err := Pending(f, js); p != nil || err != nil {
		t.Fatalf("Pending with a stale journal = %v, %v; want none", p, err)
	}
	if _, err := os.Stat(js.Name()); err != nil {
		t.Fatalf("Pending removed the stale journal: %v", err)
	}
	if _, err := Reencrypt(context.Background(), f, js, ReencryptOptions{Passphrases: [][]byte{rePass}, ForceIterations: 1000}); err != nil {
		t.Fatalf("reencrypt over a stale journal: %v", err)
	}
	if _, err := os.Stat(js.Name()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left after reencrypt: %v", err)
	}
}
