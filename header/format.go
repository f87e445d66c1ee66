package header

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header/cipher"
)

// mkDigestTime is cryptsetup's LUKS_MKD_ITERATIONS_MS: the master key digest
// gets about this much PBKDF2 time.
const mkDigestTime = 125 * time.Millisecond

// Params are the choices of Format. The zero value gives a LUKS1 header
// with the defaults in policy.go: cryptsetup's, with DefaultCipher(1).
type Params struct {
	Cipher   string // cryptsetup specification, default DefaultCipher(Version); any package cipher supports
	Hash     string // one of Hashes, default DefaultHash; stored lower-case
	KeyBytes int    // volume key size, one the cipher takes; default the cipher's (cryptsetup's)

	// VolumeKey, if set, is the volume key to use instead of a random one
	// (cryptsetup's --volume-key-file); its length sets KeyBytes. Format
	// copies it.
	VolumeKey []byte

	// IterTime is the PBKDF2 time for a key slot; the master key digest gets
	// 125 ms worth. Default 2 s.
	IterTime time.Duration

	// ForceIterations, when not zero, skips the benchmark: the slot gets
	// exactly this many iterations (at least MinIterations) and the master
	// key digest MinIterations, as with cryptsetup --pbkdf-force-iterations.
	ForceIterations uint32

	// UUID is the header UUID; "" means a random version 4 UUID. It must be
	// in xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx form and is stored lower-case.
	UUID string

	// AlignSectors aligns the payload offset; 0 means 2048 (1 MiB), as
	// cryptsetup does for a file. 8 gives qemu-img's layout, where the
	// payload starts right after the last key slot (rounded to 4096 bytes).
	AlignSectors uint32

	// Rand is the source of the volume key, salts, UUID and AF stripes;
	// nil means crypto/rand.
	Rand io.Reader

	// Detached makes a detached header (cryptsetup luksFormat --header):
	// the data starts at offset 0 of another file, so the payload offset
	// is 0 and the area returned is just the header and key slots (LUKS1:
	// up to the end of the last key slot; LUKS2: 16 MiB), the header
	// file's content.
	Detached bool

	// Version is the LUKS version to format: 1 (the default) or 2.
	Version int
	// The rest applies to LUKS2 only (see luks2_format.go).
	//
	// PBKDF is the keyslot KDF, one of KDFs(2), the first by default. PBKDFMemory (KiB) and PBKDFParallel are argon2's memory
	// and threads: by default 1 GiB, at most half of the RAM, and up to 4
	// threads, at most the CPUs. ForceIterations is argon2's time cost.
	PBKDF         string
	PBKDFMemory   uint32
	PBKDFParallel uint32
	// SectorSize is the encryption sector size, one of SectorSizes(2); 0
	// means DefaultLUKS2Sector, cryptsetup's choice for a file.
	SectorSize int
	// Label and Subsystem go into the binary header (at most 47 bytes).
	Label, Subsystem string
	// Integrity, when set, makes an authenticated segment (cryptsetup
	// luksFormat --integrity): the LUKS2 integrity type of a
	// cipher.AuthMode with Cipher, "hmac(sha256)" or "aead". KeyBytes is
	// then the whole volume key, the cipher key and the MAC key; its
	// default is the mode's. The data is a dm-integrity device (package
	// image/integrity), which the caller writes.
	Integrity string
	// NoJournal stores the persistent flag "no-journal" (cryptsetup open
	// --integrity-no-journal --persistent): the kernel then activates the
	// integrity layer without its journal.
	NoJournal bool
}

func randReader(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}

// withDefaults fills the zero fields and checks the result.
func (p Params) withDefaults() (Params, error) {
	if p.Cipher == "" {
		p.Cipher = DefaultCipher(p.Version)
	}
	var m *cipher.Mode
	if p.Integrity == "" {
		var err error
		if m, err = cipher.Parse(p.Cipher); err != nil {
			return p, &UnsupportedCipherError{Spec: p.Cipher}
		}
	}
	if p.Hash == "" {
		p.Hash = DefaultHash
	}
	p.Hash = strings.ToLower(p.Hash)
	if _, err := hashFunc(p.Hash); err != nil {
		return p, err
	}
	if p.VolumeKey != nil {
		if p.KeyBytes != 0 && p.KeyBytes != len(p.VolumeKey) {
			return p, fmt.Errorf("volume key is %d bits, key size %d bits asked", len(p.VolumeKey)*8, p.KeyBytes*8)
		}
		p.KeyBytes = len(p.VolumeKey)
	}
	if p.Integrity != "" {
		if err := p.integrityParams(); err != nil {
			return p, err
		}
	} else {
		if p.KeyBytes == 0 {
			p.KeyBytes = m.DefaultKeyBytes
		}
		if !m.ValidKey(p.KeyBytes) {
			return p, &cipher.KeySizeError{Mode: m, Size: p.KeyBytes}
		}
	}
	if p.IterTime == 0 {
		p.IterTime = DefaultIterTime
	}
	if p.IterTime < 0 {
		return p, fmt.Errorf("negative iteration time %v", p.IterTime)
	}
	if p.UUID != "" {
		u, err := CanonicalUUID(p.UUID)
		if err != nil {
			return p, err
		}
		p.UUID = u
	}
	if p.AlignSectors == 0 {
		p.AlignSectors = DefaultAlignSectors
	}
	p.Rand = randReader(p.Rand)
	return p, nil
}

// CanonicalUUID checks s the way libuuid's uuid_parse does and returns it
// lower-case, as uuid_unparse writes it; anything else is ErrInvalidUUID.
func CanonicalUUID(s string) (string, error) {
	if len(s) != 36 {
		return "", ErrInvalidUUID
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", ErrInvalidUUID
			}
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", ErrInvalidUUID
		}
	}
	return strings.ToLower(s), nil
}

// RandomUUID is a random version 4 UUID from rnd (nil: crypto/rand), in
// the canonical lower-case form.
func RandomUUID(rnd io.Reader) (string, error) { return randomUUID(randReader(rnd)) }

func randomUUID(rnd io.Reader) (string, error) {
	var u [16]byte
	if _, err := io.ReadFull(rnd, u[:]); err != nil {
		return "", fmt.Errorf("reading random UUID: %w", err)
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	x := hex.EncodeToString(u[:])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:], nil
}

// Format makes a new header and a random volume key (or p.VolumeKey), and
// puts passphrase into key slot 0. area is the complete header area, up to
// the payload (or, detached, the end of the key material): for LUKS1 the
// phdr, zeros, slot 0's key material, random bytes in the other slots'
// areas (as cryptsetup's wipe leaves them) and zeros up to the payload; for
// LUKS2 the 16 MiB of both metadata copies, the key material and zeros.
// The caller owns volumeKey and should clear it after use.
func Format(passphrase []byte, p Params) (h Header, volumeKey []byte, area []byte, err error) {
	h, volumeKey, area, size, err := FormatSparse(passphrase, p)
	if err != nil || int64(len(area)) == size {
		return h, volumeKey, area, err
	}
	full := make([]byte, size)
	copy(full, area)
	clear(area)
	return h, volumeKey, full, nil
}

// FormatSparse is Format with the area's trailing zeros left out: area
// holds the first len(area) of the area's size bytes, and the rest are
// zeros. A LUKS2 area is 16 MiB, of which its metadata and key material
// fill about 300 KiB; a writer of a new file can leave the rest as a hole
// and need not allocate it.
func FormatSparse(passphrase []byte, p Params) (h Header, volumeKey []byte, area []byte, size int64, err error) {
	switch p.Version {
	case 0, 1:
		if p.PBKDF != "" && p.PBKDF != PBKDF2 || p.SectorSize != 0 && p.SectorSize != SectorSize || p.Label != "" || p.Subsystem != "" {
			return nil, nil, nil, 0, fmt.Errorf("LUKS1 has only pbkdf2, 512-byte sectors and no label or subsystem")
		}
		h, volumeKey, area, err = formatLUKS1(passphrase, p)
		return h, volumeKey, area, int64(len(area)), err
	case 2:
		h, volumeKey, area, err = formatLUKS2(passphrase, p)
		return h, volumeKey, area, luks2DataOffset, err
	}
	return nil, nil, nil, 0, fmt.Errorf("unsupported LUKS version %d", p.Version)
}

func formatLUKS1(passphrase []byte, p Params) (h *LUKS1, volumeKey []byte, area []byte, err error) {
	p, err = p.withDefaults()
	if err != nil {
		return nil, nil, nil, err
	}
	// LUKS2 checks its forced cost with the rest of its KDF (luks2KDF).
	if p.ForceIterations != 0 && p.ForceIterations < MinIterations {
		return nil, nil, nil, fmt.Errorf("forced iterations %d below the minimum %d", p.ForceIterations, MinIterations)
	}
	slotIter, digestIter := p.ForceIterations, uint32(MinIterations)
	if p.ForceIterations == 0 {
		slotIter, digestIter, err = SlotIterations(p.Hash, p.KeyBytes, p.IterTime)
		if err != nil {
			return nil, nil, nil, err
		}
	}

	offsets, end := slotLayout(p.KeyBytes)
	payload := roundUp(end, uint64(p.AlignSectors))
	areaSectors := payload
	if p.Detached {
		payload, areaSectors = 0, end
	}
	if payload > math.MaxUint32 {
		return nil, nil, nil, fmt.Errorf("payload offset %d sectors does not fit in 32 bits", payload)
	}
	m, _ := cipher.Parse(p.Cipher) // withDefaults checked it
	h = &LUKS1{
		Version:       1,
		CipherName:    m.Name,
		CipherMode:    m.Mode,
		HashSpec:      p.Hash,
		PayloadOffset: uint32(payload),
		KeyBytes:      uint32(p.KeyBytes),
		MKDigestIter:  digestIter,
		UUID:          p.UUID,
	}
	for i := range h.Slots {
		h.Slots[i] = KeySlot{State: SlotDisabled, KeyMaterialOffset: offsets[i], Stripes: Stripes}
	}
	if h.UUID == "" {
		if h.UUID, err = randomUUID(p.Rand); err != nil {
			return nil, nil, nil, err
		}
	}

	volumeKey = make([]byte, p.KeyBytes)
	if p.VolumeKey != nil {
		copy(volumeKey, p.VolumeKey)
	} else if _, err := io.ReadFull(p.Rand, volumeKey); err != nil {
		return nil, nil, nil, fmt.Errorf("reading random volume key: %w", err)
	}
	fail := func(err error) (*LUKS1, []byte, []byte, error) {
		clear(volumeKey)
		return nil, nil, nil, err
	}
	if _, err := io.ReadFull(p.Rand, h.MKDigestSalt[:]); err != nil {
		return fail(fmt.Errorf("reading random salt: %w", err))
	}
	digest, err := deriveKey(h.HashSpec, volumeKey, h.MKDigestSalt[:], h.MKDigestIter, DigestSize)
	if err != nil {
		return fail(err)
	}
	copy(h.MKDigest[:], digest)

	area = make([]byte, areaSectors*SectorSize)
	slotBytes := h.KeyMaterialSectors() * SectorSize
	for i := 1; i < NumSlots; i++ {
		off := int(offsets[i]) * SectorSize
		if _, err := io.ReadFull(p.Rand, area[off:off+slotBytes]); err != nil {
			return fail(fmt.Errorf("reading random slot fill: %w", err))
		}
	}
	material, err := h.setKeySlot(0, passphrase, volumeKey, slotIter, p.Rand, false)
	if err != nil {
		return fail(err)
	}
	copy(area[int(offsets[0])*SectorSize:], material)
	clear(material)
	copy(area, h.Marshal())
	return h, volumeKey, area, nil
}

// SlotIterations measures PBKDF2 with hash and a keyBytes-long output (as
// cryptsetup benchmarks with the volume key size) and returns the iterations
// for a key slot that take iterTime, and for the master key digest that take
// 125 ms, each at least MinIterations. The measurement takes about 250 ms.
func SlotIterations(hash string, keyBytes int, iterTime time.Duration) (slotIter, digestIter uint32, err error) {
	if iterTime <= 0 {
		return 0, 0, fmt.Errorf("iteration time %v is not positive", iterTime)
	}
	if keyBytes <= 0 || keyBytes > MaxKeyBytes {
		return 0, 0, fmt.Errorf("invalid key size %d", keyBytes)
	}
	perSec, err := benchmarkPBKDF2(hash, keyBytes, 250*time.Millisecond)
	if err != nil {
		return 0, 0, err
	}
	slot := perSec * iterTime.Seconds()
	if slot > math.MaxUint32 {
		return 0, 0, fmt.Errorf("%.0f iterations for %v do not fit in 32 bits", slot, iterTime)
	}
	slotIter = max(uint32(slot), MinIterations)
	// cryptsetup LUKS_generate_phdr: slot iterations * 125 ms / iter time.
	digest := float64(slotIter) * float64(mkDigestTime) / float64(iterTime)
	digestIter = max(uint32(min(digest, math.MaxUint32)), MinIterations)
	return slotIter, digestIter, nil
}

// benchmarkPBKDF2 returns PBKDF2 iterations per second, growing the count
// until one run takes a quarter of budget and then timing one run of the
// size that should fill the rest. Time is CPU time where available (see
// benchClock), wall time if that clock does not advance; a run over four
// budgets of wall time ends the growth whatever the CPU clock says.
func benchmarkPBKDF2(hash string, keyBytes int, budget time.Duration) (float64, error) {
	password := []byte("foobarfo")
	salt := []byte("0123456789abcdef")
	now, done := benchClock()
	defer done()
	run := func(iter uint32) (d, wall time.Duration, err error) {
		start, wallStart := now(), time.Now()
		dk, err := deriveKey(hash, password, salt, iter, keyBytes)
		clear(dk)
		d, wall = now()-start, time.Since(wallStart)
		if d <= 0 {
			d = wall
		}
		return max(d, time.Nanosecond), wall, err
	}
	iter := uint32(1000)
	for {
		d, wall, err := run(iter)
		if err != nil {
			return 0, err
		}
		if d >= budget/4 || wall >= 4*budget || iter >= 1<<26 {
			rate := float64(iter) / d.Seconds()
			// One longer run for a steadier figure.
			next := uint32(min(rate*(budget*3/4).Seconds(), 1<<28))
			if next <= iter || wall >= 4*budget {
				return rate, nil
			}
			d2, _, err := run(next)
			if err != nil {
				return 0, err
			}
			return float64(next) / d2.Seconds(), nil
		}
		if d < time.Millisecond {
			iter *= 8
		} else {
			iter *= 2
		}
	}
}

// wallClock is the fallback benchmark clock.
func wallClock() (now func() time.Duration, done func()) {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }, func() {}
}
