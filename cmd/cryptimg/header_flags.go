package main

import (
	"fmt"
	"slices"
	"strconv"
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
	integrity     string
	noJournal     bool
}

func (l *luks2Options) addFlags(f *pflag.FlagSet) {
	f.StringVar(&l.luksType, "type", luksType(header.DefaultVersion), "LUKS version of the header: luks1 (read by qemu too) or luks2 (cryptsetup's default)")
	f.StringVar(&l.pbkdf, "pbkdf", "", pbkdfUsage)
	f.Uint32Var(&l.pbkdfMemory, "pbkdf-memory", 0, pbkdfMemoryUsage)
	f.Uint32Var(&l.pbkdfParallel, "pbkdf-parallel", 0, pbkdfParallelUsage)
	f.IntVar(&l.sectorSize, "sector-size", 0, fmt.Sprintf("LUKS2 encryption sector size: %s (default %d when the image is whole %[2]d-byte sectors)",
		orList(header.SectorSizes(2)), header.DefaultLUKS2Sector))
	f.StringVar(&l.label, "label", "", "LUKS2 label")
	f.StringVar(&l.subsystem, "subsystem", "", "LUKS2 subsystem")
	f.StringVar(&l.integrity, "integrity", "", "LUKS2 integrity protection: "+integrityChoices()+"; every sector gets a tag")
	f.BoolVar(&l.noJournal, "integrity-no-journal", false, "with --integrity: store the persistent no-journal flag, so the kernel opens the image without the integrity journal")
}

// checkPBKDF checks a --pbkdf value; "" is the version's default.
func checkPBKDF(name string) error {
	if name != "" && !slices.Contains(pbkdfNames(), name) {
		return usagef("unknown --pbkdf %q: use %s", name, strings.Join(pbkdfNames(), ", "))
	}
	return nil
}

// apply checks the flags against the version and sets them in p.
func (l luks2Options) apply(p *header.Params) error {
	switch l.luksType {
	case luksType(1):
		if l.pbkdf != "" && !slices.Contains(header.KDFs(1), l.pbkdf) || l.pbkdfMemory != 0 || l.pbkdfParallel != 0 || l.sectorSize != 0 && !slices.Contains(header.SectorSizes(1), l.sectorSize) || l.label != "" || l.subsystem != "" || l.integrity != "" || l.noJournal {
			return usagef("--pbkdf argon2, --pbkdf-memory, --pbkdf-parallel, --sector-size, --label, --subsystem and --integrity need --type luks2")
		}
		p.Version = 1
		return nil
	case luksType(2):
	default:
		return usagef("unknown --type %q: use %s", l.luksType, strings.Join(luksTypes(), " or "))
	}
	p.Version, p.PBKDF, p.PBKDFMemory, p.PBKDFParallel = 2, l.pbkdf, l.pbkdfMemory, l.pbkdfParallel
	p.SectorSize, p.Label, p.Subsystem = l.sectorSize, l.label, l.subsystem
	if err := checkPBKDF(l.pbkdf); err != nil {
		return err
	}
	if l.sectorSize != 0 && !slices.Contains(header.SectorSizes(2), l.sectorSize) {
		return usagef("--sector-size must be %s", orList(header.SectorSizes(2)))
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
	f.StringVarP(&o.cipher, "cipher", "c", "", "cipher specification: "+strings.Join(cipher.Supported(), ", ")+" (default: "+defaultCiphers()+")")
	f.IntVarP(&o.keySize, "key-size", "s", 0, "volume key size in bits, one the cipher takes (default: the cipher's, as cryptsetup's: "+defaultKeySizes()+")")
	f.StringVar(&o.hash, "hash", header.DefaultHash, "hash for PBKDF2 and the anti-forensic splitter: "+orList(header.Hashes()))
	f.IntVarP(&o.iterTime, "iter-time", "i", int(header.DefaultIterTime.Milliseconds()), "KDF time for the key slot, in milliseconds")
	f.Uint32Var(&o.forceIterations, "pbkdf-force-iterations", 0, forceIterationsUsage)
	f.StringVar(&o.uuid, "uuid", "", "UUID for the new header (default: random)")
	f.Uint32Var(&o.alignPayload, "align-payload", 0, fmt.Sprintf("align the payload to this many %d-byte sectors (default %d, %s)",
		header.SectorSize, header.DefaultAlignSectors, wholeBytes(header.DefaultAlignSectors*header.SectorSize)))
	f.BoolVarP(&o.force, "force", "f", false, "overwrite OUTPUT if it exists")
	f.BoolVar(&o.json, "json", false, "print a JSON summary on stdout")
	f.StringVarP(&o.outputFormat, "output-format", "O", "", "output format: raw or qcow2 (default: the input's)")
	f.Int64Var(&o.clusterSize, "cluster-size", 0, "cluster size of a qcow2 output in bytes (default 65536)")
}

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
	if err := o.luks2Options.apply(&p); err != nil {
		return p, err
	}
	p.Cipher = o.cipher
	if p.Cipher == "" {
		p.Cipher = header.DefaultCipher(p.Version)
	}
	keyBytes, err := cipherChoice(p.Cipher, o.keySize, p.Integrity)
	if err != nil {
		return header.Params{}, err
	}
	if err := checkHash(o.hash); err != nil {
		return header.Params{}, err
	}
	if o.iterTime <= 0 {
		return header.Params{}, usagef("--iter-time must be positive")
	}
	kdf := p.PBKDF
	if kdf == "" {
		kdf = header.KDFs(p.Version)[0]
	}
	if min := header.MinCost(kdf); o.forceIterations != 0 && o.forceIterations < min {
		return header.Params{}, usagef("--pbkdf-force-iterations must be at least %d for %s", min, kdf)
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

// luksType is the --type value of a LUKS version: "luks1", "luks2".
func luksType(version int) string { return "luks" + strconv.Itoa(version) }

// luksTypes are the --type values.
func luksTypes() []string {
	var s []string
	for _, v := range header.Versions() {
		s = append(s, luksType(v))
	}
	return s
}

// pbkdfNames are the --pbkdf values, the LUKS2 default first.
func pbkdfNames() []string { return header.KDFs(2) }

// checkHash checks a --hash value against the hashes a header takes.
func checkHash(name string) error {
	if !slices.Contains(header.Hashes(), name) {
		return usagef("unsupported --hash %q: use %s", name, orList(header.Hashes()))
	}
	return nil
}

// orList writes a list of choices as help and messages do: "a, b or c".
func orList[T any](s []T) string {
	t := make([]string, len(s))
	for i, v := range s {
		t[i] = fmt.Sprint(v)
	}
	if len(t) < 2 {
		return strings.Join(t, "")
	}
	return strings.Join(t[:len(t)-1], ", ") + " or " + t[len(t)-1]
}

// versionFacts writes one fact per LUKS version for help: f(1) for LUKS1,
// f(2) for LUKS2, "f1 for LUKS1, f2 for LUKS2".
func versionFacts(f func(version int) string) string {
	var s []string
	for _, v := range header.Versions() {
		s = append(s, f(v)+" for LUKS"+strconv.Itoa(v))
	}
	return strings.Join(s, ", ")
}

// defaultCiphers is the --cipher default of each version.
func defaultCiphers() string { return versionFacts(header.DefaultCipher) }

// defaultKeySizes is the default key size of each version's default
// cipher, in bits.
func defaultKeySizes() string {
	return versionFacts(func(v int) string {
		m, err := cipher.Parse(header.DefaultCipher(v))
		if err != nil {
			panic("the default cipher of LUKS" + strconv.Itoa(v) + " is not in the registry")
		}
		return strconv.Itoa(m.DefaultKeyBytes*8) + " (" + m.Spec() + ")"
	})
}

// slotRange is the key slot numbers of each version, "0-7 for LUKS1,
// 0-31 for LUKS2".
func slotRange() string {
	return versionFacts(func(v int) string { return "0-" + strconv.Itoa(header.SlotCount(v)-1) })
}

// sectorSizesHelp is the sector sizes of each version, for help:
// "512 bytes for LUKS1, 512, 1024, 2048 or 4096 for LUKS2".
var sectorSizesHelp = versionFacts(func(v int) string {
	s := orList(header.SectorSizes(v))
	if v == 1 {
		s += " bytes"
	}
	return s
})

// newHeaderHelp says what a new header is by default, for the root
// command's help.
func newHeaderHelp() string {
	c1, c2 := header.DefaultCipher(1), header.DefaultCipher(2)
	m1, _ := cipher.Parse(c1)
	m2, _ := cipher.Parse(c2)
	return fmt.Sprintf("LUKS%d with %s (%d-bit key), which qemu\nreads too, unless --type luks2 is given: LUKS2 gets %s (%d-bit\nkey), cryptsetup's default",
		header.DefaultVersion, c1, m1.DefaultKeyBytes*8, c2, m2.DefaultKeyBytes*8)
}

// integrityChoices lists the --integrity options with the ciphers each
// takes, from the registry: "aead (with aes-gcm-random) or hmac-sha256
// (with aes-cbc-essiv:sha256 or aes-xts-plain64)".
func integrityChoices() string {
	var s []string
	for _, opt := range cipher.IntegrityOptions() {
		var specs []string
		for _, m := range cipher.AuthModes() {
			if m.Option == opt {
				specs = append(specs, m.Spec)
			}
		}
		slices.Sort(specs)
		s = append(s, opt+" (with "+orList(specs)+")")
	}
	return orList(s)
}

// KDF flag help, shared by the commands that make a key slot.
var (
	pbkdfUsage = fmt.Sprintf("LUKS2 keyslot KDF: %s (default), %s (LUKS1: %s only)",
		header.KDFs(2)[0], orList(header.KDFs(2)[1:]), orList(header.KDFs(1)))
	pbkdfMemoryUsage = fmt.Sprintf("argon2 memory in KiB (default %s, at most half of the RAM)",
		wholeBytes(header.DefaultArgon2Memory<<10))
	pbkdfParallelUsage = fmt.Sprintf("argon2 threads (default up to %d, at most the CPUs)", header.MaxArgon2Threads)
)
