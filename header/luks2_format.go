package header

// Making LUKS2 headers as cryptsetup 2.6.1's luksFormat --type luks2 makes
// them on a file (lib/luks2/luks2_json_format.c LUKS2_generate_hdr,
// LUKS2_hdr_get_storage_params; lib/utils_pbkdf.c).

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// cryptsetup's LUKS2 defaults for a file.
const (
	luks2HdrSize      = 0x4000                           // metadata per copy: 16 KiB
	luks2DataOffset   = 16 << 20                         // LUKS2_DEFAULT_HDR_SIZE
	luks2KeyslotsSize = luks2DataOffset - 2*luks2HdrSize // 16744448
	argon2BenchMinMem = 64 << 10                         // KiB
)

// formatLUKS2 makes a LUKS2 header with passphrase in keyslot 0: one crypt
// segment at 16 MiB to the end of the device, keyslot 0's area at 32 KiB,
// a pbkdf2 digest worth 125 ms (1000 iterations when forced), the keyslot
// KDF of p, and both metadata copies. area holds the first bytes of the
// 16 MiB header area, up to the end of keyslot 0's material (page
// aligned): the two copies and the key material; the rest of the area is
// zeros, which are not allocated (FormatSparse).
func formatLUKS2(passphrase []byte, p Params) (Header, []byte, []byte, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, nil, nil, err
	}
	if p.SectorSize == 0 {
		p.SectorSize = DefaultLUKS2Sector
	}
	if !cipher.ValidSectorSize(p.SectorSize) {
		return nil, nil, nil, fmt.Errorf("invalid sector size %d (want %s)", p.SectorSize, cipher.SectorSizesText())
	}
	for _, f := range []struct{ v, name string }{{p.Label, "label"}, {p.Subsystem, "subsystem"}} {
		if len(f.v) >= l2LabelSize || strings.IndexByte(f.v, 0) >= 0 {
			return nil, nil, nil, fmt.Errorf("%s %q is longer than %d bytes or holds a NUL", f.name, f.v, l2LabelSize-1)
		}
	}
	kdf, err := p.luks2KDF()
	if err != nil {
		return nil, nil, nil, err
	}
	uuid := p.UUID
	if uuid == "" {
		if uuid, err = randomUUID(p.Rand); err != nil {
			return nil, nil, nil, err
		}
	}
	vk := make([]byte, p.KeyBytes)
	if p.VolumeKey != nil {
		copy(vk, p.VolumeKey)
	} else if _, err := io.ReadFull(p.Rand, vk); err != nil {
		return nil, nil, nil, fmt.Errorf("reading random volume key: %w", err)
	}
	fail := func(err error) (Header, []byte, []byte, error) {
		clear(vk)
		return nil, nil, nil, err
	}

	d, err := newDigest(p, vk, []string{"0"}, "0")
	if err != nil {
		return fail(err)
	}

	spec, areaKey := keyslotCipher(p.Cipher, p.Integrity != "", p.KeyBytes)
	k, err := newKeyslot(p.KeyBytes, p.Hash, spec, areaKey, 2*luks2HdrSize, kdf, p.Rand)
	if err != nil {
		return fail(err)
	}
	material, err := k.seal(passphrase, vk, p.Rand)
	if err != nil {
		return fail(err)
	}
	defer clear(material)

	dataOffset := u64s(luks2DataOffset)
	if p.Detached {
		dataOffset = 0
	}
	h := &LUKS2{
		bin:      &luks2Bin{HdrSize: luks2HdrSize, SeqID: 1, Label: p.Label, CsumAlg: "sha256", UUID: uuid, Subsystem: p.Subsystem},
		Keyslots: map[int]*Keyslot{0: k},
		Segments: map[int]*Segment{0: {Type: "crypt", Offset: dataOffset, Size: "dynamic", Encryption: p.Cipher, SectorSize: p.SectorSize}},
		Digests:  map[int]*Digest{0: d},
		Tokens:   map[int]*Token{},
		Config:   Config{JSONSize: luks2HdrSize - luks2BinSize, KeyslotsSize: luks2KeyslotsSize},
	}
	if p.Integrity != "" {
		h.Segments[0].Integrity, h.Segments[0].integrity = segmentIntegrity(p.Integrity)
	}
	if p.NoJournal {
		if p.Integrity == "" {
			return fail(errors.New("no-journal applies to integrity-protected segments only"))
		}
		h.Config.Flags = []string{"no-journal"}
	}
	meta, err := h.marshalCopies(p.Rand)
	if err != nil {
		return fail(err)
	}
	area := make([]byte, roundUp(uint64(k.Area.Offset)+uint64(len(material)), 4096))
	copy(area, meta)
	copy(area[k.Area.Offset:], material)
	// The header is what a reader makes of these bytes, zeros after them:
	// the writer is checked against the validator on every format.
	got, err := readLUKS2(zeroTail{area}, 0, luks2DataOffset)
	if err != nil {
		return fail(fmt.Errorf("header: internal error: the LUKS2 header made does not read back: %w", err))
	}
	return got, vk, area, nil
}

// newDigest is the pbkdf2 digest of vk for keyslots and segment, worth
// 125 ms (MinIterations when p forces iterations), as cryptsetup makes it.
// p has its defaults.
func newDigest(p Params, vk []byte, keyslots []string, segment string) (*Digest, error) {
	d := &Digest{Type: "pbkdf2", Keyslots: keyslots, Segments: []string{segment}, Hash: p.Hash,
		Iterations: MinIterations, Salt: make([]byte, 32)}
	var err error
	if p.ForceIterations == 0 {
		if d.Iterations, _, err = SlotIterations(p.Hash, p.KeyBytes, mkDigestTime); err != nil {
			return nil, err
		}
	}
	if _, err := io.ReadFull(p.Rand, d.Salt); err != nil {
		return nil, err
	}
	hf, _ := hashFunc(p.Hash) // withDefaults checked it
	if d.Digest, err = deriveKey(p.Hash, vk, d.Salt, d.Iterations, hf().Size()); err != nil {
		return nil, err
	}
	return d, nil
}

// luks2KDF returns the keyslot KDF of p: forced, or benchmarked for
// p.IterTime as cryptsetup does.
func (p Params) luks2KDF() (KDF, error) {
	return luks2KDF(KDFOptions{IterTime: p.IterTime, Force: p.ForceIterations, PBKDF: p.PBKDF,
		Memory: p.PBKDFMemory, Parallel: p.PBKDFParallel}, p.Hash, p.KeyBytes)
}

// luks2KDF is the KDF of a new LUKS2 keyslot for a keyBytes-long key.
func luks2KDF(o KDFOptions, hash string, keyBytes int) (KDF, error) {
	if o.IterTime == 0 {
		o.IterTime = DefaultIterTime
	}
	kind := o.PBKDF
	if kind == "" {
		kind = KDFs(2)[0]
	}
	switch kind {
	case "pbkdf2":
		// cryptsetup ignores --pbkdf-memory and --pbkdf-parallel here.
		c := KDF{Type: kind, Hash: hash, Iterations: o.Force}
		if c.Iterations == 0 {
			it, _, err := SlotIterations(hash, keyBytes, o.IterTime)
			if err != nil {
				return c, err
			}
			c.Iterations = it
		}
		if c.Iterations < MinIterations {
			return c, fmt.Errorf("forced iterations %d below the minimum %d", c.Iterations, MinIterations)
		}
		return c, nil
	case "argon2i", "argon2id":
	default:
		return KDF{}, fmt.Errorf("unsupported pbkdf %q (want %s)", kind, strings.Join(KDFs(2), ", "))
	}
	mem := o.Memory
	if mem == 0 {
		mem = min(DefaultArgon2Memory, halfRAM())
	}
	if mem < 32 || mem > argon2MaxMemory {
		return KDF{}, fmt.Errorf("argon2 memory %d KiB out of range (32 to %d)", mem, argon2MaxMemory)
	}
	threads := o.Parallel
	if threads == 0 {
		threads = uint32(min(MaxArgon2Threads, runtime.NumCPU()))
	}
	if threads < 1 || threads > MaxArgon2Threads {
		return KDF{}, fmt.Errorf("argon2 parallel %d out of range (1 to %d)", threads, MaxArgon2Threads)
	}
	c := KDF{Type: kind, Time: o.Force, Memory: mem, CPUs: threads}
	if c.Time != 0 {
		if c.Time < MinArgon2Time {
			return c, fmt.Errorf("argon2 time cost %d below the minimum %d", c.Time, MinArgon2Time)
		}
		return c, nil
	}
	c.Time, c.Memory = benchmarkArgon2(kind, mem, threads, keyBytes, o.IterTime)
	return c, nil
}

// benchmarkArgon2 returns argon2's time cost and memory for iterTime, by
// cryptsetup's rule: at least 4 passes; when 4 passes over the memory asked
// for take longer, the memory shrinks (not below 64 MiB), otherwise the
// passes grow. A one-pass run over up to 64 MiB gives a first guess; then,
// as cryptsetup's benchmark does, runs of the candidate itself correct it
// until one lands within 10% of iterTime (at most four): small runs
// misjudge large memory, where the caches and the TLB stop helping and
// fresh pages cost their faults.
func benchmarkArgon2(kind string, mem, threads uint32, keyBytes int, iterTime time.Duration) (t, m uint32) {
	timed := func(passes, m uint32) float64 {
		start := time.Now() // with readying the memory, as an unlock does
		clear(argon2Key(kind, []byte("foobarfo"), make([]byte, 32), passes, m, threads, uint32(keyBytes)))
		return max(time.Since(start).Seconds(), 1e-6)
	}
	target := iterTime.Seconds()
	probe := min(mem, argon2BenchMinMem)
	perKiB := timed(1, probe) / float64(probe) // per KiB and pass, first pass included
	t, m = MinArgon2Time, mem
	if est := perKiB * float64(m) * MinArgon2Time; est > target {
		m = uint32(target / (perKiB * MinArgon2Time))
	} else {
		t = uint32(min(target/(perKiB*float64(m)), 1<<31))
	}
	floor := min(mem, argon2BenchMinMem)
	m = min(mem, max(m, floor))
	for range 4 {
		d := timed(t, m)
		if d > 0.9*target && d < 1.1*target {
			break
		}
		scale := target / d
		if m < mem || scale < 1 && t == MinArgon2Time {
			// Memory is what gives: scale it, then the passes if it is
			// at its cap.
			m = uint32(min(float64(mem), max(float64(floor), float64(m)*scale)))
			if m == mem && scale > 1 {
				t = uint32(min(float64(t)*scale, 1<<31))
			}
		} else {
			t = uint32(min(max(float64(t)*scale, MinArgon2Time), 1<<31))
		}
	}
	return t, m
}

// halfRAM is half of MemTotal in KiB, or the argon2 default if unknown.
func halfRAM() uint32 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return DefaultArgon2Memory
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			if kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
				return uint32(min(kb/2, argon2MaxMemory))
			}
		}
	}
	return DefaultArgon2Memory
}

// seal AF-splits vk and encrypts it under the keyslot's KDF of passphrase
// with the area cipher (512-byte sectors, IV sector 0 at the area start).
func (k *Keyslot) seal(passphrase, vk []byte, rnd io.Reader) ([]byte, error) {
	material, err := AFSplit(vk, Stripes, k.AF.Hash, rnd)
	if err != nil {
		return nil, err
	}
	dk, err := k.derive(passphrase)
	if err == nil {
		err = cryptMaterial(k.Area.Encryption, dk, material, true)
	}
	if err != nil {
		clear(material)
		return nil, err
	}
	return material, nil
}

// keyslotAreaSize is the area of a keyslot for a keyBytes volume key: its
// key material rounded up to 4096 bytes (cryptsetup).
func keyslotAreaSize(keyBytes int) uint64 { return roundUp(uint64(keyBytes)*Stripes, 4096) }

// newKeyslot is a luks2 keyslot for a keyBytes volume key: 4000 AF stripes
// with afHash, its area at off, encrypted with spec and an areaKeyBytes key, and kdf with a random
// 32-byte salt from rnd (a pbkdf2 kdf without a hash takes afHash).
func newKeyslot(keyBytes int, afHash, spec string, areaKeyBytes int, off uint64, kdf KDF, rnd io.Reader) (*Keyslot, error) {
	k := &Keyslot{Type: "luks2", KeySize: keyBytes}
	k.AF.Type, k.AF.Stripes, k.AF.Hash = "luks1", Stripes, afHash
	k.Area.Type, k.Area.Offset, k.Area.Size = "raw", u64s(off), u64s(keyslotAreaSize(keyBytes))
	k.Area.Encryption, k.Area.KeySize = spec, areaKeyBytes
	k.KDF.Type = kdf.Type
	switch kdf.Type {
	case "pbkdf2":
		k.KDF.Hash, k.KDF.Iterations = cmp.Or(kdf.Hash, afHash), kdf.Iterations
	case "argon2i", "argon2id":
		k.KDF.Time, k.KDF.Memory, k.KDF.CPUs = kdf.Time, kdf.Memory, kdf.CPUs
	default:
		return nil, fmt.Errorf("unsupported pbkdf %q", kdf.Type)
	}
	k.KDF.Salt = make([]byte, 32)
	if _, err := io.ReadFull(randReader(rnd), k.KDF.Salt); err != nil {
		return nil, err
	}
	return k, nil
}

// kdf is the keyslot's KDF and cost.
func (k *Keyslot) kdf() KDF {
	return KDF{Type: k.KDF.Type, Hash: k.KDF.Hash, Iterations: k.KDF.Iterations, Time: k.KDF.Time, Memory: k.KDF.Memory, CPUs: k.KDF.CPUs}
}

// marshalJSON is the metadata as one JSON object, the sections in
// cryptsetup's order.
func (h *LUKS2) marshalJSON() ([]byte, error) {
	top := maps.Clone(h.extra)
	if top == nil {
		top = map[string]json.RawMessage{}
	}
	var err error
	if top["keyslots"], err = section(h.Keyslots, func(k *Keyslot) (json.RawMessage, error) { return overlay(k.rawObject, k) }); err != nil {
		return nil, err
	}
	if top["tokens"], err = section(h.Tokens, func(t *Token) (json.RawMessage, error) { return t.Raw, nil }); err != nil {
		return nil, err
	}
	if top["segments"], err = section(h.Segments, func(s *Segment) (json.RawMessage, error) { return overlay(s.rawObject, s) }); err != nil {
		return nil, err
	}
	if top["digests"], err = section(h.Digests, func(d *Digest) (json.RawMessage, error) { return overlay(d.rawObject, d) }); err != nil {
		return nil, err
	}
	if top["config"], err = overlay(h.Config.rawObject, &h.Config); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

// section is one section of the metadata: each object as enc writes it,
// under its number.
func section[T any](objs map[int]T, enc func(T) (json.RawMessage, error)) (json.RawMessage, error) {
	m := map[string]json.RawMessage{}
	for n, o := range objs {
		b, err := enc(o)
		if err != nil {
			return nil, err
		}
		m[strconv.Itoa(n)] = b
	}
	return json.Marshal(m)
}

// marshalCopies returns both metadata copies, 2*HdrSize bytes: each binary
// header with its own random salt and checksum over itself and the JSON
// area.
func (h *LUKS2) marshalCopies(rnd io.Reader) ([]byte, error) {
	js, err := h.marshalJSON()
	if err != nil {
		return nil, err
	}
	hdr := h.bin.HdrSize
	if int64(len(js)) >= hdr-luks2BinSize {
		return nil, fmt.Errorf("LUKS2 metadata of %d bytes does not fit in %d", len(js), hdr-luks2BinSize)
	}
	out := make([]byte, 2*hdr)
	for i, off := range []int64{0, hdr} {
		b := out[off : off+hdr]
		if i == 0 {
			copy(b, magic[:])
		} else {
			copy(b, secondaryMagic[:])
		}
		be := binary.BigEndian
		be.PutUint16(b[l2OffVersion:], 2)
		be.PutUint64(b[l2OffHdrSize:], uint64(hdr))
		be.PutUint64(b[l2OffSeqID:], h.bin.SeqID)
		copy(b[l2OffLabel:l2OffLabel+l2LabelSize-1], h.bin.Label)
		copy(b[l2OffCsumAlg:], h.bin.CsumAlg)
		if _, err := io.ReadFull(randReader(rnd), b[l2OffSalt:l2OffSalt+l2SaltSize]); err != nil {
			return nil, err
		}
		copy(b[l2OffUUID:l2OffUUID+l2UUIDSize-1], h.bin.UUID)
		copy(b[l2OffSubsystem:l2OffSubsystem+l2SubsystemSize-1], h.bin.Subsystem)
		be.PutUint64(b[l2OffHdrOffset:], uint64(off))
		copy(b[luks2BinSize:], js)
		hf, err := hashFunc(h.bin.CsumAlg)
		if err != nil {
			return nil, err
		}
		sum := hf()
		sum.Write(b)
		copy(b[l2OffCsum:], sum.Sum(nil))
	}
	return out, nil
}

// zeroTail reads as its bytes followed by zeros.
type zeroTail struct{ b []byte }

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	if off < int64(len(z.b)) {
		n = copy(p, z.b[off:])
	}
	clear(p[n:])
	return len(p), nil
}
