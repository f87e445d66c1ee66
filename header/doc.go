// Package header reads, makes, changes and unlocks LUKS1 and LUKS2 headers
// behind one interface, [Header]; [*LUKS1] and [*LUKS2] implement it, and
// their exported fields carry what only one version has (for a dump).
//
// # LUKS1
//
// The phdr, the eight key slots, the anti-forensic (AF) splitter and the
// PBKDF2 key derivation follow the LUKS1 On-Disk Format Specification
// v1.2.3 (cryptsetup docs/on-disk-format.pdf) and, where it is silent,
// cryptsetup's lib/luks1 (keymanage.c, af.c, keyencryption.c). [Format]
// lays a header out as `cryptsetup luksFormat --type luks1` does: key slots
// 4096-byte aligned from sector 8, 4000 stripes, the payload aligned to 1
// MiB unless [Params.AlignSectors] says otherwise (docs/LUKS.md has the
// layout), master key digest iterations worth 125 ms (or exactly
// [MinIterations] with forced iterations), random salts, a lower-case hash
// name and a random version 4 UUID. [Parse] refuses every phdr cryptsetup
// refuses to load (bad magic, version, stripes, key material offsets,
// overlapping slots, slots crossing the payload, a file too small for its
// key slots) and a few that cryptsetup would repair silently or fail on
// later (unterminated strings, unknown slot states, zero iterations, absurd
// key sizes).
//
// # LUKS2
//
// The two binary header copies, their checksums and which copy wins follow
// cryptsetup's docs/on-disk-format-luks2.pdf and lib/luks2; the JSON
// metadata is validated as cryptsetup validates it (docs/LUKS2-VALIDATION.md).
// Keyslots are of type luks2 with a pbkdf2, argon2i or argon2id KDF, digests
// pbkdf2. A lost primary copy is found again from the secondary
// ([LUKS2.Warning], [LUKS2.Recovered]). A header cryptsetup loads with parts
// cryptimg does not know (a keyslot, KDF, segment or digest type) or will not
// use (the null cipher, capi: names) loads too; only what needs such a part
// fails, with an [*UnusableError] or a [*NullCipherError] (see
// [AllowNullCipher] and [LUKS2.Problems]). A header that records an
// unfinished cryptsetup reencryption loads, but its data is refused
// ([ErrLUKS2Reencrypt]); cryptimg does not run cryptsetup's reencryption.
// Every change is an [Update] of both copies with the next seqid, primary
// first. Beyond the [Header] methods, *LUKS2 changes labels, keyslot
// priorities and tokens, repairs, resizes a fixed data segment, enrolls a
// keyslot with its token in one update, and formats authenticated
// (integrity) segments, whose sectors package image/integrity lays out.
//
// # Both versions
//
// [Read] chooses the version by the header's own version field; [Format]
// makes either ([Params.Version]). [Convert] converts between the versions
// as cryptsetup convert does. Key material is encrypted one 512-byte sector
// at a time, the IV sector 0 at the start of each slot's area, with the
// ciphers of package header/cipher (aes-xts-plain64, aes-cbc-essiv:sha256,
// ...); other specifications give an [UnsupportedCipherError]. PBKDF2, the
// AF splitter and the digests support sha1, sha256 and sha512.
// [Header.UnlockCost] estimates an unlock before it runs, and the in-place
// operations of package image use [Header.Rekey], [Header.Mark] and
// [Header.Install]: a header marked busy makes cryptsetup, qemu and [Read]
// refuse the image ([ErrMarked]). The parsers never panic on malformed
// input.
//
// Secrets handed back (volume keys, key material) belong to the caller, who
// should clear them after use; intermediate keys are cleared here. Master key
// digests are compared in constant time.
package header
