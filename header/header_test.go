package header

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// testFormat formats a header with 1000 iterations and a deterministic random
// source seeded by seed.
func testFormat(t testing.TB, pass string, p Params, seed string) (*LUKS1, []byte, []byte) {
	t.Helper()
	if p.ForceIterations == 0 {
		p.ForceIterations = MinIterations
	}
	if p.Rand == nil {
		p.Rand = testRand(seed)
	}
	h, vk, area, err := formatLUKS1([]byte(pass), p)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	return h, vk, area
}

func TestMarshalParseRoundTrip(t *testing.T) {
	t.Parallel()
	for _, kb := range []int{16, 24, 32} {
		for _, hashName := range []string{"sha1", "sha256", "SHA512"} {
			h, _, area := testFormat(t, "pw", Params{KeyBytes: kb, Hash: hashName}, "rt")
			b := h.Marshal()
			if len(b) != PhdrSize {
				t.Fatalf("Marshal length %d", len(b))
			}
			if !bytes.Equal(b[definedSize:], make([]byte, PhdrSize-definedSize)) {
				t.Fatal("bytes 592..1023 are not zero")
			}
			if !bytes.Equal(area[:PhdrSize], b) {
				t.Fatal("area does not start with the marshalled header")
			}
			got, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, h) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, h)
			}
			if got.HashSpec != strings.ToLower(hashName) {
				t.Errorf("hash spec %q, want lower case", got.HashSpec)
			}
			// Parse needs only the 592 defined bytes.
			if _, err := Parse(b[:definedSize]); err != nil {
				t.Errorf("Parse of 592 bytes: %v", err)
			}
			if !bytes.Equal(got.Marshal(), b) {
				t.Fatal("re-marshal differs")
			}
		}
	}
}

// TestFormatLayout checks the layout against cryptsetup's (docs/LUKS.md §1,
// verified with luksDump) and qemu-img's unrounded payload.
func TestFormatLayout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		keyBytes int
		align    uint32
		offsets  [NumSlots]uint32
		area     int64 // sectors
		payload  uint32
	}{
		{16, 0, [NumSlots]uint32{8, 136, 264, 392, 520, 648, 776, 904}, 1029, 2048},
		{24, 0, [NumSlots]uint32{8, 200, 392, 584, 776, 968, 1160, 1352}, 1540, 2048},
		{32, 0, [NumSlots]uint32{8, 264, 520, 776, 1032, 1288, 1544, 1800}, 2050, 4096},
		{16, 8, [NumSlots]uint32{8, 136, 264, 392, 520, 648, 776, 904}, 1029, 1032},
		{24, 8, [NumSlots]uint32{8, 200, 392, 584, 776, 968, 1160, 1352}, 1540, 1544},
		{32, 8, [NumSlots]uint32{8, 264, 520, 776, 1032, 1288, 1544, 1800}, 2050, 2056},
		{32, 4096, [NumSlots]uint32{8, 264, 520, 776, 1032, 1288, 1544, 1800}, 2050, 4096},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-align%d", tt.keyBytes, tt.align), func(t *testing.T) {
			t.Parallel()
			h, _, area := testFormat(t, "pw", Params{KeyBytes: tt.keyBytes, AlignSectors: tt.align}, "layout")
			for i, s := range h.Slots {
				if s.KeyMaterialOffset != tt.offsets[i] || s.Stripes != Stripes {
					t.Errorf("slot %d: offset %d stripes %d, want %d %d", i, s.KeyMaterialOffset, s.Stripes, tt.offsets[i], Stripes)
				}
				if i > 0 && (s.State != SlotDisabled || s.Iterations != 0 || s.Salt != [SaltSize]byte{}) {
					t.Errorf("slot %d: %+v, want disabled with zero salt and iterations", i, s)
				}
			}
			if !h.Slots[0].Active() || h.Slots[0].Iterations != MinIterations {
				t.Errorf("slot 0: %+v", h.Slots[0])
			}
			if h.PayloadOffset != tt.payload {
				t.Errorf("payload %d, want %d", h.PayloadOffset, tt.payload)
			}
			if h.AreaSize() != tt.area*SectorSize {
				t.Errorf("AreaSize %d, want %d", h.AreaSize(), tt.area*SectorSize)
			}
			if h.MKDigestIter != MinIterations || h.HashSpec != "sha256" || h.CipherSpec() != "aes-cbc-essiv:sha256" || h.Version != 1 {
				t.Errorf("header %+v", h)
			}
			if len(area) != int(tt.payload)*SectorSize {
				t.Fatalf("area %d bytes, want %d", len(area), tt.payload*SectorSize)
			}
			zero := func(from, to int) bool { return bytes.Count(area[from:to], []byte{0}) == to-from }
			slotBytes := h.KeyMaterialSectors() * SectorSize
			if !zero(definedSize, 8*SectorSize) {
				t.Error("bytes between the header and slot 0 are not zero")
			}
			for i, s := range h.Slots {
				off := int(s.KeyMaterialOffset) * SectorSize
				if n := bytes.Count(area[off:off+slotBytes], []byte{0}); n > slotBytes/64 {
					t.Errorf("slot %d area has %d zero bytes, want random", i, n)
				}
				if i < NumSlots-1 && !zero(off+slotBytes, int(h.Slots[i+1].KeyMaterialOffset)*SectorSize) {
					t.Errorf("gap after slot %d is not zero", i)
				}
			}
			if !zero(int(h.AreaSize()), len(area)) {
				t.Error("bytes after the last slot are not zero")
			}
		})
	}
}

func TestFormatUUID(t *testing.T) {
	t.Parallel()
	h, _, _ := testFormat(t, "pw", Params{KeyBytes: 16}, "uuid")
	if _, err := CanonicalUUID(h.UUID); err != nil || h.UUID != strings.ToLower(h.UUID) {
		t.Fatalf("random UUID %q not canonical lower case", h.UUID)
	}
	if h.UUID[14] != '4' || !strings.Contains("89ab", h.UUID[19:20]) {
		t.Errorf("random UUID %q is not version 4 RFC 4122", h.UUID)
	}
	h2, _, _ := testFormat(t, "pw", Params{KeyBytes: 16}, "uuid2")
	if h2.UUID == h.UUID {
		t.Error("two random UUIDs are equal")
	}
	h, _, _ = testFormat(t, "pw", Params{KeyBytes: 16, UUID: "0F2A93B4-1C2D-4E5F-8A9B-0C1D2E3F4A5B"}, "uuid")
	if h.UUID != "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Errorf("UUID %q, want the given one in lower case", h.UUID)
	}
	for _, bad := range []string{"x", "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5", "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5bb",
		"0f2a93b4+1c2d-4e5f-8a9b-0c1d2e3f4a5b", "0f2a93b4-1c2d-4e5f-8a9b-0c1d2e3f4a5g"} {
		_, _, _, err := formatLUKS1([]byte("pw"), Params{KeyBytes: 16, UUID: bad, ForceIterations: 1000})
		if !errors.Is(err, ErrInvalidUUID) {
			t.Errorf("UUID %q: err %v, want ErrInvalidUUID", bad, err)
		}
	}
}

func TestFormatParams(t *testing.T) {
	t.Parallel()
	var uc *UnsupportedCipherError
	var uh *UnsupportedHashError
	tests := []struct {
		name  string
		p     Params
		check func(error) bool
	}{
		{"serpent", Params{Cipher: "serpent-xts-plain64"}, func(err error) bool { return errors.As(err, &uc) && uc.Spec == "serpent-xts-plain64" }},
		{"xts key 16", Params{Cipher: "aes-xts-plain64", KeyBytes: 16}, func(err error) bool { return err != nil }},
		{"twofish", Params{Cipher: "twofish"}, func(err error) bool { return errors.As(err, &uc) }},
		{"ripemd160", Params{Hash: "ripemd160"}, func(err error) bool { return errors.As(err, &uh) && uh.Hash == "ripemd160" }},
		{"key 8", Params{KeyBytes: 8}, func(err error) bool { return err != nil }},
		{"key 33", Params{KeyBytes: 33}, func(err error) bool { return err != nil }},
		{"key 64", Params{KeyBytes: 64}, func(err error) bool { return err != nil }},
		{"key -1", Params{KeyBytes: -1}, func(err error) bool { return err != nil }},
		{"iter 999", Params{ForceIterations: 999}, func(err error) bool { return err != nil }},
		{"iter time", Params{IterTime: -1}, func(err error) bool { return err != nil }},
		{"short rand", Params{Rand: bytes.NewReader(make([]byte, 40))}, func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) }},
	}
	for _, tt := range tests {
		if tt.p.ForceIterations == 0 {
			tt.p.ForceIterations = MinIterations
		}
		h, vk, area, err := formatLUKS1([]byte("pw"), tt.p)
		if !tt.check(err) || h != nil || vk != nil || area != nil {
			t.Errorf("%s: Format = %v, %v; want a matching error and no results", tt.name, h, err)
		}
	}
	if !strings.Contains((&UnsupportedCipherError{Spec: "x"}).Error(), "aes-cbc-essiv:sha256") {
		t.Error("UnsupportedCipherError does not say what is supported")
	}
	if !strings.Contains((&UnsupportedHashError{Hash: "x"}).Error(), "sha1, sha256, sha512") {
		t.Error("UnsupportedHashError does not say what is supported")
	}
}

func TestFormatCipherSpec(t *testing.T) {
	for _, spec := range []string{"aes-cbc-essiv:sha256", "aes-xts-plain64", "aes-xts-plain", "aes-cbc-plain64", "aes-cbc-plain"} {
		h, vk, _, err := formatLUKS1([]byte("pw"), Params{Cipher: spec, ForceIterations: MinIterations, Rand: testRand(spec)})
		if err != nil || h.CipherName != "aes" || h.CipherName+"-"+h.CipherMode != spec || h.Info().Cipher != spec {
			t.Errorf("Format(%q): %v, cipher-name %q cipher-mode %q", spec, err, h.CipherName, h.CipherMode)
			continue
		}
		clear(vk)
	}
	for _, spec := range []string{"serpent-xts-plain64", "aes-ecb", "aes", "AES-cbc-essiv:sha256", "aes-cbc-essiv:sha1"} {
		var uc *UnsupportedCipherError
		if _, _, _, err := formatLUKS1([]byte("pw"), Params{Cipher: spec, ForceIterations: MinIterations}); !errors.As(err, &uc) || uc.Spec != spec {
			t.Errorf("Format(%q) err %v, want *UnsupportedCipherError", spec, err)
		}
	}
}

func TestSlotIterations(t *testing.T) {
	t.Parallel()
	iterTime := 40 * 1e6 // 40 ms
	slot, digest, err := SlotIterations("sha256", 32, 40e6)
	if err != nil {
		t.Fatal(err)
	}
	if slot < MinIterations || digest < MinIterations {
		t.Fatalf("iterations %d / %d below the minimum", slot, digest)
	}
	// cryptsetup: digest = slot * 125 ms / iter time, at least 1000.
	want := max(uint32(float64(slot)*125e6/iterTime), MinIterations)
	if digest != want {
		t.Errorf("digest iterations %d, want %d for %d slot iterations", digest, want, slot)
	}
	// Any machine does more than 25000 PBKDF2-SHA256 iterations a second.
	if slot <= MinIterations {
		t.Errorf("slot iterations %d: benchmark found less than 25000/s", slot)
	}
	if _, _, err := SlotIterations("md5", 32, 40e6); err == nil {
		t.Error("md5 accepted")
	}
	if _, _, err := SlotIterations("sha256", 32, 0); err == nil {
		t.Error("zero iteration time accepted")
	}
	// A benchmarked Format: MK digest iterations follow the same rule.
	h, _, _, err := formatLUKS1([]byte("pw"), Params{KeyBytes: 16, IterTime: 30e6, Rand: testRand("bench")})
	if err != nil {
		t.Fatal(err)
	}
	want = max(uint32(float64(h.Slots[0].Iterations)*125e6/30e6), MinIterations)
	if h.MKDigestIter != want {
		t.Errorf("Format: MK digest iterations %d, want %d for %d slot iterations", h.MKDigestIter, want, h.Slots[0].Iterations)
	}
}

// putString writes s into a 32- or 40-byte string field without adding a NUL.
func putString(b []byte, off, size int, s string) {
	clear(b[off : off+size])
	copy(b[off:off+size], s)
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	h, _, _ := testFormat(t, "pw", Params{}, "reject")
	good := h.Marshal()
	be := binary.BigEndian
	slot := func(i, off int) int { return offSlots + i*slotSize + off }
	tests := []struct {
		name   string
		mutate func(b []byte) []byte
		want   error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrNotLUKS},
		{"5 bytes", func(b []byte) []byte { return b[:5] }, ErrNotLUKS},
		{"bad magic", func(b []byte) []byte { b[4] = 0xBB; return b }, ErrNotLUKS},
		{"reencrypt magic", func(b []byte) []byte { b[4], b[5] = 0xDE, 0xAD; return b }, ErrNotLUKS},
		{"truncated", func(b []byte) []byte { return b[:591] }, ErrCorrupt},
		{"version 0", func(b []byte) []byte { be.PutUint16(b[offVersion:], 0); return b }, ErrCorrupt},
		{"version 2", func(b []byte) []byte { be.PutUint16(b[offVersion:], 2); return b }, ErrCorrupt},
		{"version 0x100", func(b []byte) []byte { be.PutUint16(b[offVersion:], 0x100); return b }, ErrCorrupt},
		{"cipher-name unterminated", func(b []byte) []byte { putString(b, offCipherName, 32, strings.Repeat("a", 32)); return b }, ErrCorrupt},
		{"cipher-mode unterminated", func(b []byte) []byte { putString(b, offCipherMode, 32, strings.Repeat("c", 32)); return b }, ErrCorrupt},
		{"hash-spec unterminated", func(b []byte) []byte { putString(b, offHashSpec, 32, strings.Repeat("s", 32)); return b }, ErrCorrupt},
		{"uuid unterminated", func(b []byte) []byte { putString(b, offUUID, 40, strings.Repeat("1", 40)); return b }, ErrCorrupt},
		{"key-bytes 0", func(b []byte) []byte { be.PutUint32(b[offKeyBytes:], 0); return b }, ErrCorrupt},
		{"key-bytes 65", func(b []byte) []byte { be.PutUint32(b[offKeyBytes:], 65); return b }, ErrCorrupt},
		{"key-bytes max", func(b []byte) []byte { be.PutUint32(b[offKeyBytes:], 0xFFFFFFFF); return b }, ErrCorrupt},
		{"key-bytes 33 overlaps", func(b []byte) []byte { be.PutUint32(b[offKeyBytes:], 33); return b }, ErrCorrupt},
		{"mk-digest-iter 0", func(b []byte) []byte { be.PutUint32(b[offMKIter:], 0); return b }, ErrCorrupt},
		{"active slot iterations 0", func(b []byte) []byte { be.PutUint32(b[slot(0, slotOffIter):], 0); return b }, ErrCorrupt},
		{"slot state 0xCAFE", func(b []byte) []byte { be.PutUint32(b[slot(3, 0):], 0xCAFE); return b }, ErrCorrupt},
		{"slot state 0", func(b []byte) []byte { be.PutUint32(b[slot(7, 0):], 0); return b }, ErrCorrupt},
		{"slot state junk", func(b []byte) []byte { be.PutUint32(b[slot(0, 0):], 0x00AC71F2); return b }, ErrCorrupt},
		{"stripes active slot", func(b []byte) []byte { be.PutUint32(b[slot(0, slotOffStripes):], 3999); return b }, ErrCorrupt},
		{"stripes disabled slot", func(b []byte) []byte { be.PutUint32(b[slot(5, slotOffStripes):], 4001); return b }, ErrCorrupt},
		{"stripes 0", func(b []byte) []byte { be.PutUint32(b[slot(7, slotOffStripes):], 0); return b }, ErrCorrupt},
		{"key material offset 0", func(b []byte) []byte { be.PutUint32(b[slot(0, slotOffKMO):], 0); return b }, ErrCorrupt},
		{"key material offset 1", func(b []byte) []byte { be.PutUint32(b[slot(2, slotOffKMO):], 1); return b }, ErrCorrupt},
		{"overlapping slots", func(b []byte) []byte { be.PutUint32(b[slot(2, slotOffKMO):], 264+10); return b }, ErrCorrupt},
		{"same offset", func(b []byte) []byte { be.PutUint32(b[slot(6, slotOffKMO):], 8); return b }, ErrCorrupt},
		{"overlap out of order", func(b []byte) []byte { be.PutUint32(b[slot(0, slotOffKMO):], 1800+100); return b }, ErrCorrupt},
		{"payload inside last slot", func(b []byte) []byte { be.PutUint32(b[offPayload:], 1801); return b }, ErrCorrupt},
		{"payload at last slot", func(b []byte) []byte { be.PutUint32(b[offPayload:], 1800); return b }, ErrCorrupt},
		{"payload before slots", func(b []byte) []byte { be.PutUint32(b[offPayload:], 4); return b }, ErrCorrupt},
		{"payload one short", func(b []byte) []byte { be.PutUint32(b[offPayload:], 2049); return b }, ErrCorrupt},
		{"slot offset max", func(b []byte) []byte { be.PutUint32(b[slot(7, slotOffKMO):], 0xFFFFFFFF); return b }, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.mutate(bytes.Clone(good))
			got, err := Parse(b)
			if got != nil || !errors.Is(err, tt.want) {
				t.Fatalf("Parse = %v, %v; want %v", got, err, tt.want)
			}
			var pe *ParseError
			if tt.want == ErrCorrupt {
				if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "invalid LUKS header: "+pe.Field+": ") {
					t.Fatalf("error %q is not a *ParseError", err)
				}
			} else if errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is both not-LUKS and corrupt", err)
			}
			// Read gives the same answer.
			if _, err := readLUKS1(bytes.NewReader(b), 0, 1<<30); !errors.Is(err, tt.want) {
				t.Fatalf("Read: %v, want %v", err, tt.want)
			}
		})
	}

	// Unsupported hashes are not corruption.
	for _, name := range []string{"ripemd160", "md5", "whirlpool", ""} {
		b := bytes.Clone(good)
		putString(b, offHashSpec, 32, name)
		var uh *UnsupportedHashError
		if _, err := Parse(b); !errors.As(err, &uh) || uh.Hash != name || errors.Is(err, ErrCorrupt) {
			t.Errorf("hash %q: err %v, want *UnsupportedHashError", name, err)
		}
	}
}

// TestParseAccepts covers headers cryptsetup loads although Format would not
// make them.
func TestParseAccepts(t *testing.T) {
	t.Parallel()
	h, _, _ := testFormat(t, "pw", Params{}, "accept")
	good := h.Marshal()
	be := binary.BigEndian
	tests := []struct {
		name   string
		mutate func(b []byte)
	}{
		{"detached header payload 0", func(b []byte) { be.PutUint32(b[offPayload:], 0) }},
		{"payload right after the slots", func(b []byte) { be.PutUint32(b[offPayload:], 2050) }},
		{"upper-case hash", func(b []byte) { putString(b, offHashSpec, 32, "SHA256") }},
		{"old MK digest iterations 10", func(b []byte) { be.PutUint32(b[offMKIter:], 10) }},
		{"xts 64-byte key", func(b []byte) {
			putString(b, offCipherMode, 32, "xts-plain64")
			be.PutUint32(b[offKeyBytes:], 64)
			for i := range NumSlots {
				be.PutUint32(b[offSlots+i*slotSize+slotOffKMO:], []uint32{8, 512, 1016, 1520, 2024, 2528, 3032, 3536}[i])
			}
		}},
		{"ecb mode", func(b []byte) { putString(b, offCipherMode, 32, "ecb") }},
		{"31-byte strings", func(b []byte) { putString(b, offCipherName, 32, strings.Repeat("n", 31)) }},
		{"empty uuid", func(b []byte) { putString(b, offUUID, 40, "") }},
		{"garbage after 592", func(b []byte) { b[700] = 1 }},
		{"slots in reverse order", func(b []byte) {
			for i := range NumSlots {
				be.PutUint32(b[offSlots+i*slotSize+slotOffKMO:], uint32(8+256*(7-i)))
			}
		}},
	}
	for _, tt := range tests {
		b := bytes.Clone(good)
		tt.mutate(b)
		got, err := Parse(b)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if m := got.Marshal(); !bytes.Equal(m[:definedSize], b[:definedSize]) {
			t.Errorf("%s: re-marshal differs", tt.name)
		}
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	h, _, area := testFormat(t, "pw", Params{KeyBytes: 16}, "read")
	// At an offset inside a larger file, as in qcow2.
	const base = 0x40000
	file := append(make([]byte, base), area...)
	got, err := readLUKS1(bytes.NewReader(file), base, int64(len(area)))
	if err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	// The payload may lie past the end: only the key slots must fit.
	end := h.AreaSize()
	if _, err := readLUKS1(bytes.NewReader(file[:base+end]), base, end); err != nil {
		t.Fatalf("Read of exactly AreaSize bytes: %v", err)
	}
	for _, size := range []int64{end - 1, end - SectorSize, PhdrSize, 600} {
		if _, err := readLUKS1(bytes.NewReader(file), base, size); !errors.Is(err, ErrCorrupt) {
			t.Errorf("size %d: err %v, want ErrCorrupt", size, err)
		}
		// The same when the file itself is short but size claims more.
		if _, err := readLUKS1(bytes.NewReader(file[:base+size]), base, 1<<30); !errors.Is(err, ErrCorrupt) {
			t.Errorf("file of %d bytes: err %v, want ErrCorrupt", size, err)
		}
	}
	for _, size := range []int64{0, 5} {
		if _, err := readLUKS1(bytes.NewReader(file), base, size); !errors.Is(err, ErrNotLUKS) {
			t.Errorf("size %d: err %v, want ErrNotLUKS", size, err)
		}
	}
	if _, err := readLUKS1(bytes.NewReader(file), 0, int64(len(file))); !errors.Is(err, ErrNotLUKS) {
		t.Errorf("wrong base: err %v, want ErrNotLUKS", err)
	}
	ioErr := errors.New("disk on fire")
	if _, err := readLUKS1(failingReader{ioErr}, 0, 1<<20); !errors.Is(err, ioErr) {
		t.Errorf("I/O error: err %v, want it wrapped", err)
	}
	if _, err := readLUKS1(bytes.NewReader(file), -1, 10); err == nil {
		t.Error("negative base accepted")
	}
}

type failingReader struct{ err error }

func (f failingReader) ReadAt(p []byte, off int64) (int, error) { return 0, f.err }

func TestMarshalPanicsOnLongString(t *testing.T) {
	h, _, _ := testFormat(t, "pw", Params{KeyBytes: 16}, "panic")
	h.CipherMode = strings.Repeat("m", 32)
	defer func() {
		r := recover()
		if s, ok := r.(string); !ok || !strings.HasPrefix(s, "header: ") {
			t.Fatalf("recover() = %v, want a header: panic", r)
		}
	}()
	h.Marshal()
}

// readLUKS1 is Read for a header the test knows to be LUKS1.
func readLUKS1(r io.ReaderAt, base, size int64) (*LUKS1, error) {
	h, err := Read(r, base, size)
	if err != nil {
		return nil, err
	}
	return h.(*LUKS1), nil
}
