package image

import "github.com/cryptimg/cryptimg/sectors"

// The IV rule of each container, each in one place. IV sector numbers count
// 512-byte units (sectors.UnitSize), as dm-crypt does.

// rawIV is the IV sector of the byte at payload-relative offset off of a
// raw LUKS image (cryptsetup, dm-crypt, qemu's luks driver): 0 at the
// payload start.
func rawIV(off int64) uint64 { return uint64(off) / sectors.UnitSize }

// qcowIV is the IV sector of the byte at host file offset host of a
// qcow2+LUKS image: qemu's docs/interop/qcow2.txt numbers "the physical
// disk sector", the offset in the image file, not the guest offset.
func qcowIV(host int64) uint64 { return uint64(host) / sectors.UnitSize }

// integrityIV is the IV sector of the byte at plaintext offset off of an
// authenticated image: logical sector N of the dm-integrity device, which
// dm-crypt maps with offset 0 and iv_offset 0, so N is also the sector's
// place in the plaintext (and the N its tag covers).
func integrityIV(off int64) uint64 { return uint64(off) / sectors.UnitSize }

// ivAfter is the IV sector of the byte n bytes after one whose IV sector is
// first, within one contiguous encrypted run.
func ivAfter(first uint64, n int64) uint64 { return first + uint64(n)/sectors.UnitSize }
