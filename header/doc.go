// Package header reads, writes and unlocks LUKS headers behind one interface,
// [Header]: LUKS1 (the phdr, the eight key slots, the anti-forensic (AF)
// splitter and the PBKDF2 key derivation) and LUKS2 (both binary header
// copies, the JSON metadata, pbkdf2 and argon2 keyslots; no reencryption yet,
// files luks2*.go, following cryptsetup's docs/on-disk-format-luks2.pdf and
// lib/luks2).
//
// LUKS1:
//
// The on-disk format follows the LUKS1 On-Disk Format Specification v1.2.3
// (cryptsetup docs/on-disk-format.pdf) and, where the specification is silent,
// what cryptsetup's lib/luks1 (keymanage.c, af.c, keyencryption.c) does:
//
//   - [Format] lays a header out exactly as `cryptsetup luksFormat --type luks1`
//     does: key slots 4096-byte aligned from sector 8, 4000 stripes, payload
//     aligned to 1 MiB unless [Params.AlignSectors] says otherwise, master key
//     digest iterations worth 125 ms (or exactly 1000 with forced iterations),
//     random salts, a lower-case hash name and a random version 4 UUID.
//   - [Parse] and [Read] refuse every header cryptsetup refuses to load
//     (bad magic, version, stripes, key material offsets, overlapping slots,
//     slots crossing the payload, a file too small for its key slots), and a
//     few more that cryptsetup would repair silently or fail on later
//     (unterminated strings, unknown slot states, zero iterations, absurd key
//     sizes). They never panic on malformed input. A LUKS2 header cryptsetup
//     loads with parts cryptimg does not know (a keyslot, KDF, segment or
//     digest type) or will not use (the null cipher, capi: names) loads;
//     only what needs such a part fails, with an [*UnusableError] or a
//     [*NullCipherError] (see [AllowNullCipher] and [LUKS2.Problems]).
//   - Key material is encrypted with the header's own cipher, one 512-byte
//     sector at a time with the IV sector restarting at 0 at the start of each
//     slot's area. The ciphers are those of package cipher
//     (aes-cbc-essiv:sha256, aes-xts-plain64, ...); other specs give an
//     [UnsupportedCipherError]. PBKDF2 and
//     the AF splitter support sha1, sha256 and sha512.
//
// Secrets handed back (volume keys, key material) belong to the caller, who
// should clear them after use; intermediate keys are cleared here. Master key
// digests are compared in constant time.
package header
