//go:build ignore

// Command sha256_gen writes sha256_amd64.s: SHA-256 compression (FIPS 180-4
// section 6.2.2) on the x86 SHA extensions for 1, 2 and 4 independent
// lanes. Run it with `go generate ./asm` on amd64 (or `go run
// sha256_gen.go` in this directory); TestSHA256AsmGenerated checks that the
// checked-in output is current.
//
// # Instructions
//
// From the Intel SHA Extensions documentation, in Go's operand order:
//
//	SHA256RNDS2 X0, src, dst  two rounds: dst holds C,D,G,H and src A,B,E,F
//	                          (dword 3 down to 0); dst becomes the new
//	                          A,B,E,F. X0's low qword is W+K of the two rounds.
//	SHA256MSG1 src, dst       dst = W[t-16..t-13] + sigma0(W[t-15..t-12]),
//	                          dst holding W[t-16..t-13], src W[t-12..t-9]
//	SHA256MSG2 src, dst       dst = W[t..t+3] from dst (the MSG1 result plus
//	                          W[t-7..t-4]) and src, W[t-4..t-1]
//
// Besides them the kernels use SSE2, PSHUFB and PALIGNR (SSSE3) and
// PBLENDW (SSE4.1): xmm registers only, which every CPU with SHA-NI has.
//
// # Design
//
// A lane's chaining value lives in two registers, ABEF and CDGH. Four
// rounds take W+K of one group of four message words; the first
// SHA256RNDS2 leaves the new ABEF in the CDGH register and the old ABEF,
// which is the new CDGH, where it was, and the second swaps them back.
// One lane's rounds form a single dependency chain, 32 SHA256RNDS2 per
// block, so a lone stream waits on their latency; independent lanes
// interleaved fill the unit.
//
// The 1- and 2-lane kernels keep each lane's message schedule in four
// registers M0..M3, holding W[4g..4g+3] for the group g of rounds they
// feed: each is rebuilt for group g+4 while groups g+1..g+3 run (SHA256MSG1
// at group g-3, the PALIGNR/PADDL/SHA256MSG2 at group g-1). Two lanes use
// all sixteen xmm registers.
//
// Four lanes need eight state registers, which leaves too few for four
// schedules, so the 4-lane kernel computes each block's W+K words ahead
// into a buffer on the stack (256 bytes per lane) and the rounds read them
// from memory. It is software-pipelined: while the rounds of block b read
// one buffer, the schedule of block b+1 goes into the other, lane j's
// during round groups 4j..4j+3, so that the schedule work overlaps the
// rounds.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"math/big"
	"os"
	"slices"
	"strings"
)

var out bytes.Buffer

func emit(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }

// sha256K computes K0..K63 as FIPS 180-4 section 4.2.2 defines them: the
// first 32 bits of the fractional parts of the cube roots of the first 64
// primes, floor(cbrt(p * 2^96)) mod 2^32.
func sha256K() []uint32 {
	var k []uint32
	for n := int64(2); len(k) < 64; n++ {
		if !big.NewInt(n).ProbablyPrime(0) {
			continue
		}
		v := new(big.Int).Lsh(big.NewInt(n), 96)
		// Newton's method from above for floor(cbrt(v)).
		x := new(big.Int).Lsh(big.NewInt(1), uint(v.BitLen()/3+1))
		for {
			y := new(big.Int).Quo(v, new(big.Int).Mul(x, x))
			y.Add(y, new(big.Int).Lsh(x, 1))
			y.Quo(y, big.NewInt(3))
			if y.Cmp(x) >= 0 {
				break
			}
			x = y
		}
		k = append(k, uint32(x.Uint64()))
	}
	return k
}

func kref(g int) string { return fmt.Sprintf("sha256K<>+0x%02x(SB)", 16*g) }

// schedOps returns the schedule steps of round group g for a lane whose
// message registers are m: finish group g+1's words, start group g+3's.
func schedOps(m [4]string, g int, t string) []string {
	var ops []string
	if 3 <= g && g <= 14 {
		ops = append(ops, fmt.Sprintf("SCHED2(%s, %s, %s, %s)", m[(g+3)%4], m[g%4], m[(g+1)%4], t))
	}
	if 1 <= g && g <= 12 {
		ops = append(ops, fmt.Sprintf("SCHED1(%s, %s)", m[(g+3)%4], m[g%4]))
	}
	return ops
}

type lane struct {
	s0, s1 string
	m      [4]string
}

// blockInRegs emits one block's 64 rounds for lanes with in-register
// schedules, the lanes interleaved group by group.
func blockInRegs(lanes []lane, t string) {
	for g := range 16 {
		for _, l := range lanes {
			emit("\tRND4(%s, %s, %s, %s)", l.s0, l.s1, l.m[g%4], kref(g))
		}
		for _, l := range lanes {
			for _, op := range schedOps(l.m, g, t) {
				emit("\t%s", op)
			}
		}
	}
}

const macros = `// sha256BSwap<> is the PSHUFB mask that reverses the bytes of each dword:
// message words are big-endian.
DATA sha256BSwap<>+0x00(SB)/8, $0x0405060700010203
DATA sha256BSwap<>+0x08(SB)/8, $0x0c0d0e0f08090a0b
GLOBL sha256BSwap<>(SB), RODATA|NOPTR, $16

// LOADSTATE loads H0..H3 from lo and H4..H7 from hi into s0 = ABEF and
// s1 = CDGH. It clobbers X0.
#define LOADSTATE(lo, hi, s0, s1) \
	MOVOU lo, X0; \
	MOVOU hi, s1; \
	PSHUFD $0xb1, X0, X0; \
	PSHUFD $0x1b, s1, s1; \
	MOVO X0, s0; \
	PALIGNR $8, s1, s0; \
	PBLENDW $0xf0, X0, s1

// STORESTATE is the inverse of LOADSTATE; it clobbers s0, s1 and X0.
#define STORESTATE(s0, s1, lo, hi) \
	PSHUFD $0x1b, s0, s0; \
	PSHUFD $0xb1, s1, s1; \
	MOVO s0, X0; \
	PBLENDW $0xf0, s1, X0; \
	PALIGNR $8, s0, s1; \
	MOVOU X0, lo; \
	MOVOU s1, hi

// LOADMSG loads the 16 message words of the block at p into m0..m3.
// X15 holds sha256BSwap<>.
#define LOADMSG(p, m0, m1, m2, m3) \
	MOVOU 0(p), m0; \
	PSHUFB X15, m0; \
	MOVOU 16(p), m1; \
	PSHUFB X15, m1; \
	MOVOU 32(p), m2; \
	PSHUFB X15, m2; \
	MOVOU 48(p), m3; \
	PSHUFB X15, m3

// RND4 runs four rounds of one lane with the message words in m and the
// constants at k.
#define RND4(s0, s1, m, k) \
	MOVO m, X0; \
	PADDL k, X0; \
	SHA256RNDS2 X0, s0, s1; \
	PSHUFD $0x0e, X0, X0; \
	SHA256RNDS2 X0, s1, s0

// SCHED1 starts W[4g+12..4g+15] in prev, which holds W[4g-4..4g-1] and is
// no longer needed; cur holds W[4g..4g+3].
#define SCHED1(prev, cur) \
	SHA256MSG1 cur, prev

// SCHED2 finishes W[4g+4..4g+7] in next from prev = W[4g-4..4g-1] and
// cur = W[4g..4g+3], with t as scratch.
#define SCHED2(prev, cur, next, t) \
	MOVO cur, t; \
	PALIGNR $4, prev, t; \
	PADDL t, next; \
	SHA256MSG2 cur, next

// RNDWK runs four rounds of one lane from the W+K words stored at off(r).
#define RNDWK(s0, s1, off, r) \
	MOVQ (off)(r), X0; \
	SHA256RNDS2 X0, s0, s1; \
	MOVQ (off+8)(r), X0; \
	SHA256RNDS2 X0, s1, s0
`

func genX1() {
	emit(`// func sha256x1SHANI(h *SHA256State, p *byte, n int)
TEXT ·sha256x1SHANI(SB), NOSPLIT, $0-24
	MOVQ h+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	MOVOU sha256BSwap<>(SB), X15
	LOADSTATE(0(DI), 16(DI), X1, X2)

x1block:
	MOVO X1, X7
	MOVO X2, X8
	LOADMSG(SI, X3, X4, X5, X6)`)
	blockInRegs([]lane{{"X1", "X2", [4]string{"X3", "X4", "X5", "X6"}}}, "X13")
	emit(`	PADDL X7, X1
	PADDL X8, X2
	ADDQ $64, SI
	DECQ CX
	JNZ x1block

	STORESTATE(X1, X2, 0(DI), 16(DI))
	RET
`)
}

func genX2() {
	emit(`// func sha256x2SHANI(h *[2]SHA256State, p0, p1 *byte, n int)
//
// The chaining values entering a block are saved at 0(SP) for the final
// additions: all sixteen registers are in use.
TEXT ·sha256x2SHANI(SB), NOSPLIT, $64-32
	MOVQ h+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), BX
	MOVQ n+24(FP), CX
	MOVOU sha256BSwap<>(SB), X15
	LOADSTATE(0(DI), 16(DI), X1, X2)
	LOADSTATE(32(DI), 48(DI), X7, X8)

x2block:
	MOVOU X1, 0(SP)
	MOVOU X2, 16(SP)
	MOVOU X7, 32(SP)
	MOVOU X8, 48(SP)
	LOADMSG(SI, X3, X4, X5, X6)
	LOADMSG(BX, X9, X10, X11, X12)`)
	blockInRegs([]lane{
		{"X1", "X2", [4]string{"X3", "X4", "X5", "X6"}},
		{"X7", "X8", [4]string{"X9", "X10", "X11", "X12"}},
	}, "X13")
	emit(`	MOVOU 0(SP), X13
	PADDL X13, X1
	MOVOU 16(SP), X13
	PADDL X13, X2
	MOVOU 32(SP), X13
	PADDL X13, X7
	MOVOU 48(SP), X13
	PADDL X13, X8
	ADDQ $64, SI
	ADDQ $64, BX
	DECQ CX
	JNZ x2block

	STORESTATE(X1, X2, 0(DI), 16(DI))
	STORESTATE(X7, X8, 32(DI), 48(DI))
	RET
`)
}

func genX4() {
	m := [4]string{"X9", "X10", "X11", "X12"}
	emit(`// SCHED_Qq(dst) computes W+K for the round groups 4q..4q+3 of one lane,
// whose message words are in X9..X12 (LOADMSG), into 64q(dst)..64q+63(dst).
// Groups 0..3 consume the loaded words, so SCHED_Q0..SCHED_Q3 must run in
// order for each lane; X13 and X14 are scratch.`)
	for q := range 4 {
		var body []string
		for g := 4 * q; g < 4*q+4; g++ {
			body = append(body, "MOVO "+m[g%4]+", X14", "PADDL "+kref(g)+", X14", fmt.Sprintf("MOVOU X14, %d(dst)", 16*g))
			body = append(body, schedOps(m, g, "X13")...)
		}
		emit("#define SCHED_Q%d(dst) \\", q)
		emit("\t%s\n", strings.Join(body, "; \\\n\t"))
	}
	emit(`// func sha256x4SHANI(h *[4]SHA256State, p0, p1, p2, p3 *byte, n int)
//
// Two W+K buffers at 128(SP) and 1152(SP): R10 points to the one the
// rounds of this block read, R11 to the one being filled with the next
// block's words. The chaining values entering a block are saved at 0(SP).
TEXT ·sha256x4SHANI(SB), $2176-48
	MOVQ h+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), BX
	MOVQ p2+24(FP), R8
	MOVQ p3+32(FP), R9
	MOVQ n+40(FP), CX
	MOVOU sha256BSwap<>(SB), X15
	LEAQ 128(SP), R10
	LEAQ 1152(SP), R11
	LOADSTATE(0(DI), 16(DI), X1, X2)
	LOADSTATE(32(DI), 48(DI), X3, X4)
	LOADSTATE(64(DI), 80(DI), X5, X6)
	LOADSTATE(96(DI), 112(DI), X7, X8)`)
	ptr := []string{"SI", "BX", "R8", "R9"}
	for j := range 4 {
		emit("\tLOADMSG(%s, X9, X10, X11, X12)", ptr[j])
		emit("\tLEAQ %d(R10), R12", 256*j)
		for q := range 4 {
			emit("\tSCHED_Q%d(R12)", q)
		}
	}
	st := [][2]string{{"X1", "X2"}, {"X3", "X4"}, {"X5", "X6"}, {"X7", "X8"}}
	save := func() {
		for j, s := range st {
			emit("\tMOVOU %s, %d(SP)", s[0], 32*j)
			emit("\tMOVOU %s, %d(SP)", s[1], 32*j+16)
		}
	}
	feedForward := func() {
		for j, s := range st {
			emit("\tMOVOU %d(SP), X9", 32*j)
			emit("\tPADDL X9, %s", s[0])
			emit("\tMOVOU %d(SP), X9", 32*j+16)
			emit("\tPADDL X9, %s", s[1])
		}
	}
	rounds := func(g int) {
		for j, s := range st {
			emit("\tRNDWK(%s, %s, %d, R10)", s[0], s[1], 256*j+16*g)
		}
	}
	emit(`
x4block:
	DECQ CX
	JZ x4last
	ADDQ $64, SI
	ADDQ $64, BX
	ADDQ $64, R8
	ADDQ $64, R9`)
	save()
	for g := range 16 {
		rounds(g)
		j, q := g/4, g%4
		if q == 0 {
			emit("\tLOADMSG(%s, X9, X10, X11, X12)", ptr[j])
			emit("\tLEAQ %d(R11), R12", 256*j)
		}
		emit("\tSCHED_Q%d(R12)", q)
	}
	feedForward()
	emit("\tXCHGQ R10, R11")
	emit("\tJMP x4block")
	emit("\nx4last:")
	save()
	for g := range 16 {
		rounds(g)
	}
	feedForward()
	emit(`	STORESTATE(X1, X2, 0(DI), 16(DI))
	STORESTATE(X3, X4, 32(DI), 48(DI))
	STORESTATE(X5, X6, 64(DI), 80(DI))
	STORESTATE(X7, X8, 96(DI), 112(DI))
	RET`)
}

// zalloc hands out the zmm registers Z8..Z31 that the 16-lane kernel does
// not keep its state in.
type zalloc struct{ free []string }

func newZalloc() *zalloc {
	z := &zalloc{}
	for i := 31; i >= 8; i-- {
		z.free = append(z.free, fmt.Sprintf("Z%d", i))
	}
	return z
}

func (z *zalloc) get() string {
	if len(z.free) == 0 {
		log.Fatal("sha256_gen: out of zmm registers")
	}
	r := z.free[len(z.free)-1]
	z.free = z.free[:len(z.free)-1]
	return r
}

func (z *zalloc) put(rs ...string) { z.free = append(z.free, rs...) }

// x16Load emits the loads of one block of each of the 16 lanes and their
// transposition: it returns w with w[k] holding message word k (byte
// order already reversed) of lane j in dword j.
func x16Load(z *zalloc) [16]string {
	var rows [16]string
	for j := range 16 {
		rows[j] = z.get()
		emit("\tMOVQ %d(BX), R8", 24*j)
		emit("\tVMOVDQU32 (R8)(SI*1), %s", rows[j])
		emit("\tVPSHUFB sha256BSwap16<>(SB), %s, %s", rows[j], rows[j])
	}
	// Within each 128-bit lane L, rows 4q..4q+3 become D[q][c] = word
	// 4L+c of those rows: unpack dwords, then qwords.
	var lo, hi [8]string
	for i := range 8 {
		lo[i], hi[i] = z.get(), z.get()
		emit("\tVPUNPCKLDQ %s, %s, %s", rows[2*i+1], rows[2*i], lo[i])
		emit("\tVPUNPCKHDQ %s, %s, %s", rows[2*i+1], rows[2*i], hi[i])
		z.put(rows[2*i], rows[2*i+1])
	}
	var d [4][4]string
	for q := range 4 {
		for c, src := range [][8]string{lo, lo, hi, hi} {
			op := "VPUNPCKLQDQ"
			if c%2 == 1 {
				op = "VPUNPCKHQDQ"
			}
			d[q][c] = z.get()
			emit("\t%s %s, %s, %s", op, src[2*q+1], src[2*q], d[q][c])
		}
		z.put(lo[2*q], lo[2*q+1], hi[2*q], hi[2*q+1])
	}
	// Then, for each c, a 4x4 transpose of 128-bit lanes: word 4L+c of
	// all 16 rows, row 4q+i in dword 4q+i.
	shuf := func(a0, a1, b0, b1 int) int { return a0 | a1<<2 | b0<<4 | b1<<6 }
	var w [16]string
	for c := range 4 {
		var e [4]string
		for i, pair := range [][2]int{{0, 1}, {0, 1}, {2, 3}, {2, 3}} {
			sel := 2 * (i % 2)
			e[i] = z.get()
			emit("\tVSHUFI32X4 $0x%02x, %s, %s, %s", shuf(sel, sel+1, sel, sel+1), d[pair[1]][c], d[pair[0]][c], e[i])
		}
		z.put(d[0][c], d[1][c], d[2][c], d[3][c])
		for l := range 4 {
			x, y := e[l/2], e[2+l/2]
			sel := l % 2
			w[4*l+c] = z.get()
			emit("\tVSHUFI32X4 $0x%02x, %s, %s, %s", shuf(sel, sel+2, sel, sel+2), y, x, w[4*l+c])
		}
		z.put(e[:]...)
	}
	return w
}

// x16Layout places element (lane j, word i) of 16 chaining values in
// one of 8 zmm registers, at a dword: the 16 states as they lie in memory
// (two per register), two steps between, and word i of every lane in
// register i, lane j in dword j. Each step moves one bit of j from the
// register number into the dword and one bit of i the other way, so
// every register of a step draws from two of the one before.
var x16Layout = [4]func(j, i int) (reg, dword int){
	func(j, i int) (int, int) { return j >> 1, j&1<<3 | i },
	func(j, i int) (int, int) { return j>>2<<1 | i&1, j&1<<3 | i>>1<<1 | j>>1&1 },
	func(j, i int) (int, int) { return j>>3<<2 | i&3, j&1<<3 | i>>2<<2 | j>>1&3 },
	func(j, i int) (int, int) { return i, j },
}

// x16Perm is the rodata of the transposition's VPERMI2D indices, filled
// as x16Transpose emits the steps.
var x16Perm []uint32

// x16Transpose emits the step from layout a to layout b: each register of
// b is one VPERMI2D over the two registers of a it draws from, with an
// index from x16Perm. src are a's registers; dst names b's (a register
// from z where dst[c] is empty). It returns b's registers and frees a's.
func x16Transpose(z *zalloc, src [8]string, dst [8]string, a, b func(j, i int) (int, int)) [8]string {
	for c := range 8 {
		var idx [16]uint32
		var from []int
		for j := range 16 {
			for i := range 8 {
				r, d := b(j, i)
				if r != c {
					continue
				}
				sr, sd := a(j, i)
				k := slices.Index(from, sr)
				if k < 0 {
					k = len(from)
					from = append(from, sr)
				}
				idx[d] = uint32(16*k + sd)
			}
		}
		if len(from) != 2 {
			log.Fatalf("sha256_gen: transposition step draws register %d from %d registers", c, len(from))
		}
		if dst[c] == "" {
			dst[c] = z.get()
		}
		emit("\tVMOVDQU32 sha256X16Perm<>+0x%03x(SB), %s", 4*len(x16Perm), dst[c])
		emit("\tVPERMI2D %s, %s, %s", src[from[1]], src[from[0]], dst[c])
		x16Perm = append(x16Perm, idx[:]...)
	}
	z.put(src[:]...)
	return dst
}

// zState are the registers that hold word i of every lane's chaining
// value during the rounds.
var zState = [8]string{"Z0", "Z1", "Z2", "Z3", "Z4", "Z5", "Z6", "Z7"}

func genX16() {
	emit(`// func sha256x16AVX512(h *[16]SHA256State, p *[16][]byte, n int)
//
// The state is held word by word across the lanes: Zi holds word i of
// every lane's chaining value, transposed from h's 512 bytes in three
// VPERMI2D steps and back at the end (sha256X16Perm<>). SI is the offset
// of the current block in every lane; the chaining values entering a
// block are saved at 0(SP) for the final additions.
TEXT ·sha256x16AVX512(SB), $512-24
	MOVQ h+0(FP), DI
	MOVQ p+8(FP), BX
	MOVQ n+16(FP), CX
	XORQ SI, SI`)
	{
		z := newZalloc()
		var regs [8]string
		for r := range 8 {
			regs[r] = z.get()
			emit("\tVMOVDQU32 %d(DI), %s", 64*r, regs[r])
		}
		for s := range 3 {
			var dst [8]string
			if s == 2 {
				dst = zState
			}
			regs = x16Transpose(z, regs, dst, x16Layout[s], x16Layout[s+1])
		}
	}
	emit("\nx16block:")
	for i := range 8 {
		emit("	VMOVDQU32 Z%d, %d(SP)", i, 64*i)
	}
	z := newZalloc()
	w := x16Load(z)
	// s names the registers of a..h; each round's T1 accumulates in h's,
	// which then becomes the new a, and d's becomes the new e.
	s := [8]string{"Z0", "Z1", "Z2", "Z3", "Z4", "Z5", "Z6", "Z7"}
	rt := [3]string{z.get(), z.get(), z.get()}
	st := [3]string{z.get(), z.get(), z.get()}
	sigma := func(t [3]string, x string, r1, r2, r3 int, shift bool) {
		emit("\tVPRORD $%d, %s, %s", r1, x, t[0])
		emit("\tVPRORD $%d, %s, %s", r2, x, t[1])
		if shift {
			emit("\tVPSRLD $%d, %s, %s", r3, x, t[2])
		} else {
			emit("\tVPRORD $%d, %s, %s", r3, x, t[2])
		}
		emit("\tVPTERNLOGD $0x96, %s, %s, %s", t[2], t[1], t[0])
	}
	for t := range 64 {
		wt := w[t%16]
		if t >= 16 {
			// W[t] = sigma1(W[t-2]) + W[t-7] + sigma0(W[t-15]) + W[t-16],
			// over W[t-16]'s register.
			sigma(st, w[(t-15)%16], 7, 18, 3, true)
			emit("\tVPADDD %s, %s, %s", st[0], wt, wt)
			sigma(st, w[(t-2)%16], 17, 19, 10, true)
			emit("\tVPADDD %s, %s, %s", st[0], wt, wt)
			emit("\tVPADDD %s, %s, %s", w[(t-7)%16], wt, wt)
		}
		a, b, c, d, e, f, g, h := s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
		emit("\tVPADDD %s, %s, %s", wt, h, h)
		emit("\tVPADDD.BCST sha256K<>+0x%02x(SB), %s, %s", 4*t, h, h)
		sigma(rt, e, 6, 11, 25, false)
		emit("\tVPADDD %s, %s, %s", rt[0], h, h)
		emit("\tVMOVDQA32 %s, %s", e, rt[1])
		emit("\tVPTERNLOGD $0xca, %s, %s, %s", g, f, rt[1]) // Ch: e ? f : g
		emit("\tVPADDD %s, %s, %s", rt[1], h, h)
		emit("\tVPADDD %s, %s, %s", h, d, d)
		sigma(rt, a, 2, 13, 22, false)
		emit("\tVPADDD %s, %s, %s", rt[0], h, h)
		emit("\tVMOVDQA32 %s, %s", a, rt[1])
		emit("\tVPTERNLOGD $0xe8, %s, %s, %s", c, b, rt[1]) // Maj
		emit("\tVPADDD %s, %s, %s", rt[1], h, h)
		s = [8]string{h, a, b, c, d, e, f, g}
	}
	if s != [8]string{"Z0", "Z1", "Z2", "Z3", "Z4", "Z5", "Z6", "Z7"} {
		log.Fatal("sha256_gen: 16-lane state registers out of place after 64 rounds")
	}
	for i := range 8 {
		emit("\tVPADDD %d(SP), Z%d, Z%d", 64*i, i, i)
	}
	emit(`	ADDQ $64, SI
	DECQ CX
	JNZ x16block
`)
	{
		z := newZalloc()
		regs := zState
		for s := 3; s > 0; s-- {
			regs = x16Transpose(z, regs, [8]string{}, x16Layout[s], x16Layout[s-1])
		}
		for r := range 8 {
			emit("\tVMOVDQU32 %s, %d(DI)", regs[r], 64*r)
		}
	}
	emit("\tVZEROUPPER\n\tRET")
	emit("")
	emit("// sha256X16Perm<> are the VPERMI2D indices of the transpositions.")
	for k, v := range x16Perm {
		emit("DATA sha256X16Perm<>+0x%03x(SB)/4, $%d", 4*k, v)
	}
	emit("GLOBL sha256X16Perm<>(SB), RODATA|NOPTR, $%d", 4*len(x16Perm))
}

func main() {
	dst := flag.String("out", "sha256_amd64.s", "output file")
	flag.Parse()
	emit(`// Code generated by sha256_gen.go. DO NOT EDIT.

//go:build !purego

#include "textflag.h"

// SHA-256 compression for 1, 2 and 4 lanes on the SHA extensions; see
// sha256_gen.go for the design and sha256_amd64.go for the callers.

// sha256K<> is K0..K63 (FIPS 180-4 section 4.2.2), four per 16 bytes.`)
	for i, k := range sha256K() {
		emit("DATA sha256K<>+0x%02x(SB)/4, $0x%08x", 4*i, k)
	}
	emit("GLOBL sha256K<>(SB), RODATA|NOPTR, $256\n")
	emit("// sha256BSwap16<> reverses the bytes of each dword of a zmm register.")
	for i := range 8 {
		emit("DATA sha256BSwap16<>+0x%02x(SB)/8, $0x%016x", 8*i, []uint64{0x0405060700010203, 0x0c0d0e0f08090a0b}[i%2])
	}
	emit("GLOBL sha256BSwap16<>(SB), RODATA|NOPTR, $64\n")
	out.WriteString(macros)
	emit("")
	genX1()
	genX2()
	genX4()
	emit("")
	genX16()
	if err := os.WriteFile(*dst, out.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
