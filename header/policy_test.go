package header

import (
	"slices"
	"testing"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// TestDefaultsPerVersion: a zero Params.Cipher gets the version's default,
// and the header Format makes holds it with the cipher's default key size:
// LUKS1 aes-cbc-essiv:sha256/256, LUKS2 aes-xts-plain64/512 (cryptsetup
// 2.6.1's luksFormat --type luks2), as the CLI has always made them.
func TestDefaultsPerVersion(t *testing.T) {
	for _, c := range []struct {
		version int
		cipher  string
		keyBits int
		sector  int
	}{
		{0, "aes-cbc-essiv:sha256", 256, 512},
		{1, "aes-cbc-essiv:sha256", 256, 512},
		{2, "aes-xts-plain64", 512, 4096},
	} {
		if got := DefaultCipher(c.version); got != c.cipher {
			t.Errorf("DefaultCipher(%d) = %q, want %q", c.version, got, c.cipher)
		}
		h, vk, _, err := Format([]byte("pw"), Params{Version: c.version, PBKDF: PBKDF2, ForceIterations: MinIterations, Rand: testRand("defaults")})
		if err != nil {
			t.Fatalf("version %d: %v", c.version, err)
		}
		i := h.Info()
		if i.Cipher != c.cipher || i.KeyBytes*8 != c.keyBits || i.SectorSize != c.sector || i.Hash != DefaultHash {
			t.Errorf("version %d formats %s/%d bits, %d-byte sectors, %s; want %s/%d, %d, %s",
				c.version, i.Cipher, i.KeyBytes*8, i.SectorSize, i.Hash, c.cipher, c.keyBits, c.sector, DefaultHash)
		}
		if len(vk) != i.KeyBytes {
			t.Errorf("version %d: volume key of %d bytes, header says %d", c.version, len(vk), i.KeyBytes)
		}
		if n := h.NumSlots(); n != SlotCount(c.version) {
			t.Errorf("version %d: header has %d slots, SlotCount says %d", c.version, n, SlotCount(c.version))
		}
		if !slices.Contains(SectorSizes(c.version), i.SectorSize) {
			t.Errorf("version %d: sector %d not in SectorSizes %v", c.version, i.SectorSize, SectorSizes(c.version))
		}
	}
	if DefaultCipher(3) != "" || SlotCount(3) != 0 || KDFs(3) != nil || SectorSizes(3) != nil {
		t.Error("an unknown version has facts")
	}
}

// TestPolicyFactsAgree: the lists the CLI offers are the ones the package
// takes, and it refuses what they leave out.
func TestPolicyFactsAgree(t *testing.T) {
	for _, h := range Hashes() {
		if _, err := hashFunc(h); err != nil {
			t.Errorf("Hashes lists %s, hashFunc refuses it: %v", h, err)
		}
	}
	if _, err := hashFunc("md5"); err == nil {
		t.Error("hashFunc takes md5")
	}
	for _, v := range Versions() {
		kdfs := KDFs(v)
		if len(kdfs) == 0 {
			t.Fatalf("version %d has no KDF", v)
		}
		for _, kdf := range kdfs {
			if _, _, _, err := Format([]byte("pw"), Params{Version: v, PBKDF: kdf, ForceIterations: MinCost(kdf) - 1, PBKDFMemory: 64}); err == nil {
				t.Errorf("version %d %s: a cost below MinCost %d formats", v, kdf, MinCost(kdf))
			}
		}
		for _, ss := range cipher.SectorSizes() {
			_, _, _, err := Format([]byte("pw"), Params{Version: v, SectorSize: ss, PBKDF: PBKDF2, ForceIterations: MinIterations, Rand: testRand("ss")})
			if want := slices.Contains(SectorSizes(v), ss); (err == nil) != want {
				t.Errorf("version %d sector %d: err %v, SectorSizes says %v", v, ss, err, want)
			}
		}
	}
	if _, _, _, err := Format([]byte("pw"), Params{Version: 2, SectorSize: 8192, PBKDF: PBKDF2, ForceIterations: MinIterations}); err == nil {
		t.Error("LUKS2 formats 8192-byte sectors")
	}
}
