package main

import (
	"slices"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/spf13/pflag"
)

// luks2Options are the flags of a LUKS2 header, as cryptsetup names them.
type luks2Options struct {
	luksType      string
	pbkdf         string
	pbkdfMemory   uint32
	pbkdfParallel uint32
	sectorSize    int
	label         string
	subsystem     string
	cipherSet     bool // --cipher given: LUKS2 otherwise defaults to aes-xts-plain64
	integrity     string
	noJournal     bool
}

func (l *luks2Options) addFlags(f *pflag.FlagSet) {
	f.StringVar(&l.luksType, "type", "luks1", "LUKS version of the header: luks1 (read by qemu too) or luks2 (cryptsetup's default)")
	f.StringVar(&l.pbkdf, "pbkdf", "", "LUKS2 keyslot KDF: argon2id (default), argon2i or pbkdf2 (LUKS1: pbkdf2 only)")
	f.Uint32Var(&l.pbkdfMemory, "pbkdf-memory", 0, "argon2 memory in KiB (default 1 GiB, at most half of the RAM)")
	f.Uint32Var(&l.pbkdfParallel, "pbkdf-parallel", 0, "argon2 threads (default up to 4, at most the CPUs)")
	f.IntVar(&l.sectorSize, "sector-size", 0, "LUKS2 encryption sector size: 512, 1024, 2048 or 4096 (default 4096 when the image is whole 4096-byte sectors)")
	f.StringVar(&l.label, "label", "", "LUKS2 label")
	f.StringVar(&l.subsystem, "subsystem", "", "LUKS2 subsystem")
	f.StringVar(&l.integrity, "integrity", "", "LUKS2 integrity protection: hmac-sha256 (with aes-cbc-essiv:sha256 or aes-xts-plain64) or aead (with aes-gcm-random); every sector gets a tag")
	f.BoolVar(&l.noJournal, "integrity-no-journal", false, "with --integrity: store the persistent no-journal flag, so the kernel opens the image without the integrity journal")
}

// checkPBKDF checks a --pbkdf value; "" is the version's default.
func checkPBKDF(name string) error {
	if name != "" && !slices.Contains(pbkdfNames, name) {
		return usagef("unknown --pbkdf %q: use %s", name, strings.Join(pbkdfNames, ", "))
	}
	return nil
}

// apply checks the flags against the version and sets them in p.
func (l luks2Options) apply(p *header.Params) error {
	switch l.luksType {
	case "luks1":
		if l.pbkdf != "" && l.pbkdf != "pbkdf2" || l.pbkdfMemory != 0 || l.pbkdfParallel != 0 || l.sectorSize != 0 && l.sectorSize != 512 || l.label != "" || l.subsystem != "" || l.integrity != "" || l.noJournal {
			return usagef("--pbkdf argon2, --pbkdf-memory, --pbkdf-parallel, --sector-size, --label, --subsystem and --integrity need --type luks2")
		}
		return nil
	case "luks2":
	default:
		return usagef("unknown --type %q: use %s", l.luksType, strings.Join(luksTypes, " or "))
	}
	p.Version, p.PBKDF, p.PBKDFMemory, p.PBKDFParallel = 2, l.pbkdf, l.pbkdfMemory, l.pbkdfParallel
	p.SectorSize, p.Label, p.Subsystem = l.sectorSize, l.label, l.subsystem
	if !l.cipherSet {
		p.Cipher = "aes-xts-plain64"
	}
	if err := checkPBKDF(l.pbkdf); err != nil {
		return err
	}
	if l.sectorSize != 0 && (l.sectorSize < 512 || l.sectorSize > 4096 || l.sectorSize&(l.sectorSize-1) != 0) {
		return usagef("--sector-size must be 512, 1024, 2048 or 4096")
	}
	if l.noJournal && l.integrity == "" {
		return usagef("--integrity-no-journal needs --integrity")
	}
	if l.integrity != "" {
		t, err := cipher.IntegrityType(l.integrity)
		if err != nil {
			return usagef("unsupported --integrity %q: use %s", l.integrity, strings.Join(cipher.IntegrityOptions(), " or "))
		}
		p.Integrity, p.NoJournal = t, l.noJournal
	}
	return nil
}

// addHeaderFlags adds the flags of a new header and output: the LUKS2,
// key, cipher and KDF flags, --force, --json and the output format.
func (o *encryptOptions) addHeaderFlags(f *pflag.FlagSet) {
	o.luks2Options.addFlags(f)
	f.StringVar(&o.volumeKeyFile, "volume-key-file", "", "use the raw volume key in FILE instead of a random one (as cryptsetup luksFormat --volume-key-file)")
	f.StringVar(&o.masterKeyFile, "master-key-file", "", "derive the volume key from the master secret in FILE and the image's UUID (HKDF-SHA512; see README)")
	f.StringVarP(&o.cipher, "cipher", "c", header.DefaultCipherSpec, "cipher specification: "+strings.Join(cipher.Supported(), ", "))
	f.IntVarP(&o.keySize, "key-size", "s", 0, "volume key size in bits (default: the cipher's, as cryptsetup: 512 for xts, 256 for cbc); xts takes 256, 384 or 512, cbc 128, 192 or 256")
	f.StringVar(&o.hash, "hash", "sha256", "hash for PBKDF2 and the anti-forensic splitter: sha1, sha256 or sha512")
	f.IntVarP(&o.iterTime, "iter-time", "i", 2000, "PBKDF2 time for the key slot, in milliseconds")
	f.Uint32Var(&o.forceIterations, "pbkdf-force-iterations", 0, forceIterationsUsage)
	f.StringVar(&o.uuid, "uuid", "", "UUID for the new header (default: random)")
	f.Uint32Var(&o.alignPayload, "align-payload", 0, "align the payload to this many 512-byte sectors (default 2048, 1 MiB)")
	f.BoolVarP(&o.force, "force", "f", false, "overwrite OUTPUT if it exists")
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	f.StringVarP(&o.outputFormat, "output-format", "O", "", "output format: raw or qcow2 (default: the input's)")
	f.Int64Var(&o.clusterSize, "cluster-size", 0, "cluster size of a qcow2 output in bytes (default 65536)")
}

var supportedHashes = []string{"sha1", "sha256", "sha512"}

// cipherChoice checks --cipher and --key-size (in bits; 0 = the cipher's
// default) and returns the LUKS1 cipher fields and key length.
func cipherChoice(spec string, bits int, integrity string) (keyBytes int, err error) {
	if integrity != "" {
		return authCipherChoice(spec, bits, integrity)
	}
	m, err := cipher.Parse(spec)
	if err != nil {
		return 0, &header.UnsupportedCipherError{Spec: spec}
	}
	if bits == 0 {
		return m.DefaultKeyBytes, nil
	}
	if bits%8 != 0 || !m.ValidKey(bits/8) {
		return 0, usagef("unsupported --key-size %d for %s: use %s", bits, m.Spec(), m.KeyBits())
	}
	return bits / 8, nil
}

func (o encryptOptions) params() (header.Params, error) {
	var p header.Params
	p.Cipher = o.cipher
	if err := o.luks2Options.apply(&p); err != nil {
		return p, err
	}
	keyBytes, err := cipherChoice(p.Cipher, o.keySize, p.Integrity)
	if err != nil {
		return header.Params{}, err
	}
	if !slices.Contains(supportedHashes, o.hash) {
		return header.Params{}, usagef("unsupported --hash %q: use sha1, sha256 or sha512", o.hash)
	}
	if o.iterTime <= 0 {
		return header.Params{}, usagef("--iter-time must be positive")
	}
	argon := p.Version == 2 && p.PBKDF != "pbkdf2"
	if o.forceIterations != 0 && o.forceIterations < header.MinIterations && !argon {
		return header.Params{}, usagef("--pbkdf-force-iterations must be at least %d for pbkdf2", header.MinIterations)
	}
	if argon && o.forceIterations != 0 && o.forceIterations < 4 {
		return header.Params{}, usagef("--pbkdf-force-iterations must be at least 4 for argon2")
	}
	if p.Version == 2 && o.alignPayload != 0 {
		return header.Params{}, usagef("--align-payload is for LUKS1; a LUKS2 payload starts at 16 MiB")
	}
	p.Hash, p.KeyBytes = o.hash, keyBytes
	p.IterTime = time.Duration(o.iterTime) * time.Millisecond
	p.ForceIterations, p.UUID, p.AlignSectors = o.forceIterations, o.uuid, o.alignPayload
	return p, nil
}

// authCipherChoice is cipherChoice with --integrity: --key-size is the
// cipher key alone, as cryptsetup's, and the volume key adds the MAC key.
func authCipherChoice(spec string, bits int, integrity string) (int, error) {
	m, err := cipher.ParseAuth(spec, integrity)
	if err != nil {
		return 0, usagef("unsupported --cipher %s with integrity %s: use one of %s", spec, integrity, strings.Join(cipher.SupportedAuth(), "; "))
	}
	if bits == 0 {
		return m.DefaultCipherKeyBytes + m.MACKeyBytes, nil
	}
	if bits%8 != 0 || !m.ValidKey(bits/8+m.MACKeyBytes) {
		return 0, usagef("unsupported --key-size %d for %s: use %s (the MAC key is added)", bits, m.Name(), m.CipherKeyBits())
	}
	return bits/8 + m.MACKeyBytes, nil
}

// luksTypes are the --type values; pbkdfNames the --pbkdf values, the
// LUKS2 default first.
var (
	luksTypes  = []string{"luks1", "luks2"}
	pbkdfNames = []string{"argon2id", "argon2i", "pbkdf2"}
)
