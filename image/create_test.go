package image

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image/qcow2"
)

func newCreateFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func createOpts(p header.Params) EncryptOptions {
	if p.ForceIterations == 0 {
		p.ForceIterations = header.MinIterations
	}
	if p.Version == 2 && p.PBKDF == "" {
		p.PBKDF = "pbkdf2"
	}
	return EncryptOptions{Header: p, Passphrase: testPass}
}

func TestCreateRaw(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      header.Params
		size   int64
		sector int
	}{
		{"luks1", header.Params{}, 3<<20 + 512, 512},
		{"luks2-4096", header.Params{Version: 2}, 4 << 20, 4096},
		{"luks2-512", header.Params{Version: 2}, 4<<20 + 512, 512},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newCreateFile(t, "img")
			h, err := Create(context.Background(), f, c.size, createOpts(c.p))
			if err != nil {
				t.Fatal(err)
			}
			i := h.Info()
			if i.SectorSize != c.sector {
				t.Errorf("sector size %d, want %d", i.SectorSize, c.sector)
			}
			st, _ := f.Stat()
			if st.Size() != i.PayloadOffset+c.size {
				t.Errorf("file of %d bytes, want payload offset %d + %d", st.Size(), i.PayloadOffset, c.size)
			}
			e, err := Open(f)
			if err != nil {
				t.Fatal(err)
			}
			if e.PayloadSize != c.size || e.Header.Info().UUID != i.UUID {
				t.Errorf("opened: payload %d, uuid %s", e.PayloadSize, e.Header.Info().UUID)
			}
			k, err := e.Unlock(testPass, -1)
			if err != nil {
				t.Fatal(err)
			}
			k.Clear()
			// The payload is never written: it reads as zero ciphertext.
			b := make([]byte, c.size)
			if _, err := f.ReadAt(b, i.PayloadOffset); err != nil || !bytes.Equal(b, make([]byte, c.size)) {
				t.Errorf("payload written (%v)", err)
			}
		})
	}
}

func TestCreateDetachedHeader(t *testing.T) {
	data, hdr := newCreateFile(t, "data"), newCreateFile(t, "hdr")
	o := createOpts(header.Params{Version: 2})
	o.HeaderFile = hdr
	if _, err := Create(context.Background(), data, 1<<20, o); err != nil {
		t.Fatal(err)
	}
	if st, _ := data.Stat(); st.Size() != 1<<20 {
		t.Errorf("data file of %d bytes", st.Size())
	}
	e, err := OpenDetached(hdr, data)
	if err != nil {
		t.Fatal(err)
	}
	if e.PayloadSize != 1<<20 {
		t.Errorf("payload %d", e.PayloadSize)
	}
	if _, err := e.TestKey(testPass, -1); err != nil {
		t.Fatal(err)
	}
}

func TestCreateQcow2NoClusters(t *testing.T) {
	f := newCreateFile(t, "img.qcow2")
	o := createOpts(header.Params{})
	o.Format = Qcow2
	if _, err := Create(context.Background(), f, 256<<20, o); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	if e.Format != Qcow2 || e.PayloadSize != 256<<20 {
		t.Fatalf("opened as %s of %d bytes", e.Format, e.PayloadSize)
	}
	ext, err := e.Qcow2.Extents(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ext {
		if x.Kind == qcow2.Data || x.Kind == qcow2.Compressed {
			t.Errorf("allocated cluster at guest offset %d", x.GuestOffset)
		}
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	v, err := e.View(f, k, true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	b := make([]byte, 1<<20)
	if _, err := v.ReadAt(b, 100<<20); err != nil || !bytes.Equal(b, make([]byte, len(b))) {
		t.Errorf("reads %v, not zeros", err)
	}
}

func TestCreateIntegrityZeros(t *testing.T) {
	f := newCreateFile(t, "img")
	o := createOpts(header.Params{Version: 2, Cipher: "aes-xts-plain64", KeyBytes: 96, Integrity: "hmac(sha256)"})
	if _, err := Create(context.Background(), f, 2<<20, o); err != nil {
		t.Fatal(err)
	}
	e, err := Open(f)
	if err != nil {
		t.Fatal(err)
	}
	k, err := e.Unlock(testPass, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Clear()
	r, err := e.Verify(context.Background(), k, Pipeline{})
	if err != nil || r.Corrupt != nil || r.Bytes != 2<<20 {
		t.Fatalf("verify: %+v, %v", r, err)
	}
	out := newCreateFile(t, "out")
	if err := e.Decrypt(context.Background(), out, k, Pipeline{}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out.Name())
	if !bytes.Equal(b, make([]byte, 2<<20)) {
		t.Errorf("decrypts to %d bytes, not zeros", len(b))
	}
}

// TestCreateRefuses: sizes that cannot be made are refused before anything
// is written (or any key derived).
func TestCreateRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		p    header.Params
		fmt  Format
		size int64
		want error
	}{
		{"zero", header.Params{}, "", 0, ErrEmptySize},
		{"negative", header.Params{}, "", -512, ErrEmptySize},
		{"odd", header.Params{}, "", 1000, ErrSize},
		{"sector size", header.Params{Version: 2, SectorSize: 4096}, "", 4608, ErrUnaligned},
		{"integrity", header.Params{Version: 2, Cipher: "aes-xts-plain64", KeyBytes: 96, Integrity: "hmac(sha256)"}, "", 2048, ErrUnaligned},
		{"luks2 qcow2", header.Params{Version: 2}, Qcow2, 1 << 20, ErrLUKS2Qcow2},
		{"format", header.Params{}, "vmdk", 1 << 20, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newCreateFile(t, "img")
			o := createOpts(c.p)
			o.Format = c.fmt
			_, err := Create(context.Background(), f, c.size, o)
			if err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("Create = %v, want %v", err, c.want)
			}
			if st, _ := f.Stat(); st.Size() != 0 {
				t.Errorf("refused, but wrote %d bytes", st.Size())
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Create(ctx, newCreateFile(t, "img"), 1<<20, createOpts(header.Params{})); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
