package image

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/derive"
)

// TestReencryptGivenKey: with UUID and VolumeKey the reencrypted image (LUKS1
// and LUKS2) has that UUID and the key derived for it; a second run that
// would give the same key is refused before anything is written; a crash at
// each of the last writes (the new header going in over the marked old one)
// and in the data phase resumes to the same result, and a resume with
// another master or UUID is refused without a write.
func TestReencryptGivenKey(t *testing.T) {
	m, err := derive.New(bytes.Repeat([]byte("master key "), 4))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := derive.New(bytes.Repeat([]byte("other master"), 4))
	const uuid = "0F0E0D0C-0B0A-4908-8706-050403020100" // stored lower-case
	for _, c := range []struct {
		name string
		atom int64
		img  func(rng *rand.Rand, plain []byte) []byte
	}{
		{"luks1", 0, func(rng *rand.Rand, plain []byte) []byte { return testLUKS(t, rng, plain, 32, rePass) }},
		{"luks2", 4096, func(rng *rand.Rand, plain []byte) []byte { return testLUKS2(t, rng, plain, 4096, rePass) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, 21))
			plain := testPlain(rng, 1<<20)
			img0 := c.img(rng, plain)
			opts := func(mk *derive.Master, u string) ReencryptOptions {
				return ReencryptOptions{Passphrases: [][]byte{rePass}, UUID: u, VolumeKey: mk.VolumeKey,
					PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts()}
			}
			run := func(d *faultDisk, f *faultFile, o ReencryptOptions) error {
				_, err := Reencrypt(context.Background(), f, faultJournal{d, "img.journal"}, o)
				return err
			}
			check := func(img []byte) {
				t.Helper()
				got, h := testDecryptAny(t, img, rePass)
				if !bytes.Equal(got, plain) {
					t.Fatal("plaintext changed")
				}
				i := h.Info()
				vk, _ := m.VolumeKey("0f0e0d0c-0b0a-4908-8706-050403020100", i.KeyBytes)
				if i.UUID != "0f0e0d0c-0b0a-4908-8706-050403020100" || !h.VerifyVolumeKey(vk) {
					t.Fatalf("UUID %s, or the volume key is not the derived one", i.UUID)
				}
			}

			d := newFaultDisk(1)
			d.atom = c.atom
			f := d.add("img", img0)
			if err := run(d, f, opts(m, uuid)); err != nil {
				t.Fatal(err)
			}
			check(f.cur)
			total := d.ops

			// The same master and UUID again: the same key, refused.
			done := bytes.Clone(f.cur)
			if err := run(d, f, opts(m, uuid)); !errors.Is(err, ErrSameVolumeKey) || !bytes.Equal(f.cur, done) {
				t.Fatalf("same key: %v (image changed: %v)", err, !bytes.Equal(f.cur, done))
			}
			if _, ok := d.files["img.journal"]; ok {
				t.Fatal("the refused run left a journal")
			}

			// Crash points: the last ten operations, and one in the data.
			points, last := []int{total / 2}, 9
			if raceEnabled {
				last = 2 // the race run looks for data races, not crash states
			}
			for k := max(1, total-last); k <= total; k++ {
				points = append(points, k)
			}
			for i, at := range points {
				d := newFaultDisk(uint64(i))
				d.atom = c.atom
				f := d.add("img", img0)
				d.crashAt = at
				if err := run(d, f, opts(m, uuid)); !errors.Is(err, errCrash) {
					t.Fatalf("op %d of %d: %v, want a crash", at, total, err)
				}
				d.crash()
				if i == 0 {
					before := bytes.Clone(f.cur)
					if err := run(d, f, opts(other, "")); !errors.Is(err, ErrVolumeKeyMismatch) {
						t.Fatalf("resume with another master: %v", err)
					}
					if err := run(d, f, opts(m, "9f0e0d0c-0b0a-4908-8706-050403020100")); err == nil {
						t.Fatal("resume with another UUID succeeded")
					}
					if !bytes.Equal(f.cur, before) {
						t.Fatal("a refused resume wrote to the image")
					}
				}
				// Whatever the crash left, the same options finish it
				// (or find it finished, with no journal: then it is
				// the same key again).
				err := run(d, f, opts(m, uuid))
				if _, pending := d.files["img.journal"]; err != nil && !(errors.Is(err, ErrSameVolumeKey) && !pending) {
					t.Fatalf("op %d of %d: resume: %v", at, total, err)
				}
				if _, ok := d.files["img.journal"]; ok {
					t.Fatalf("op %d: journal left behind", at)
				}
				check(f.cur)
			}
		})
	}
}

// TestReencryptKeepsUUID: without UUID the header keeps its UUID (for either
// version), whatever VolumeKey gives.
func TestReencryptKeepsUUID(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	plain := testPlain(rng, 256<<10)
	for _, img0 := range [][]byte{testLUKS(t, rng, plain, 32, rePass), testLUKS2(t, rng, plain, 512, rePass)} {
		old, err := header.Read(bytes.NewReader(img0), 0, int64(len(img0)))
		if err != nil {
			t.Fatal(err)
		}
		d := newFaultDisk(1)
		f := d.add("img", img0)
		var gotUUID string
		_, err = Reencrypt(context.Background(), f, faultJournal{d, "img.journal"}, ReencryptOptions{
			Passphrases: [][]byte{rePass}, PBKDF: "pbkdf2", ForceIterations: 1000, InPlaceOptions: faultOpts(),
			VolumeKey: func(u string, n int) ([]byte, error) { gotUUID = u; return bytes.Repeat([]byte{9}, n), nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		_, h := testDecryptAny(t, f.cur, rePass)
		if u := old.Info().UUID; gotUUID != u || h.Info().UUID != u || !h.VerifyVolumeKey(bytes.Repeat([]byte{9}, h.Info().KeyBytes)) {
			t.Fatalf("v%d: UUID %s (asked for %s), want %s, or not the given key", h.Info().Version, h.Info().UUID, gotUUID, u)
		}
	}
}
