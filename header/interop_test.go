package header

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/vectors/peer"
)

// cryptsetupPath returns the cryptsetup binary, skipping the test when it is
// missing outside CI and failing it when CI is set.
func cryptsetupPath(t *testing.T) string {
	t.Helper()
	return peer.Path(t, "cryptsetup")
}

// runCryptsetup runs cryptsetup and returns its output and exit code.
func runCryptsetup(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("cryptsetup %v: %v", args, err)
	return "", -1
}

// TestCryptsetupInterop writes headers made by Format to files and has the
// real cryptsetup dump and open them, then goes the other way: a slot added
// by cryptsetup opens here.
func TestCryptsetupInterop(t *testing.T) {
	bin := cryptsetupPath(t)
	for _, tt := range []struct {
		name     string
		keyBytes int
		hash     string
		align    uint32
	}{
		{"256-sha256", 32, "sha256", 0},
		{"128-sha1-qemu-layout", 16, "sha1", 8},
		{"192-sha512", 24, "sha512", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "img")
			key := filepath.Join(dir, "key")
			pass := []byte("interop passphrase " + tt.name)
			if err := os.WriteFile(key, pass, 0o600); err != nil {
				t.Fatal(err)
			}
			h, vk, area := testFormat(t, string(pass), Params{KeyBytes: tt.keyBytes, Hash: tt.hash, AlignSectors: tt.align}, "interop "+tt.name)
			file := append(area, make([]byte, 1<<20)...)
			if err := os.WriteFile(img, file, 0o600); err != nil {
				t.Fatal(err)
			}

			out, code := runCryptsetup(t, bin, "luksDump", img)
			if code != 0 {
				t.Fatalf("luksDump exit %d:\n%s", code, out)
			}
			for _, want := range []string{
				"Version:       \t1", "Cipher name:   \taes", "Cipher mode:   \tcbc-essiv:sha256",
				"Hash spec:     \t" + tt.hash, "UUID:          \t" + h.UUID, "MK iterations: \t1000",
				"Key Slot 0: ENABLED", "Key Slot 1: DISABLED",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("luksDump lacks %q:\n%s", want, out)
				}
			}
			if m := regexp.MustCompile(`Payload offset:\s*(\d+)`).FindStringSubmatch(out); m == nil || m[1] != itoa(h.PayloadOffset) {
				t.Errorf("luksDump payload offset %v, want %d", m, h.PayloadOffset)
			}

			if out, code := runCryptsetup(t, bin, "open", "--test-passphrase", "--key-file", key, img); code != 0 {
				t.Fatalf("open --test-passphrase exit %d:\n%s", code, out)
			}
			wrong := filepath.Join(dir, "wrong")
			os.WriteFile(wrong, []byte("not it"), 0o600)
			if out, code := runCryptsetup(t, bin, "open", "--test-passphrase", "--key-file", wrong, img); code != 2 {
				t.Fatalf("wrong passphrase: exit %d, want 2:\n%s", code, out)
			}

			// cryptsetup recovers the same volume key.
			out, code = runCryptsetup(t, bin, "luksDump", "--dump-volume-key", "-q", "--key-file", key, img)
			if code != 0 {
				t.Fatalf("luksDump --dump-volume-key exit %d:\n%s", code, out)
			}
			m := regexp.MustCompile(`(?s)MK dump:\s*((?:[0-9a-f]{2}\s+)+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no MK dump in:\n%s", out)
			}
			if got := strings.Join(strings.Fields(m[1]), ""); got != hex.EncodeToString(vk) {
				t.Fatalf("cryptsetup volume key %s, want %x", got, vk)
			}

			// A slot set here opens in cryptsetup.
			material, err := h.SetKeySlot(3, []byte("slot three"), vk, MinIterations, testRand("slot3"))
			if err != nil {
				t.Fatal(err)
			}
			copy(file, h.Marshal())
			copy(file[int(h.Slots[3].KeyMaterialOffset)*SectorSize:], material)
			os.WriteFile(img, file, 0o600)
			key3 := filepath.Join(dir, "key3")
			os.WriteFile(key3, []byte("slot three"), 0o600)
			if out, code := runCryptsetup(t, bin, "open", "--test-passphrase", "--key-slot", "3", "--key-file", key3, img); code != 0 {
				t.Fatalf("slot 3 set here: exit %d:\n%s", code, out)
			}

			// A slot added by cryptsetup opens here.
			key5 := filepath.Join(dir, "key5")
			os.WriteFile(key5, []byte("slot five from cryptsetup"), 0o600)
			if out, code := runCryptsetup(t, bin, "luksAddKey", "-q", "--pbkdf-force-iterations", "1000", "--key-slot", "5",
				"--key-file", key, img, key5); code != 0 {
				t.Fatalf("luksAddKey exit %d:\n%s", code, out)
			}
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			h2, err := readLUKS1(f, 0, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			got, slot, err := h2.Unlock(f, 0, []byte("slot five from cryptsetup"), -1)
			if err != nil || slot != 5 || !bytes.Equal(got, vk) {
				t.Fatalf("slot 5 from cryptsetup: %d, %v", slot, err)
			}

			// Disabling slot 3 here is seen by cryptsetup.
			h2.DisableSlot(3)
			file, _ = os.ReadFile(img)
			copy(file, h2.Marshal())
			os.WriteFile(img, file, 0o600)
			if out, code := runCryptsetup(t, bin, "open", "--test-passphrase", "--key-file", key3, img); code != 2 {
				t.Fatalf("disabled slot 3: exit %d, want 2:\n%s", code, out)
			}
			if out, code := runCryptsetup(t, bin, "open", "--test-passphrase", "--key-file", key, img); code != 0 {
				t.Fatalf("slot 0 after disabling 3: exit %d:\n%s", code, out)
			}
		})
	}
}

// TestCryptsetupRejects has cryptsetup confirm that headers Parse refuses are
// refused by cryptsetup too (a sample of the rejection table).
func TestCryptsetupRejects(t *testing.T) {
	bin := cryptsetupPath(t)
	h, _, area := testFormat(t, "pw", Params{KeyBytes: 16, AlignSectors: 8}, "rejects")
	cases := map[string]func(h *LUKS1){
		"stripes":         func(h *LUKS1) { h.Slots[4].Stripes = 3999 },
		"offset 1":        func(h *LUKS1) { h.Slots[2].KeyMaterialOffset = 1 },
		"overlap":         func(h *LUKS1) { h.Slots[2].KeyMaterialOffset = h.Slots[1].KeyMaterialOffset + 1 },
		"crosses payload": func(h *LUKS1) { h.PayloadOffset = h.Slots[7].KeyMaterialOffset + 1 },
	}
	for name, mutate := range cases {
		x := *h
		mutate(&x)
		b := bytes.Clone(area)
		copy(b, x.Marshal())
		if _, err := Parse(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Parse err %v, want ErrCorrupt", name, err)
		}
		img := filepath.Join(t.TempDir(), "img")
		os.WriteFile(img, append(b, make([]byte, 1<<20)...), 0o600)
		if out, code := runCryptsetup(t, bin, "luksDump", img); code == 0 {
			t.Errorf("%s: cryptsetup luksDump accepted it:\n%s", name, out)
		}
	}
	// Too small a file for the key slots.
	img := filepath.Join(t.TempDir(), "img")
	os.WriteFile(img, area[:h.AreaSize()-SectorSize], 0o600)
	if out, code := runCryptsetup(t, bin, "luksDump", img); code == 0 {
		t.Errorf("short file: cryptsetup luksDump accepted it:\n%s", out)
	}
	if _, err := readLUKS1(bytes.NewReader(area[:h.AreaSize()-SectorSize]), 0, h.AreaSize()-SectorSize); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short file: Read err %v, want ErrCorrupt", err)
	}
}

func itoa(n uint32) string {
	var b [10]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
