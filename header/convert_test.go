package header

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// csImage has cryptsetup make an image at a new path in dir, running each
// command with the path appended.
func csImage(t *testing.T, cs, dir, name string, size int64, cmds ...[]string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if out, rc := runCryptsetup(t, cs, append(c, path)...); rc != 0 {
			t.Fatalf("cryptsetup %v: exit %d: %s", c, rc, out)
		}
	}
	return path
}

func readHeaderFile(t *testing.T, path string) (Header, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Read(bytes.NewReader(b), 0, int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h, b
}

// jsonEqual compares two LUKS2 JSON areas as JSON values.
func jsonEqual(t *testing.T, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(bytes.TrimRight(got, "\x00"), &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(bytes.TrimRight(want, "\x00"), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("JSON differs:\n got %s\nwant %s", bytes.TrimRight(got, "\x00"), bytes.TrimRight(want, "\x00"))
	}
}

// TestConvertLikeCryptsetup converts cryptsetup's images both ways and
// compares with what cryptsetup 2.6.1's convert makes of the same bytes:
// LUKS1 → LUKS2 gives the same JSON, binary header fields and moved key
// material (the copies' salts and checksums are random); LUKS2 → LUKS1 is
// byte-identical, and so is a round trip back to LUKS1.
func TestConvertLikeCryptsetup(t *testing.T) {
	cs := cryptsetupPath(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	key2 := filepath.Join(dir, "key2")
	os.WriteFile(key, []byte("pw"), 0o600)
	os.WriteFile(key2, []byte("pw2"), 0o600)
	fast := []string{"--pbkdf-force-iterations", "1000"}
	for _, tc := range []struct {
		name   string
		format []string
	}{
		{"xts-512", append([]string{"luksFormat", "-q", "--type", "luks1", "--key-file", key}, fast...)},
		{"essiv-256-sha1", append([]string{"luksFormat", "-q", "--type", "luks1", "--key-file", key, "--cipher", "aes-cbc-essiv:sha256", "--key-size", "256", "--hash", "sha1"}, fast...)},
	} {
		t.Run("luks1/"+tc.name, func(t *testing.T) {
			add := append([]string{"luksAddKey", "-q", "--key-file", key, "--new-keyfile", key2, "--key-slot", "3"}, fast...)
			path := csImage(t, cs, dir, tc.name+".img", 8<<20, tc.format, add)
			h1, orig := readHeaderFile(t, path)
			h2, area, err := Convert(bytes.NewReader(orig), 0, int64(len(orig)), h1, 2, testRand(tc.name))
			if err != nil {
				t.Fatal(err)
			}
			if _, rc := runCryptsetup(t, cs, "convert", "-q", "--type", "luks2", path); rc != 0 {
				t.Fatalf("cryptsetup convert: exit %d", rc)
			}
			_, want := readHeaderFile(t, path)
			got := h2.(*LUKS2)
			jsonEqual(t, got.JSON(), want[luks2BinSize:luks2HdrSize])
			payload := got.Info().PayloadOffset
			if !bytes.Equal(area[2*luks2HdrSize:payload], want[2*luks2HdrSize:payload]) {
				t.Fatal("the moved key material differs from cryptsetup's")
			}
			for _, off := range []int64{0, luks2HdrSize} {
				g, w := bytes.Clone(area[off:off+luks2BinSize]), bytes.Clone(want[off:off+luks2BinSize])
				for _, b := range [][]byte{g, w} {
					clear(b[l2OffSalt : l2OffSalt+l2SaltSize])
					clear(b[l2OffCsum : l2OffCsum+64])
				}
				if !bytes.Equal(g, w) {
					t.Fatalf("binary header at %d differs from cryptsetup's", off)
				}
			}
			for _, p := range []string{"pw", "pw2"} {
				if _, _, err := h2.Unlock(bytes.NewReader(area), 0, []byte(p), -1); err != nil {
					t.Fatalf("%s does not open the converted header: %v", p, err)
				}
			}
			// And back: the LUKS1 header is the original, byte for byte,
			// as far as its key material goes.
			h3, back, err := Convert(bytes.NewReader(area), 0, int64(len(area)), h2, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			end := roundUp(uint64(h1.(*LUKS1).AreaSize()), 4096)
			if !bytes.Equal(back[:end], orig[:end]) {
				t.Fatal("LUKS1 → LUKS2 → LUKS1 does not give the original header back")
			}
			if _, rc := runCryptsetup(t, cs, "convert", "-q", "--type", "luks1", path); rc != 0 {
				t.Fatalf("cryptsetup convert back: exit %d", rc)
			}
			_, want1 := readHeaderFile(t, path)
			if !bytes.Equal(back, want1[:len(back)]) {
				t.Fatal("LUKS2 → LUKS1 differs from cryptsetup's")
			}
			if h3.Info() != h1.Info() {
				t.Fatalf("info %+v, want %+v", h3.Info(), h1.Info())
			}
		})
	}

	// cryptsetup's own LUKS2 with gaps between the slots (0, 2 and 5), and
	// with a 64 KiB metadata size: the inactive LUKS1 slots get the
	// placeholder areas cryptsetup gives them.
	for _, tc := range []struct {
		name string
		meta string
	}{{"16k", "16384"}, {"64k", "65536"}} {
		t.Run("luks2/"+tc.name, func(t *testing.T) {
			format := append([]string{"luksFormat", "-q", "--type", "luks2", "--key-file", key, "--pbkdf", "pbkdf2", "--sector-size", "512", "--luks2-metadata-size", tc.meta}, fast...)
			var cmds [][]string
			cmds = append(cmds, format)
			for _, s := range []string{"2", "5"} {
				cmds = append(cmds, append([]string{"luksAddKey", "-q", "--key-file", key, "--new-keyfile", key2, "--key-slot", s, "--pbkdf", "pbkdf2"}, fast...))
			}
			path := csImage(t, cs, dir, "l2-"+tc.name+".img", 32<<20, cmds...)
			h, orig := readHeaderFile(t, path)
			h1, area, err := Convert(bytes.NewReader(orig), 0, int64(len(orig)), h, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, rc := runCryptsetup(t, cs, "convert", "-q", "--type", "luks1", path); rc != 0 {
				t.Fatalf("cryptsetup convert: exit %d", rc)
			}
			_, want := readHeaderFile(t, path)
			if !bytes.Equal(area, want[:len(area)]) {
				for i := range area {
					if area[i] != want[i] {
						t.Fatalf("LUKS2 → LUKS1 differs from cryptsetup's from byte %d", i)
					}
				}
			}
			for _, p := range []string{"pw", "pw2"} {
				if _, _, err := h1.Unlock(bytes.NewReader(area), 0, []byte(p), -1); err != nil {
					t.Fatalf("%s does not open the converted header: %v", p, err)
				}
			}
		})
	}
}

// TestConvertRefuses: what LUKS1 cannot say is refused, with cryptsetup's
// reason, and cryptsetup refuses the same images.
func TestConvertRefuses(t *testing.T) {
	cs := cryptsetupPath(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	os.WriteFile(key, []byte("pw"), 0o600)
	base := []string{"luksFormat", "-q", "--type", "luks2", "--key-file", key, "--pbkdf-force-iterations", "4", "--pbkdf-memory", "32768"}
	pb := []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
	for _, tc := range []struct {
		name string
		cmds [][]string
		want string
	}{
		{"4096-sectors", [][]string{append(append([]string{}, base[:6]...), pb...)}, "sector size is not 512"},
		{"argon2id", [][]string{append(append([]string{}, base...), "--sector-size", "512")}, "keyslot 0 is not LUKS1 compatible"},
		{"slot-9", [][]string{append(append(append([]string{}, base[:6]...), pb...), "--sector-size", "512", "--key-slot", "9")}, "slot 9 (over maximum slots)"},
		{"token", [][]string{append(append(append([]string{}, base[:6]...), pb...), "--sector-size", "512"), {"token", "add", "--key-description", "k"}}, "1 token(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := csImage(t, cs, dir, tc.name+".img", 32<<20, tc.cmds...)
			h, b := readHeaderFile(t, path)
			_, _, err := Convert(bytes.NewReader(b), 0, int64(len(b)), h, 1, nil)
			if !errors.Is(err, ErrConvert) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Fatalf("got %v, want ErrConvert saying %q", err, tc.want)
			}
			if out, rc := runCryptsetup(t, cs, "convert", "-q", "--type", "luks1", path); rc == 0 {
				t.Fatalf("cryptsetup converted it: %s", out)
			}
		})
	}
	// A LUKS1 header whose key slots fill the space before the data has
	// no room for the move.
	path := csImage(t, cs, dir, "tight.img", 8<<20, []string{"luksFormat", "-q", "--type", "luks1", "--key-file", key, "--pbkdf-force-iterations", "1000", "--align-payload", "4040"})
	h, b := readHeaderFile(t, path)
	if _, _, err := Convert(bytes.NewReader(b), 0, int64(len(b)), h, 2, nil); !errors.Is(err, ErrConvert) {
		t.Fatalf("got %v, want ErrConvert", err)
	}
	if out, rc := runCryptsetup(t, cs, "convert", "-q", "--type", "luks2", path); rc == 0 {
		t.Fatalf("cryptsetup converted it: %s", out)
	}
	if _, _, err := Convert(bytes.NewReader(b), 0, int64(len(b)), h, 1, nil); !errors.Is(err, ErrConvert) {
		t.Fatalf("LUKS1 to LUKS1: got %v", err)
	}
}
