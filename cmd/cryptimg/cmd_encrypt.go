package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/cipher"
	"github.com/cryptimg/cryptimg/header/derive"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

type encryptOptions struct {
	key             keyOptions
	volumeKeyFile   string
	masterKeyFile   string
	cipher          string
	keySize         int
	hash            string
	iterTime        int
	forceIterations uint32
	uuid            string
	alignPayload    uint32
	force           bool
	json            bool
	outputFormat    string
	clusterSize     int64
	inPlace         bool
	resume          bool
	hotzone         int64
	luks2Options
}

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

// luksTypes are the --type values; pbkdfNames the --pbkdf values, the
// LUKS2 default first.
var (
	luksTypes  = []string{"luks1", "luks2"}
	pbkdfNames = []string{"argon2id", "argon2i", "pbkdf2"}
)

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

func newEncryptCommand(g *globalOptions) *cobra.Command {
	var o encryptOptions
	cmd := &cobra.Command{
		Use:   "encrypt [flags] INPUT OUTPUT",
		Short: "Encrypt a plaintext raw or qcow2 image into a LUKS1, LUKS2 or qcow2+LUKS image",
		Long: `Encrypt a plaintext raw or qcow2 disk image (detected by its magic).

A raw output is a LUKS1 image laid out exactly as "cryptsetup luksFormat
--type luks1" lays it out: key slot 0 holds the key, the payload starts at a
1 MiB boundary, and cryptsetup, dm-crypt and qemu open the result.

A qcow2 output is an encrypted qcow2 (encrypt.format=luks) that qemu boots:
the LUKS1 header lives in its own clusters, only clusters holding non-zero
data are stored, and each is encrypted with IV sector = host offset / 512.

The output format defaults to the input's. A raw INPUT must be a whole
number of 512-byte sectors. OUTPUT is written to a temporary file beside it
and renamed only when complete.
` + exitStatusHelp,
		Example: `  cryptimg encrypt --key-file key.bin disk.raw disk.luks
  cryptimg encrypt -d key.bin --progress json disk.raw disk.luks
  cryptimg encrypt -d key.bin vm.qcow2 vm-encrypted.qcow2
  cryptimg encrypt -d key.bin --output-format qcow2 disk.raw vm-encrypted.qcow2`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.cipherSet = cmd.Flags().Changed("cipher")
			if o.inPlace || o.resume {
				if len(args) != 1 {
					return usagef("--in-place takes one argument, IMAGE")
				}
				return runEncryptInPlace(cmd, g, o, args[0])
			}
			if len(args) != 2 {
				return usagef("encrypt takes INPUT and OUTPUT (or --in-place IMAGE)")
			}
			return runEncrypt(cmd, g, o, args[0], args[1])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	o.addHeaderFlags(f)
	f.BoolVar(&o.inPlace, "in-place", false, "encrypt the raw image IMAGE where it lies (crash-safe, resumable; see cryptimg reencrypt --help)")
	f.BoolVar(&o.resume, "resume", false, "with --in-place: only continue an interrupted run")
	f.Int64Var(&o.hotzone, "hotzone-size", 0, "with --in-place: bytes per crash-safe step (default 8 MiB, at most the payload offset)")
	return withPartitionEncrypt(cmd, g, &o)
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

// volumeKey reads --volume-key-file, if given: the raw volume key, exactly
// as long as the key size (cryptsetup luksFormat --volume-key-file).
func (o encryptOptions) volumeKey(g *globalOptions, keyBytes int) ([]byte, error) {
	if o.volumeKeyFile == "" {
		return nil, nil
	}
	if o.volumeKeyFile == "-" && o.key.keyFile == "-" {
		return nil, usagef("only one key can be read from stdin")
	}
	vk, err := readKeyFile(g, keyOptions{keyFile: o.volumeKeyFile})
	if err != nil {
		return nil, err
	}
	if len(vk) != keyBytes {
		clear(vk)
		return nil, usagef("--volume-key-file holds %d bytes; the %s key is %d bits (%d bytes)", len(vk), o.cipher, keyBytes*8, keyBytes)
	}
	return vk, nil
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

func runEncrypt(cmd *cobra.Command, g *globalOptions, o encryptOptions, in, out string) error {
	if in == stdio || out == stdio {
		return runEncryptStream(cmd, g, o, in, out)
	}
	params, err := o.params()
	if err != nil {
		return err
	}
	if err := checkOutputPath(in, out, o.force); err != nil {
		return err
	}
	if err := checkHeaderOutput(g.header, in, out, o.force); err != nil {
		return err
	}
	src, err := openSource(in)
	if err != nil {
		return err
	}
	defer src.Close()
	format, err := parseFormat(o.outputFormat)
	if err != nil {
		return err
	}
	plain, err := image.OpenPlain(src)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := refuseLUKS(src, in, o.force, "encrypting it would encrypt it twice; pass --force to do so"); err != nil {
		return err
	}
	if err := o.newVolumeKey(g, &params); err != nil {
		return err
	}
	defer clear(params.VolumeKey)
	key, err := readKey(g, o.key, "Enter passphrase for "+out+": ", true)
	if err != nil {
		return err
	}
	defer clear(key)

	dst, done, err := createOutput(g, out, o.force)
	if err != nil {
		return err
	}
	defer done()
	eo := image.EncryptOptions{
		Header:      params,
		Passphrase:  key,
		Format:      format,
		ClusterSize: o.clusterSize,
	}
	var hdr *image.Output
	if g.header != "" {
		if formatOr(format, plain.Format) != image.Raw {
			return usagef("--header makes a raw output only")
		}
		hd, hdone, err := createOutput(g, g.header, o.force)
		if err != nil {
			return err
		}
		defer hdone()
		hdr, eo.HeaderFile = hd, hd.File
	}
	prog := g.newProgress("encrypt")
	eo.Pipeline = g.pipeline(prog)
	start := time.Now()
	eo.HeaderMade = g.kdfDone(&start)
	h, err := image.Encrypt(cmd.Context(), dst.File, plain, eo)
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if err := commitOutputs(dst, hdr); err != nil {
		return err
	}
	return g.report(o.json, summary{
		Op: "encrypt", Input: in, Output: out, Format: string(formatOr(format, plain.Format)),
		Bytes: plain.Size, Seconds: time.Since(start).Seconds(),
		volumeJSON: volumeOf(h, 0),
	})
}

// summary is the result of encrypt or decrypt, printed as one line for
// people or as a JSON object on stdout with --json.
type summary struct {
	MessageType string  `json:"message_type"`
	Op          string  `json:"op"`
	Input       string  `json:"input"`
	Output      string  `json:"output"`
	Format      string  `json:"format"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`     // the data's, after the key derivation
	KDFSeconds  float64 `json:"kdf_seconds"` // the key derivation's: unlocking, or making the key slot
	volumeJSON
	// Corrupt lists the sectors that failed their integrity check
	// (decrypt --allow-corrupt).
	Corrupt *corruptJSON `json:"corrupt,omitempty"`
}

// volumeJSON is what a summary says of the header: cipher, key, UUID, the
// slot used and the payload offset in 512-byte sectors.
type volumeJSON struct {
	Cipher        string `json:"cipher"`
	KeyBits       int    `json:"key_bits"`
	Hash          string `json:"hash"`
	UUID          string `json:"uuid"`
	KeySlot       int    `json:"key_slot"`
	PayloadOffset int64  `json:"payload_offset"`
	Integrity     string `json:"integrity,omitempty"`
}

func volumeOf(h header.Header, slot int) volumeJSON {
	i := h.Info()
	return volumeJSON{Cipher: i.Cipher, KeyBits: i.KeyBytes * 8, Hash: i.Hash, UUID: i.UUID,
		KeySlot: slot, PayloadOffset: i.PayloadOffset / image.SectorSize, Integrity: i.Integrity}
}

// outputFormats are the --output-format values.
var outputFormats = []string{string(image.Raw), string(image.Qcow2)}

// parseFormat checks an --output-format value; "" means the input's.
func parseFormat(s string) (image.Format, error) {
	if s == "" || slices.Contains(outputFormats, s) {
		return image.Format(s), nil
	}
	return "", usagef("unknown --output-format %q: use %s", s, strings.Join(outputFormats, " or "))
}

func formatOr(f, def image.Format) image.Format {
	if f == "" {
		return def
	}
	return f
}

// kdfDone returns a HeaderMade hook for an operation that started at
// *start: the time up to the call goes to g.kdf, and *start moves to the
// call, where the data's time starts.
func (g *globalOptions) kdfDone(start *time.Time) func() {
	return func() {
		now := time.Now()
		g.kdf += now.Sub(*start)
		*start = now
	}
}

func (g *globalOptions) report(asJSON bool, s summary) error {
	s.MessageType = "summary"
	s.KDFSeconds = g.kdf.Seconds()
	if asJSON {
		return json.NewEncoder(g.stdout).Encode(s)
	}
	if g.quiet {
		return nil
	}
	verb := map[string]string{"encrypt": "encrypted", "decrypt": "decrypted"}[s.Op]
	fmt.Fprintf(g.stderr, "cryptimg: %s %s to %s (%s, %s, %d-bit key, key slot %d) in %.2fs, plus %.2fs of key derivation\n",
		verb, inName(s.Input), outName(s.Output), humanBytes(s.Bytes), s.Cipher, s.KeyBits, s.KeySlot, s.Seconds, s.KDFSeconds)
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
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

// refuseLUKS refuses an input that already starts with a LUKS header,
// unless forced: encrypting it again is almost always a mistake, such as a
// pipeline step retried after it had succeeded.
func refuseLUKS(f io.ReaderAt, name string, force bool, why string) error {
	if force || !looksLUKS(f) {
		return nil
	}
	return usagef("%s is already a LUKS image: %s", name, why)
}

// looksLUKS reports whether f starts with a LUKS magic, or holds a LUKS2
// header whose primary copy is lost but whose secondary copy header.Read
// finds (encrypting that would bury a header that repair could restore).
func looksLUKS(f io.ReaderAt) bool {
	var magic [6]byte
	if _, err := f.ReadAt(magic[:], 0); err == nil && header.IsLUKSMagic(magic[:]) {
		return true
	}
	_, err := header.Read(f, 0, math.MaxInt64)
	return err == nil || errors.Is(err, header.ErrMarked)
}

// newVolumeKey sets the volume key of a new header from --volume-key-file
// or --master-key-file (with the UUID it is derived for); neither leaves
// it random.
func (o encryptOptions) newVolumeKey(g *globalOptions, p *header.Params) error {
	if o.masterKeyFile == "" {
		vk, err := o.volumeKey(g, p.KeyBytes)
		p.VolumeKey = vk
		return err
	}
	if o.volumeKeyFile != "" {
		return usagef("--master-key-file and --volume-key-file exclude each other")
	}
	if o.masterKeyFile == "-" && o.key.keyFile == "-" {
		return usagef("only one key can be read from stdin")
	}
	if p.UUID == "" {
		u, err := header.RandomUUID(nil)
		if err != nil {
			return err
		}
		p.UUID = u
	}
	vk, err := deriveVolumeKey(g, o.masterKeyFile, p.UUID, p.KeyBytes)
	p.VolumeKey = vk
	return err
}

// deriveVolumeKey reads the master secret in file and derives the volume
// key of keyBytes for uuid (package derive).
func deriveVolumeKey(g *globalOptions, file, uuid string, keyBytes int) ([]byte, error) {
	u, err := header.CanonicalUUID(uuid)
	if err != nil {
		return nil, err
	}
	m, err := readMaster(g, file)
	if err != nil {
		return nil, err
	}
	defer m.Clear()
	return m.VolumeKey(u, keyBytes)
}

// readMaster reads the master secret of --master-key-file; the caller
// clears the Master.
func readMaster(g *globalOptions, file string) (*derive.Master, error) {
	mk, err := readKeyFile(g, keyOptions{keyFile: file})
	if err != nil {
		return nil, err
	}
	defer clear(mk)
	m, err := derive.New(mk)
	if err != nil {
		return nil, usagef("--master-key-file: %v", err)
	}
	return m, nil
}

// checkHeaderOutput refuses a --header file that is the input or the
// output, before any secret is asked for: renamed into place after the
// data, the header would replace the ciphertext (or the input).
func checkHeaderOutput(hdr, in, out string, force bool) error {
	if hdr == "" {
		return nil
	}
	for _, p := range []string{in, out} {
		if samePath(hdr, p) {
			return usagef("--header %s: %v", hdr, image.ErrSameFile)
		}
	}
	if err := image.CheckOutputPath(hdr, force); err != nil {
		return usagef("--header: %w", err)
	}
	return nil
}

// samePath reports whether two paths name the same file, existing or
// not (yet).
func samePath(a, b string) bool {
	if image.SameFile(a, b) {
		return true
	}
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	return err1 == nil && err2 == nil && aa == ab
}
