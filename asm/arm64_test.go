//go:build arm64 && !purego

package asm

import (
	"bytes"
	"crypto/aes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"sync"
	"syscall"
	"testing"
)

// The arm64 tests run under qemu-user on other hosts (scripts/test-arm64.sh);
// they need the AES extension, which qemu's "max" CPU has.
func requireCE(t testing.TB) {
	t.Helper()
	if len(archImpls()) == 0 {
		t.Skip("CPU has no AES extension")
	}
}

func TestArchImplsARM64(t *testing.T) {
	requireCE(t)
	impls := Implementations()
	if impls[0].Name != "arm64-ce" || Best().Name != "arm64-ce" {
		t.Fatalf("Implementations()[0] = %q, Best() = %q; want arm64-ce", impls[0].Name, Best().Name)
	}
	if impls[len(impls)-1].Name != "generic" {
		t.Fatalf("last implementation is %q, want generic", impls[len(impls)-1].Name)
	}
}

// ceGmul multiplies in GF(2^8) modulo x^8+x^4+x^3+x+1.
func ceGmul(a, b byte) byte {
	var p byte
	for b != 0 {
		if b&1 != 0 {
			p ^= a
		}
		hi := a & 0x80
		a <<= 1
		if hi != 0 {
			a ^= 0x1b
		}
		b >>= 1
	}
	return p
}

// ceRefSBox builds the AES S-box from its definition: the multiplicative
// inverse (x^254) followed by the affine map of FIPS-197 section 5.1.1.
func ceRefSBox() [256]byte {
	var s [256]byte
	for x := range 256 {
		inv := byte(1)
		for range 254 {
			inv = ceGmul(inv, byte(x))
		}
		if x == 0 {
			inv = 0
		}
		s[x] = inv ^ bits.RotateLeft8(inv, 1) ^ bits.RotateLeft8(inv, 2) ^
			bits.RotateLeft8(inv, 3) ^ bits.RotateLeft8(inv, 4) ^ 0x63
	}
	return s
}

func TestSubWordMatchesSBox(t *testing.T) {
	requireCE(t)
	sbox := ceRefSBox()
	// Spot values from FIPS-197 Figure 7.
	if sbox[0x00] != 0x63 || sbox[0x53] != 0xed || sbox[0xff] != 0x16 {
		t.Fatalf("reference S-box is wrong: %#x %#x %#x", sbox[0x00], sbox[0x53], sbox[0xff])
	}
	for x := range 256 {
		// Four different bytes per word, so a lane mix-up shows.
		in := [4]byte{byte(x), byte(x + 1), byte(x + 77), byte(255 - x)}
		got := subWordCE(binary.LittleEndian.Uint32(in[:]))
		var want [4]byte
		for i, b := range in {
			want[i] = sbox[b]
		}
		if got != binary.LittleEndian.Uint32(want[:]) {
			t.Fatalf("subWordCE(% x) = %08x, want % x", in, got, want)
		}
	}
}

// ceRefInvMixColumns is InvMixColumns of FIPS-197 section 5.3.3 on a state
// stored column by column.
func ceRefInvMixColumns(in []byte) [16]byte {
	var out [16]byte
	for c := range 4 {
		a := in[4*c : 4*c+4]
		for r := range 4 {
			out[4*c+r] = ceGmul(a[r], 0x0e) ^ ceGmul(a[(r+1)%4], 0x0b) ^
				ceGmul(a[(r+2)%4], 0x0d) ^ ceGmul(a[(r+3)%4], 0x09)
		}
	}
	return out
}

// ceRefExpand is the FIPS-197 section 5.2 key expansion over the reference
// S-box, returning the round keys as bytes.
func ceRefExpand(key []byte) []byte {
	sbox := ceRefSBox()
	nk := len(key) / 4
	nw := 4 * (nk + 7)
	w := make([]byte, 4*nw)
	copy(w, key)
	rcon := byte(1)
	for i := nk; i < nw; i++ {
		var t [4]byte
		copy(t[:], w[4*(i-1):])
		if i%nk == 0 {
			t = [4]byte{sbox[t[1]] ^ rcon, sbox[t[2]], sbox[t[3]], sbox[t[0]]}
			rcon = ceGmul(rcon, 2)
		} else if nk > 6 && i%nk == 4 {
			t = [4]byte{sbox[t[0]], sbox[t[1]], sbox[t[2]], sbox[t[3]]}
		}
		for j := range 4 {
			w[4*i+j] = w[4*(i-nk)+j] ^ t[j]
		}
	}
	return w
}

func ceUnhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExpandKeyFIPS197(t *testing.T) {
	requireCE(t)
	// FIPS-197 Appendix A.1–A.3: the cipher keys and their last round keys.
	for _, v := range []struct{ key, last string }{
		{"2b7e151628aed2a6abf7158809cf4f3c", "d014f9a8c9ee2589e13f0cc8b6630ca6"},
		{"8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b", "e98ba06f448c773c8ecc720401002202"},
		{"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", "fe4890d1e6188d0b046df344706c631e"},
	} {
		key := ceUnhex(t, v.key)
		s, err := NewSchedule(key)
		if err != nil {
			t.Fatal(err)
		}
		nr := s.Rounds()
		if got := s.enc[nr*BlockSize : (nr+1)*BlockSize]; !bytes.Equal(got, ceUnhex(t, v.last)) {
			t.Errorf("key %s: rk[%d] = %x, want %s", v.key, nr, got, v.last)
		}
		if ref := ceRefExpand(key); len(ref) != 16*(nr+1) || !bytes.Equal(ref[len(ref)-16:], ceUnhex(t, v.last)) {
			t.Errorf("key %s: reference expansion disagrees with FIPS-197", v.key)
		}
	}
}

func TestExpandKeyMatchesReference(t *testing.T) {
	requireCE(t)
	for _, n := range []int{16, 24, 32} {
		for range 50 {
			key := make([]byte, n)
			rand.Read(key)
			s, err := NewSchedule(key)
			if err != nil {
				t.Fatal(err)
			}
			nr := s.Rounds()
			ref := ceRefExpand(key)
			if !bytes.Equal(s.enc[:len(ref)], ref) {
				t.Fatalf("key %x: enc schedule\n got %x\nwant %x", key, s.enc[:len(ref)], ref)
			}
			// Decryption keys: rk[nr], InvMixColumns(rk[nr-1..1]), rk[0].
			for i := 0; i <= nr; i++ {
				want := ref[(nr-i)*16 : (nr-i+1)*16]
				if i > 0 && i < nr {
					m := ceRefInvMixColumns(want)
					want = m[:]
				}
				if got := s.dec[i*16 : (i+1)*16]; !bytes.Equal(got, want) {
					t.Fatalf("key %x: dec[%d] = %x, want %x", key, i, got, want)
				}
			}
			for i := 16 * (nr + 1); i < len(s.enc); i++ {
				if s.enc[i] != 0 || s.dec[i] != 0 {
					t.Fatalf("key %x: bytes past round %d are set", key, nr)
				}
			}
		}
	}
}

// TestBlocksMatchCryptoAES drives the kernels with one-block sectors to
// check single AES blocks against crypto/aes: with IV the ESSIV IV of the
// sector, encrypting X^IV must give E_k(X), and decrypting Y must give
// D_k(Y)^IV. Bulk and IV keys of every size are combined.
func TestBlocksMatchCryptoAES(t *testing.T) {
	requireCE(t)
	for _, kn := range []int{16, 24, 32} {
		for _, ivn := range []int{16, 24, 32} {
			for range 20 {
				key, ivkey := make([]byte, kn), make([]byte, ivn)
				rand.Read(key)
				rand.Read(ivkey)
				k, _ := NewSchedule(key)
				ivk, _ := NewSchedule(ivkey)
				ref, _ := aes.NewCipher(key)
				ivref, _ := aes.NewCipher(ivkey)

				var b [8]byte
				rand.Read(b[:])
				sector := binary.LittleEndian.Uint64(b[:])
				iv := make([]byte, 16)
				binary.LittleEndian.PutUint64(iv, sector)
				ivref.Encrypt(iv, iv)

				x := make([]byte, 16)
				rand.Read(x)
				in, got, want := make([]byte, 16), make([]byte, 16), make([]byte, 16)
				for i := range in {
					in[i] = x[i] ^ iv[i]
				}
				ceImpl.Encrypt(k, ivk, got, in, sector, 16)
				ref.Encrypt(want, x)
				if !bytes.Equal(got, want) {
					t.Fatalf("key %d, iv key %d: encrypt = %x, want %x", kn, ivn, got, want)
				}
				ceImpl.Decrypt(k, ivk, got, x, sector, 16)
				ref.Decrypt(want, x)
				for i := range want {
					want[i] ^= iv[i]
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("key %d, iv key %d: decrypt = %x, want %x", kn, ivn, got, want)
				}
			}
		}
	}
}

func ceNewKeys(t testing.TB, n int) (k, ivk *Schedule) {
	t.Helper()
	key, ivkey := make([]byte, n), make([]byte, 32)
	rand.Read(key)
	rand.Read(ivkey)
	k, err := NewSchedule(key)
	if err != nil {
		t.Fatal(err)
	}
	ivk, err = NewSchedule(ivkey)
	if err != nil {
		t.Fatal(err)
	}
	return k, ivk
}

// ceBatchSizes returns the batch sizes tested for a sector size: all of
// 1..64 for 512-byte sectors, and for larger ones every remainder mod 8
// (the tail lane counts) with zero, one and several 8-lane groups.
func ceBatchSizes(sectorSize int) []int {
	if sectorSize == 512 {
		var s []int
		for n := 1; n <= 64; n++ {
			s = append(s, n)
		}
		return s
	}
	return []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 18, 27, 36, 45, 54, 63, 64}
}

// checkCE compares ceImpl with Generic on one batch: separate unaligned
// buffers (with canaries around the output) and in place.
func checkCE(t *testing.T, k, ivk *Schedule, n, sectorSize int, first uint64, offset int) {
	t.Helper()
	size := n * sectorSize
	plain := make([]byte, size)
	rand.Read(plain)
	want := make([]byte, size)
	Generic.Encrypt(k, ivk, want, plain, first, sectorSize)

	const pad = 48
	buf := make([]byte, size+2*pad+offset)
	for i := range buf {
		buf[i] = 0xa5
	}
	srcBuf := make([]byte, size+offset+1)
	src := srcBuf[offset+1 : offset+1+size]
	copy(src, plain)
	dst := buf[pad+offset : pad+offset+size]
	checkCanary := func(what string) {
		t.Helper()
		for i, b := range buf {
			if (i < pad+offset || i >= pad+offset+size) && b != 0xa5 {
				t.Fatalf("%s wrote outside dst at %d", what, i-pad-offset)
			}
		}
	}

	ceImpl.Encrypt(k, ivk, dst, src, first, sectorSize)
	if !bytes.Equal(dst, want) {
		t.Fatalf("Encrypt differs from Generic at byte %d", ceFirstDiff(dst, want))
	}
	if !bytes.Equal(src, plain) {
		t.Fatal("Encrypt modified src")
	}
	checkCanary("Encrypt")

	copy(src, want)
	ceImpl.Decrypt(k, ivk, dst, src, first, sectorSize)
	if !bytes.Equal(dst, plain) {
		t.Fatalf("Decrypt differs from plaintext at byte %d", ceFirstDiff(dst, plain))
	}
	if !bytes.Equal(src, want) {
		t.Fatal("Decrypt modified src")
	}
	checkCanary("Decrypt")

	copy(dst, plain)
	ceImpl.Encrypt(k, ivk, dst, dst, first, sectorSize)
	if !bytes.Equal(dst, want) {
		t.Fatalf("in-place Encrypt differs from Generic at byte %d", ceFirstDiff(dst, want))
	}
	ceImpl.Decrypt(k, ivk, dst, dst, first, sectorSize)
	if !bytes.Equal(dst, plain) {
		t.Fatalf("in-place Decrypt differs from plaintext at byte %d", ceFirstDiff(dst, plain))
	}
	checkCanary("in-place")
}

func ceFirstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestCEMatchesGeneric(t *testing.T) {
	requireCE(t)
	for _, kn := range []int{16, 24, 32} {
		k, ivk := ceNewKeys(t, kn)
		for _, ss := range []int{512, 1024, 2048, 4096} {
			for _, n := range ceBatchSizes(ss) {
				// Sector numbers above 2^32, and unaligned buffers.
				first := uint64(n)<<33 | uint64(ss)*7 + 3
				offset := (n*5 + kn) % 16
				t.Run(fmt.Sprintf("key%d/ss%d/n%d", kn*8, ss, n), func(t *testing.T) {
					checkCE(t, k, ivk, n, ss, first, offset)
				})
			}
		}
	}
}

// TestCEOddSectorSizes covers sector sizes that are not multiples of 128
// bytes (essiv's single-sector Encrypt accepts any multiple of 16), which
// take the one-block decryption path, and IV keys of every size.
func TestCEOddSectorSizes(t *testing.T) {
	requireCE(t)
	for _, kn := range []int{16, 24, 32} {
		k, _ := ceNewKeys(t, kn)
		ivk, _ := ceNewKeys(t, 16+8*(kn%3))
		for _, ss := range []int{16, 32, 48, 112, 128, 144, 496, 528} {
			for _, n := range []int{1, 2, 7, 8, 9, 17} {
				t.Run(fmt.Sprintf("key%d/ss%d/n%d", kn*8, ss, n), func(t *testing.T) {
					checkCE(t, k, ivk, n, ss, 0xffff_fff0_0000_0000+uint64(n), n%16)
				})
			}
		}
	}
}

func TestCESectorWraparound(t *testing.T) {
	requireCE(t)
	k, ivk := ceNewKeys(t, 32)
	for _, ss := range []int{512, 4096} {
		// Sector numbers wrap past 2^64-1 inside the batch, as uint64
		// arithmetic in the generic code does.
		checkCE(t, k, ivk, 12, ss, ^uint64(0)-3*uint64(ss/512)+1, 0)
	}
}

// ceGuardedBuffer returns a size-byte slice that starts right after and
// ends right before an inaccessible page, so any access outside it faults.
func ceGuardedBuffer(t *testing.T, size int, atEnd bool) []byte {
	t.Helper()
	page := syscall.Getpagesize()
	span := (size + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, span+2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[page+span:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if atEnd {
		return mem[page+span-size : page+span]
	}
	return mem[page : page+size]
}

// TestCEGuardPages places src and dst against unmapped pages on either
// side: a kernel reading or writing one byte beyond the buffers faults.
func TestCEGuardPages(t *testing.T) {
	requireCE(t)
	k, ivk := ceNewKeys(t, 32)
	for _, ss := range []int{16, 512, 4096} {
		for _, n := range []int{1, 3, 8, 11} {
			for _, atEnd := range []bool{false, true} {
				size := n * ss
				src, dst := ceGuardedBuffer(t, size, atEnd), ceGuardedBuffer(t, size, atEnd)
				rand.Read(src)
				want := make([]byte, size)
				Generic.Encrypt(k, ivk, want, src, 5, ss)
				ceImpl.Encrypt(k, ivk, dst, src, 5, ss)
				if !bytes.Equal(dst, want) {
					t.Fatalf("ss %d n %d: Encrypt differs", ss, n)
				}
				ceImpl.Decrypt(k, ivk, src, dst, 5, ss)
				ceImpl.Decrypt(k, ivk, dst, dst, 5, ss)
				if !bytes.Equal(src, dst) {
					t.Fatalf("ss %d n %d: separate and in-place Decrypt differ", ss, n)
				}
			}
		}
	}
}

func TestCEConcurrent(t *testing.T) {
	requireCE(t)
	k, ivk := ceNewKeys(t, 32)
	const n, ss = 19, 512
	plain := make([]byte, n*ss)
	rand.Read(plain)
	want := make([]byte, len(plain))
	Generic.Encrypt(k, ivk, want, plain, 1<<40, ss)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			buf := make([]byte, len(plain))
			for range 20 {
				copy(buf, plain)
				ceImpl.Encrypt(k, ivk, buf, buf, 1<<40, ss)
				if !bytes.Equal(buf, want) {
					errs <- fmt.Sprintf("goroutine %d: Encrypt differs", g)
					return
				}
				ceImpl.Decrypt(k, ivk, buf, buf, 1<<40, ss)
				if !bytes.Equal(buf, plain) {
					errs <- fmt.Sprintf("goroutine %d: Decrypt differs", g)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestCEZeroAllocs(t *testing.T) {
	requireCE(t)
	k, ivk := ceNewKeys(t, 32)
	buf := make([]byte, 13*512)
	for name, f := range map[string]SectorFunc{"Encrypt": ceImpl.Encrypt, "Decrypt": ceImpl.Decrypt} {
		if a := testing.AllocsPerRun(10, func() { f(k, ivk, buf, buf, 77, 512) }); a != 0 {
			t.Errorf("%s allocates %v times per call", name, a)
		}
	}
}

func TestCEBadArgsPanic(t *testing.T) {
	requireCE(t)
	k, ivk := ceNewKeys(t, 16)
	buf := make([]byte, 2048)
	for name, f := range map[string]func(){
		"short dst":         func() { ceImpl.Encrypt(k, ivk, buf[:512], buf[:1024], 0, 512) },
		"partial sector":    func() { ceImpl.Decrypt(k, ivk, buf[:1000], buf[:1000], 0, 512) },
		"zero sector size":  func() { ceImpl.Encrypt(k, ivk, buf, buf, 0, 0) },
		"unaligned sectors": func() { ceImpl.Decrypt(k, ivk, buf[:40], buf[:40], 0, 20) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

func BenchmarkCE(b *testing.B) {
	if len(archImpls()) == 0 {
		b.Skip("CPU has no AES extension")
	}
	k, ivk := ceNewKeys(b, 32)
	for _, ss := range []int{512, 4096} {
		buf := make([]byte, 64<<10)
		for _, impl := range []Impl{ceImpl, Generic} {
			b.Run(fmt.Sprintf("%s/encrypt/ss%d", impl.Name, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					impl.Encrypt(k, ivk, buf, buf, 9, ss)
				}
			})
			b.Run(fmt.Sprintf("%s/decrypt/ss%d", impl.Name, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for b.Loop() {
					impl.Decrypt(k, ivk, buf, buf, 9, ss)
				}
			})
		}
	}
}
