package header

import (
	"errors"
	"testing"
)

// TestWithDataSize: a dynamic or fixed segment gets the size asked for in
// both copies with the next seqid, a power cut at any sector of the update
// leaves the old or the new size, and sizes that are not whole sectors, or
// an authenticated segment, are refused.
func TestWithDataSize(t *testing.T) {
	hh, _, area, err := Format([]byte("pw"), Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: MinIterations, Rand: testRand("size")})
	if err != nil {
		t.Fatal(err)
	}
	h := hh.(*LUKS2)
	area = area[:1<<20] // both copies; the keyslot area is not touched
	if h.Info().PayloadSize != 0 {
		t.Fatal("a new segment is not dynamic")
	}
	apply := func(u *Update) []byte {
		img := append([]byte(nil), area...)
		for _, w := range u.Writes {
			copy(img[w.Offset:], w.Data)
		}
		return img
	}
	u, err := h.WithDataSize(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	fixed := u.Header.(*LUKS2)
	if fixed.Info().PayloadSize != 8<<20 || fixed.SeqID() != h.SeqID()+1 || fixed.Segments[0].Size != "8388608" {
		t.Fatalf("segment %+v, seqid %d", fixed.Segments[0], fixed.SeqID())
	}
	img := apply(u)
	u2, err := fixed.WithDataSize(12 << 20)
	if err != nil {
		t.Fatal(err)
	}
	n := crashPoints(t, img, u2, 1, func(b []byte) error {
		r, err := Read(metaReader(b), 0, h.Info().AreaSize)
		if err != nil {
			return err
		}
		if s := r.Info().PayloadSize; s != 8<<20 && s != 12<<20 {
			return errors.New("neither the old nor the new size")
		}
		return nil
	})
	if n == 0 {
		t.Fatal("no crash points")
	}
	for _, bad := range []int64{0, -4096, 8<<20 + 512} {
		if _, err := fixed.WithDataSize(bad); err == nil {
			t.Errorf("size %d accepted", bad)
		}
	}

	ah, _, _, err := Format([]byte("pw"), Params{Version: 2, PBKDF: "pbkdf2", ForceIterations: MinIterations, Integrity: "hmac(sha256)", Rand: testRand("size auth")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ah.(*LUKS2).WithDataSize(8 << 20); !errors.Is(err, ErrAuthenticated) {
		t.Errorf("integrity segment: %v", err)
	}
}
