// Package vectors embeds cryptimg's test vectors. Import it from tests only,
// so the data never reaches the binary.
//
// Layout:
//
//	essiv/essiv-cbc-aes-sha256.json              Linux crypto/testmgr.h essiv_aes_cbc_tv_template
//	essiv/essiv-authenc-hmac-sha256-cbc-aes-sha256.json
//	                                             Linux crypto/testmgr.h essiv_hmac_sha256_aes_cbc_tv_temp
//	essiv/cryptsetup-essiv-sha256-storage.json   cryptsetup tests/crypto-vectors.c essiv:sha256
//	cipher/cryptsetup-plain-storage.json         cryptsetup tests/crypto-vectors.c plain and plain64 (CBC)
//	luks/luks1-*.img.gz, luks/cryptsetup-luks1.json
//	                                             LUKS1 header areas cryptsetup 2.6.1 made, with their volume keys
//
// Provenance and field meanings are in README.md beside this file and in
// luks/README.md. The subpackages kernel and peer are the test oracles:
// the real kernel under qemu, and the programs the interop tests run.
package vectors

import (
	"embed"
	"io/fs"
)

//go:embed essiv luks cipher
var files embed.FS

// FS holds every vector file, by path relative to this folder.
var FS fs.FS = files

// ReadFile returns one vector file by its path relative to this folder.
func ReadFile(name string) ([]byte, error) { return fs.ReadFile(FS, name) }
