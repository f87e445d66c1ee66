package cipher

import "strings"

// The null cipher and kernel crypto API names: specifications a LUKS header
// may carry that are not modes of the registry. Neither can be chosen with
// --cipher; header decides what to do with a header that holds one.

// IsNull reports whether spec is cryptsetup's null cipher ("cipher_null-ecb"
// and the like), which leaves data as it is: cryptsetup's rule, a spec
// containing "cipher_null" or equal to "null" (lib/utils_crypt.c
// crypt_is_cipher_null).
func IsNull(spec string) bool { return strings.Contains(spec, "cipher_null") || spec == "null" }

// IsCAPI reports whether spec is a kernel crypto API name ("capi:xts(aes)-plain64"),
// which dm-crypt takes as it is (cryptsetup lib/utils_crypt.c).
func IsCAPI(spec string) bool { return strings.HasPrefix(spec, "capi:") }

// NewNullSector returns the null cipher of geometry g: every sector comes
// out as it went in. The key, of any length, is not used.
func NewNullSector(g Geometry) (Sector, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	return &sector{k: nullKernel{}, g: g, prefix: "cipher: cipher_null", step: uint64(g.SectorSize / UnitSize)}, nil
}

type nullKernel struct{}

func (nullKernel) EncryptSectors(dst, src []byte, _ uint64, _ int) { copy(dst, src) }
func (nullKernel) DecryptSectors(dst, src []byte, _ uint64, _ int) { copy(dst, src) }
func (nullKernel) Clear()                                          {}
