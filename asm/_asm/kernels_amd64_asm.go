// Command _asm generates the amd64 ESSIV and XTS kernels of package asm with
// avo. The XTS kernels are described in xts_amd64_asm.go.
//
// Kernel families:
//
//   - AES-NI (SSE, xmm): one sector per register.
//   - VAES+AVX2 (ymm): two sectors (encrypt) or two blocks (decrypt) per
//     register.
//
// Key layout (see asm_amd64.go): enc holds the nr+1 encryption round keys in
// order; dec holds the decryption keys in the order they are used, dec[0] =
// enc[nr], dec[r] = InvMixColumns(enc[nr-r]) for 0 < r < nr, dec[nr] =
// enc[0]. Rounds 1..9 are common to all key sizes; AES-192 adds rounds 10
// and 11, AES-256 adds 12 and 13, so one body serves every key size with a
// single compare of nr against 12.
//
// CBC encrypt runs several sectors side by side (multi-lane). Lane j of a
// call is the sector at src + j*ss. The chaining XOR is folded into the last
// round: the kernel keeps T = P[b+1] ^ k0 ^ k[nr] for every lane in a stack
// slot and computes X = AESENCLAST(T, state), which is already the round-0
// input of block b+1; the ciphertext C[b] = X ^ T ^ k[nr] is stored off the
// dependency chain. The plaintext for block b+2 is gathered one step ahead.
// Lanes 2 or 4 KiB apart would all hit one L1 set at every step, so the
// widest kernels have variants (encSkewed) whose registers run skewed by 2
// or 4 blocks.
//
// CBC decrypt works on one sector at a time, 8 (xmm) or 16 (ymm) blocks per
// iteration. All loads of an iteration, including the previous ciphertext
// blocks at -16, come before its stores, and the last ciphertext block is
// carried in a register, so decryption in place is safe. The chaining XOR
// is folded into the last round key as well.
//
// Both directions compute the ESSIV IVs inside the call, vectorised, with
// the IV schedule. Stack scratch (IVs, folded plaintext) is zeroed and all
// vector registers are cleared before returning.
package main

import (
	"flag"
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

//go:generate go run . -out ../kernels_amd64.s -stubs ../kernels_amd64_stubs.go -pkg asm

func main() {
	flag.Parse()
	ConstraintExpr("!purego")

	cpuid()
	subWord()
	invMixColumns()
	blockFunc("encryptBlockAsm", false)
	blockFunc("decryptBlockAsm", true)

	for _, v := range []int{8, 4, 2, 1} {
		encLanes(fmt.Sprintf("encLanes%dAESNI", v), v, sse)
	}
	for _, v := range []int{8, 4, 2, 1} {
		encLanes(fmt.Sprintf("encLanes%dVAES", 2*v), v, avxY)
	}
	encSkewed("encSkew2Lanes8AESNI", sse, 8, 2)
	encSkewed("encSkew2Lanes16VAES", avxY, 8, 2)
	encSkewed("encSkew4Lanes16VAES", avxY, 8, 4)
	encSkewed("encSkew4Lanes8VAES", avxY, 4, 4)
	decSectors("decAESNI", sse)
	decSectors("decVAES", avxY)
	xtsSectors("xtsEncAESNI", sse, false)
	xtsSectors("xtsDecAESNI", sse, true)
	xtsSectors("xtsEncVAES", avxY, false)
	xtsSectors("xtsDecVAES", avxY, true)
	xtsConstants()
	xtsSectorsZ("xtsEncAVX512", false)
	xtsSectorsZ("xtsDecAVX512", true)

	Generate()
}

// isa selects the instruction encoding and register width of a kernel.
type isa int

const (
	sse  isa = iota // legacy SSE + AES-NI, xmm
	avxX            // VEX encoded, xmm
	avxY            // VEX encoded VAES, ymm (two blocks per register)
)

var (
	xregs = []VecPhysical{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15}
	yregs = []VecPhysical{Y0, Y1, Y2, Y3, Y4, Y5, Y6, Y7, Y8, Y9, Y10, Y11, Y12, Y13, Y14, Y15}
)

func (m isa) reg(i int) VecPhysical {
	if m == avxY {
		return yregs[i]
	}
	return xregs[i]
}

// width is the number of bytes of one vector register.
func (m isa) width() int {
	if m == avxY {
		return 32
	}
	return 16
}

var labelSeq int

func newLabel(prefix string) string {
	labelSeq++
	return fmt.Sprintf("%s_%d", prefix, labelSeq)
}

// loadKey loads the 16-byte round key at m into k (broadcast to both lanes
// for ymm).
func (m isa) loadKey(mem Mem, k VecPhysical) {
	switch m {
	case sse:
		MOVOU(mem, k)
	case avxX:
		VMOVDQU(mem, k)
	case avxY:
		VBROADCASTI128(mem, k)
	}
}

func (m isa) load(mem Mem, r VecPhysical) {
	if m == sse {
		MOVOU(mem, r)
	} else {
		VMOVDQU(mem, r)
	}
}

func (m isa) store(r VecPhysical, mem Mem) {
	if m == sse {
		MOVOU(r, mem)
	} else {
		VMOVDQU(r, mem)
	}
}

// xor computes dst ^= src.
func (m isa) xor(src Op, dst VecPhysical) {
	if m == sse {
		PXOR(src, dst)
	} else {
		VPXOR(src, dst, dst)
	}
}

type aesOp int

const (
	opEnc aesOp = iota
	opEncLast
	opDec
	opDecLast
)

// aes applies one AES round with key k to dst.
func (m isa) aes(op aesOp, k Op, dst VecPhysical) {
	if m == sse {
		[]func(Op, Op){AESENC, AESENCLAST, AESDEC, AESDECLAST}[op](k, dst)
		return
	}
	[]func(Op, Op, Op){VAESENC, VAESENCLAST, VAESDEC, VAESDECLAST}[op](k, dst, dst)
}

// rounds emits AES rounds 1..nr-1 on states, with the round keys at
// xk+16*r loaded into k. nr is a register holding 10, 12 or 14.
func (m isa) rounds(op aesOp, nr, xk GPPhysical, k VecPhysical, states []VecPhysical) {
	done := newLabel("rounds_done")
	for r := 1; r <= 13; r++ {
		switch r {
		case 10:
			CMPQ(nr, Imm(12))
			JB(LabelRef(done))
		case 12:
			JE(LabelRef(done))
		}
		m.loadKey(Mem{Base: xk, Disp: 16 * r}, k)
		for _, s := range states {
			m.aes(op, k, s)
		}
	}
	Label(done)
}

// lastKey loads the key at xk+16*nr into k, using tmp.
func (m isa) lastKey(nr, xk, tmp GPPhysical, k VecPhysical) {
	MOVQ(nr, tmp)
	SHLQ(Imm(4), tmp)
	ADDQ(xk, tmp)
	m.loadKey(Mem{Base: tmp}, k)
}

// clearVectors zeroes every vector register.
func (m isa) clearVectors() {
	if m == sse {
		for _, r := range xregs {
			PXOR(r, r)
		}
		return
	}
	VZEROALL()
}

func cpuid() {
	TEXT("cpuidAsm", NOSPLIT, "func(leaf, sub uint32) (a, b, c, d uint32)")
	Doc("cpuidAsm executes CPUID with EAX=leaf and ECX=sub.")
	Load(Param("leaf"), EAX)
	Load(Param("sub"), ECX)
	CPUID()
	Store(EAX, ReturnIndex(0))
	Store(EBX, ReturnIndex(1))
	Store(ECX, ReturnIndex(2))
	Store(EDX, ReturnIndex(3))
	RET()
}

func subWord() {
	TEXT("subWordAsm", NOSPLIT, "func(w uint32) uint32")
	Doc("subWordAsm applies the AES S-box to each byte of w, in constant time.")
	Load(Param("w"), EAX)
	MOVD(EAX, X0)
	PSHUFD(Imm(0), X0, X0)
	AESKEYGENASSIST(Imm(0), X0, X0)
	MOVD(X0, EAX)
	PXOR(X0, X0)
	Store(EAX, ReturnIndex(0))
	RET()
}

func invMixColumns() {
	TEXT("invMixColumnsAsm", NOSPLIT, "func(dst, src *[16]byte)")
	Pragma("noescape")
	Doc("invMixColumnsAsm writes AESIMC(src) to dst.")
	d := Load(Param("dst"), RDI)
	s := Load(Param("src"), RSI)
	MOVOU(Mem{Base: s}, X0)
	AESIMC(X0, X0)
	MOVOU(X0, Mem{Base: d})
	PXOR(X0, X0)
	RET()
}

// blockFunc emits a single-block encryption or decryption with a schedule
// laid out as described in the package comment. Used by tests.
func blockFunc(name string, dec bool) {
	TEXT(name, NOSPLIT, "func(nr int, xk *byte, dst, src *byte)")
	Pragma("noescape")
	if dec {
		Doc(name + " decrypts one block with the decryption schedule xk.")
	} else {
		Doc(name + " encrypts one block with the encryption schedule xk.")
	}
	nr := Load(Param("nr"), RAX)
	xk := Load(Param("xk"), RBX)
	d := Load(Param("dst"), RDI)
	s := Load(Param("src"), RSI)
	op, last := opEnc, opEncLast
	if dec {
		op, last = opDec, opDecLast
	}
	MOVOU(Mem{Base: s}, X0)
	MOVOU(Mem{Base: xk}, X1)
	PXOR(X1, X0)
	sse.rounds(op, nr.(GPPhysical), xk.(GPPhysical), X1, []VecPhysical{X0})
	sse.lastKey(nr.(GPPhysical), xk.(GPPhysical), RCX, X1)
	sse.aes(last, X1, X0)
	MOVOU(X0, Mem{Base: d})
	PXOR(X0, X0)
	PXOR(X1, X1)
	RET()
}

// laneMem addresses the lane at base + v*ss + disp, v in 0..7, with r1, r3,
// r5, r7 = 1, 3, 5, 7 times ss.
func laneMem(base, r1, r3, r5, r7 GPPhysical, v, disp int) Mem {
	m := Mem{Base: base, Disp: disp}
	switch v {
	case 0:
	case 1:
		m.Index, m.Scale = r1, 1
	case 2:
		m.Index, m.Scale = r1, 2
	case 3:
		m.Index, m.Scale = r3, 1
	case 4:
		m.Index, m.Scale = r1, 4
	case 5:
		m.Index, m.Scale = r5, 1
	case 6:
		m.Index, m.Scale = r3, 2
	case 7:
		m.Index, m.Scale = r7, 1
	default:
		panic("lane out of range")
	}
	return m
}

const encSig = "func(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, first, step uint64, ss int)"

// encLanes emits a CBC encryption of exactly V (xmm) or 2V (ymm) sectors
// of ss bytes each, side by side, with fused ESSIV IVs.
//
// Registers: AX nr, BX xk, CX src lanes 0.., DX dst lanes 0.., SI/DI src/dst
// lanes V.. (ymm), R8/R9/R10/R11 = 1/3/5/7 times ss, R12 block counter,
// R13 scratch. Vectors: states 0..V-1, key 8, temps 9..13, k0^k[nr] 14,
// k[nr] 15.
func encLanes(name string, V int, m isa) {
	TEXT(name, 0, encSig)
	Pragma("noescape")
	lanes := V
	if m == avxY {
		lanes = 2 * V
	}
	Doc(fmt.Sprintf("%s encrypts %d consecutive sectors of ss bytes with AES-CBC,", name, lanes),
		"the IV of sector j being AES_ivxk(le64(first + j*step) || 0).")
	width := m.width()
	tslots := AllocLocal(V * width)
	states := make([]VecPhysical, V)
	for i := range states {
		states[i] = m.reg(i)
	}
	key := m.reg(8)
	temps := []VecPhysical{m.reg(9), m.reg(10), m.reg(11), m.reg(12), m.reg(13)}
	kfold, klast := m.reg(14), m.reg(15)
	tempSeq := 0
	temp := func() VecPhysical {
		tempSeq++
		return temps[tempSeq%len(temps)]
	}

	encIVs(m, V, states, temp)

	Comment("Bulk key and lane pointers")
	nr := Load(Param("nr"), RAX).(GPPhysical)
	xk := Load(Param("xk"), RBX).(GPPhysical)
	src := Load(Param("src"), RCX).(GPPhysical)
	dst := Load(Param("dst"), RDX).(GPPhysical)
	r1 := Load(Param("ss"), R8).(GPPhysical)
	r3, r5, r7 := R9, R10, R11
	LEAQ(Mem{Base: r1, Index: r1, Scale: 2}, r3)
	LEAQ(Mem{Base: r1, Index: r1, Scale: 4}, r5)
	LEAQ(Mem{Base: r3, Index: r1, Scale: 4}, r7)
	srcHi, dstHi := RSI, RDI
	if m == avxY {
		IMUL3Q(Imm(uint64(V)), r1, srcHi)
		MOVQ(srcHi, dstHi)
		ADDQ(src, srcHi)
		ADDQ(dst, dstHi)
	}
	blocks := R12
	MOVQ(r1, blocks)
	SHRQ(Imm(4), blocks)

	m.lastKey(nr, xk, R13, klast)
	m.loadKey(Mem{Base: xk}, key)
	if m == sse {
		MOVO(klast, kfold)
		PXOR(key, kfold)
	} else {
		VPXOR(key, klast, kfold)
	}

	// gather loads block disp/16 of every lane of vector v into r.
	gather := func(v, disp int, r VecPhysical) {
		switch m {
		case sse:
			MOVOU(laneMem(src, r1, r3, r5, r7, v, disp), r)
		case avxY:
			x := xregs[int(r.PhysicalIndex())]
			VMOVDQU(laneMem(src, r1, r3, r5, r7, v, disp), x)
			VINSERTI128(Imm(1), laneMem(srcHi, r1, r3, r5, r7, v, disp), r, r)
		}
	}
	scatter := func(v int, r VecPhysical) {
		switch m {
		case sse:
			MOVOU(r, laneMem(dst, r1, r3, r5, r7, v, 0))
		case avxY:
			x := xregs[int(r.PhysicalIndex())]
			VMOVDQU(x, laneMem(dst, r1, r3, r5, r7, v, 0))
			VEXTRACTI128(Imm(1), r, laneMem(dstHi, r1, r3, r5, r7, v, 0))
		}
	}
	// prepNext stores P[disp/16] ^ k0 ^ k[nr] of vector v into its slot.
	prepNext := func(v, disp int) {
		t := temp()
		gather(v, disp, t)
		m.xor(kfold, t)
		m.store(t, tslots.Offset(v*width))
	}
	advance := func() {
		ADDQ(Imm(16), src)
		ADDQ(Imm(16), dst)
		if m == avxY {
			ADDQ(Imm(16), srcHi)
			ADDQ(Imm(16), dstHi)
		}
	}

	Comment("Block 0: state = IV ^ P[0] ^ k0")
	for v := 0; v < V; v++ {
		t := temp()
		gather(v, 0, t)
		m.xor(t, states[v])
		m.xor(key, states[v])
	}
	final := newLabel("enc_final")
	loop := newLabel("enc_loop")
	lastIter := newLabel("enc_last_iter")
	CMPQ(blocks, Imm(1))
	JE(LabelRef(final))
	for v := 0; v < V; v++ {
		prepNext(v, 16)
	}
	SUBQ(Imm(2), blocks)

	body := func(loadNext bool) {
		m.rounds(opEnc, nr, xk, key, states)
		for v := 0; v < V; v++ {
			t := temp()
			m.load(tslots.Offset(v*width), t)
			m.aes(opEncLast, t, states[v])
			m.xor(states[v], t)
			m.xor(klast, t)
			scatter(v, t)
			if loadNext {
				prepNext(v, 32)
			}
		}
		advance()
	}

	Label(loop)
	TESTQ(blocks, blocks)
	JZ(LabelRef(lastIter))
	body(true)
	DECQ(blocks)
	JMP(LabelRef(loop))

	Label(lastIter)
	body(false)

	Label(final)
	m.rounds(opEnc, nr, xk, key, states)
	for v := 0; v < V; v++ {
		m.aes(opEncLast, klast, states[v])
		scatter(v, states[v])
	}

	Comment("Clear the stack slots and vector registers")
	m.clearVectors()
	for v := 0; v < V; v++ {
		m.store(m.reg(0), tslots.Offset(v*width))
	}
	RET()
}

// encIVs loads the ESSIV IVs of the lanes into states: state v holds sector
// first+v*step (low lane) and, for ymm, first+(v+V)*step (high lane). It
// uses R12..R15, AX and BX.
func encIVs(m isa, V int, states []VecPhysical, temp func() VecPhysical) {
	key := m.reg(8)
	Comment("ESSIV IVs")
	first := Load(Param("first"), R14).(GPPhysical)
	step := Load(Param("step"), R15).(GPPhysical)
	ivnr := Load(Param("ivnr"), R12).(GPPhysical)
	ivxk := Load(Param("ivxk"), R13).(GPPhysical)
	sector := func(j int, dst GPPhysical) {
		MOVQ(step, dst)
		if j != 1 {
			IMUL3Q(Imm(uint64(j)), dst, dst)
		}
		ADDQ(first, dst)
	}
	for v := 0; v < V; v++ {
		if v == 0 {
			MOVQ(first, RAX)
		} else {
			sector(v, RAX)
		}
		if m == sse {
			MOVQ(RAX, xregs[v])
		} else {
			VMOVQ(RAX, xregs[v])
		}
		if m == avxY {
			sector(v+V, RBX)
			t := temp()
			VMOVQ(RBX, xregs[int(t.PhysicalIndex())])
			VINSERTI128(Imm(1), xregs[int(t.PhysicalIndex())], states[v], states[v])
		}
	}
	m.loadKey(Mem{Base: ivxk}, key)
	for _, s := range states {
		m.xor(key, s)
	}
	m.rounds(opEnc, ivnr, ivxk, key, states)
	m.lastKey(ivnr, ivxk, RAX, key)
	for _, s := range states {
		m.aes(opEncLast, key, s)
	}
}

const decSig = "func(nr int, xk *byte, ivnr int, ivxk *byte, dst, src *byte, first, step uint64, ss, n int)"

// decSectors emits a CBC decryption of n consecutive sectors of ss bytes
// with fused ESSIV IVs, computed in chunks of 8 (xmm) or 16 (ymm) sectors
// into a stack buffer.
//
// Registers: AX nr, BX xk (decryption schedule), CX src, DX dst, SI ivnr,
// DI ivxk, R8 next sector number, R9 step, R10 ss, R11 sectors left,
// R12 sectors left in the chunk, R13 blocks left in the sector, R14 and
// R15 scratch (R15 = IV buffer offset while decrypting). Vectors: states
// 0..7, key 8, temps 9 and 12..15, carried ciphertext 10, last key 11.
// chunkIVs is what sectorIVs works on.
type chunkIVs struct {
	states  []VecPhysical      // V vectors, overwritten
	key     VecPhysical        // round key scratch
	temp    func() VecPhysical // scratch for a ymm's high lane
	nr, xk  GPPhysical         // the key schedule that encrypts the numbers
	first   GPPhysical         // number of the chunk's first sector; advanced
	step    GPPhysical         // number increment per sector
	mask    GPPhysical         // ANDed into each number unless nil
	left    GPPhysical         // sectors left; the chunk's are taken off
	inChunk GPPhysical         // set to the sectors in this chunk
	t1, t2  GPPhysical         // scratch; t2 ends zero
	buf     Mem                // V*width bytes: the encrypted numbers
	chunk   int                // sectors per chunk: V*lanes
}

// sectorIVs emits the per-sector AES of a chunk that ESSIV's IVs and
// XTS's initial tweaks share: AES_xk(le64((first + j*step) & mask) || 0)
// for each of the chunk's sectors j, lane by lane into buf; then first
// moves on by a chunk, inChunk = min(left, chunk), left -= inChunk and t2
// = 0.
func sectorIVs(m isa, c chunkIVs) {
	number := func(j int, r GPPhysical) {
		if j == 0 {
			MOVQ(c.first, r)
		} else {
			MOVQ(c.step, r)
			if j != 1 {
				IMUL3Q(Imm(uint64(j)), r, r)
			}
			ADDQ(c.first, r)
		}
		if c.mask != nil {
			ANDQ(c.mask, r)
		}
	}
	lanes := m.width() / 16
	for v := range c.states {
		lo := v * lanes
		number(lo, c.t1)
		if m == sse {
			MOVQ(c.t1, xregs[v])
		} else {
			VMOVQ(c.t1, xregs[v])
		}
		if m == avxY {
			number(lo+1, c.t2)
			t := c.temp()
			VMOVQ(c.t2, xregs[int(t.PhysicalIndex())])
			VINSERTI128(Imm(1), xregs[int(t.PhysicalIndex())], c.states[v], c.states[v])
		}
	}
	m.loadKey(Mem{Base: c.xk}, c.key)
	for _, s := range c.states {
		m.xor(c.key, s)
	}
	m.rounds(opEnc, c.nr, c.xk, c.key, c.states)
	m.lastKey(c.nr, c.xk, c.t1, c.key)
	for v, s := range c.states {
		m.aes(opEncLast, c.key, s)
		m.store(s, c.buf.Offset(v*m.width()))
	}
	MOVQ(c.step, c.t1)
	IMUL3Q(Imm(uint64(c.chunk)), c.t1, c.t1)
	ADDQ(c.t1, c.first)
	MOVQ(U32(c.chunk), c.inChunk)
	CMPQ(c.left, c.inChunk)
	CMOVQLT(c.left, c.inChunk)
	SUBQ(c.inChunk, c.left)
	XORQ(c.t2, c.t2)
}

func decSectors(name string, m isa) {
	TEXT(name, 0, decSig)
	Pragma("noescape")
	Doc(name+" decrypts n consecutive sectors of ss bytes with AES-CBC,",
		"the IV of sector j being AES_ivxk(le64(first + j*step) || 0).")
	const V = 8
	width := m.width()
	chunk := V * width / 16
	ivbuf := AllocLocal(V * width)
	states := make([]VecPhysical, V)
	for i := range states {
		states[i] = m.reg(i)
	}
	key := m.reg(8)
	temps := []VecPhysical{m.reg(9), m.reg(12), m.reg(13), m.reg(14), m.reg(15)}
	carry, klast := m.reg(10), m.reg(11)
	tempSeq := 0
	temp := func() VecPhysical {
		tempSeq++
		return temps[tempSeq%len(temps)]
	}

	nr := Load(Param("nr"), RAX).(GPPhysical)
	xk := Load(Param("xk"), RBX).(GPPhysical)
	ivnr := Load(Param("ivnr"), RSI).(GPPhysical)
	ivxk := Load(Param("ivxk"), RDI).(GPPhysical)
	dst := Load(Param("dst"), RDX).(GPPhysical)
	src := Load(Param("src"), RCX).(GPPhysical)
	first := Load(Param("first"), R8).(GPPhysical)
	step := Load(Param("step"), R9).(GPPhysical)
	ss := Load(Param("ss"), R10).(GPPhysical)
	left := Load(Param("n"), R11).(GPPhysical)
	inChunk, blocks, t1, t2 := R12, R13, R14, R15

	m.lastKey(nr, xk, t1, klast)

	chunkLoop := newLabel("dec_chunk")
	done := newLabel("dec_done")
	Label(chunkLoop)
	TESTQ(left, left)
	JZ(LabelRef(done))

	Comment("ESSIV IVs of the next chunk")
	sectorIVs(m, chunkIVs{
		states: states, key: key, temp: temp, nr: ivnr, xk: ivxk,
		first: first, step: step, left: left, inChunk: inChunk, t1: t1, t2: t2,
		buf: ivbuf, chunk: chunk,
	})

	sectorLoop := newLabel("dec_sector")
	bigLoop := newLabel("dec_big")
	tailLoop := newLabel("dec_tail")
	sectorDone := newLabel("dec_sector_done")
	perIter := V * width / 16 // blocks per main iteration

	Label(sectorLoop)
	carryX := xregs[int(carry.PhysicalIndex())]
	if m == sse {
		MOVOU(ivbuf.Idx(t2, 1), carryX)
	} else {
		VMOVDQU(ivbuf.Idx(t2, 1), carryX)
	}
	MOVQ(ss, blocks)
	SHRQ(Imm(4), blocks)

	Label(bigLoop)
	CMPQ(blocks, Imm(uint64(perIter)))
	JB(LabelRef(tailLoop))
	for v, s := range states {
		m.load(Mem{Base: src, Disp: v * width}, s)
	}
	m.loadKey(Mem{Base: xk}, key)
	for _, s := range states {
		m.xor(key, s)
	}
	m.rounds(opDec, nr, xk, key, states)
	for v, s := range states {
		t := temp()
		switch {
		case v == 0 && m == avxY:
			VINSERTI128(Imm(1), Mem{Base: src}, carry, t)
		case v == 0:
			MOVO(carry, t)
		default:
			m.load(Mem{Base: src, Disp: v*width - 16}, t)
		}
		m.xor(klast, t)
		m.aes(opDecLast, t, s)
	}
	if m == sse {
		MOVOU(Mem{Base: src, Disp: V*width - 16}, carryX)
	} else {
		VMOVDQU(Mem{Base: src, Disp: V*width - 16}, carryX)
	}
	for v, s := range states {
		m.store(s, Mem{Base: dst, Disp: v * width})
	}
	ADDQ(U32(V*width), src)
	ADDQ(U32(V*width), dst)
	SUBQ(Imm(uint64(perIter)), blocks)
	JMP(LabelRef(bigLoop))

	Comment("Remaining blocks of the sector, one at a time")
	x := isa(avxX)
	if m == sse {
		x = sse
	}
	Label(tailLoop)
	TESTQ(blocks, blocks)
	JZ(LabelRef(sectorDone))
	{
		s, k, t := X0, X8, X9
		x.load(Mem{Base: src}, s)
		x.loadKey(Mem{Base: xk}, k)
		x.xor(k, s)
		x.rounds(opDec, nr, xk, k, []VecPhysical{s})
		if x == sse {
			MOVO(carryX, t)
			PXOR(xregs[int(klast.PhysicalIndex())], t)
		} else {
			VPXOR(xregs[int(klast.PhysicalIndex())], carryX, t)
		}
		x.aes(opDecLast, t, s)
		x.load(Mem{Base: src}, carryX)
		x.store(s, Mem{Base: dst})
	}
	ADDQ(Imm(16), src)
	ADDQ(Imm(16), dst)
	DECQ(blocks)
	JMP(LabelRef(tailLoop))

	Label(sectorDone)
	ADDQ(Imm(16), t2)
	DECQ(inChunk)
	JNZ(LabelRef(sectorLoop))
	JMP(LabelRef(chunkLoop))

	Label(done)
	Comment("Clear the IV buffer and vector registers")
	m.clearVectors()
	for v := 0; v < V; v++ {
		m.store(m.reg(0), ivbuf.Offset(v*width))
	}
	RET()
}

// encSkewed emits a CBC encryption of exactly V (xmm) or 2V (ymm) sectors,
// like encLanes, but with the vectors' phases skewed: vector v works on
// block s - skew*v at global step s. With sectors 2 or 4 KiB apart, the
// lanes of an unskewed kernel all touch the same L1 set at every step
// (perf ref §3.7); skewed by one cache line per vector, each set holds at
// most the lines of one vector. Vector v starts skew*v steps late and
// stops as much later, so a call takes blocks + (V-1)*skew steps. Requires
// ss >= 16*((V-1)*skew+2).
//
// Registers as in encLanes; R12 counts the steps of a phase and R13 holds
// the number of blocks.
func encSkewed(name string, m isa, V, skew int) {
	TEXT(name, 0, encSig)
	Pragma("noescape")
	lanes := V
	if m == avxY {
		lanes = 2 * V
	}
	Doc(fmt.Sprintf("%s encrypts %d consecutive sectors of ss bytes with AES-CBC,", name, lanes),
		"the IV of sector j being AES_ivxk(le64(first + j*step) || 0), with the",
		fmt.Sprintf("vectors' phases skewed by %d blocks. ss must be at least %d.", skew, 16*((V-1)*skew+2)))
	width := m.width()
	tslots := AllocLocal(V * width)
	states := make([]VecPhysical, V)
	for i := range states {
		states[i] = m.reg(i)
	}
	key := m.reg(8)
	temps := []VecPhysical{m.reg(9), m.reg(10), m.reg(11), m.reg(12), m.reg(13)}
	kfold, klast := m.reg(14), m.reg(15)
	tempSeq := 0
	temp := func() VecPhysical {
		tempSeq++
		return temps[tempSeq%len(temps)]
	}

	encIVs(m, V, states, temp)

	Comment("Bulk key and lane pointers")
	nr := Load(Param("nr"), RAX).(GPPhysical)
	xk := Load(Param("xk"), RBX).(GPPhysical)
	src := Load(Param("src"), RCX).(GPPhysical)
	dst := Load(Param("dst"), RDX).(GPPhysical)
	r1 := Load(Param("ss"), R8).(GPPhysical)
	r3, r5, r7 := R9, R10, R11
	LEAQ(Mem{Base: r1, Index: r1, Scale: 2}, r3)
	LEAQ(Mem{Base: r1, Index: r1, Scale: 4}, r5)
	LEAQ(Mem{Base: r3, Index: r1, Scale: 4}, r7)
	srcHi, dstHi := RSI, RDI
	if m == avxY {
		IMUL3Q(Imm(uint64(V)), r1, srcHi)
		MOVQ(srcHi, dstHi)
		ADDQ(src, srcHi)
		ADDQ(dst, dstHi)
	}
	count, blocks := R12, R13

	m.lastKey(nr, xk, count, klast)
	m.loadKey(Mem{Base: xk}, key)
	if m == sse {
		MOVO(klast, kfold)
		PXOR(key, kfold)
	} else {
		VPXOR(key, klast, kfold)
	}
	MOVQ(r1, blocks)
	SHRQ(Imm(4), blocks)

	// Vector v's current block is at disp -16*skew*v from the pointers.
	base := func(v int) int { return -16 * skew * v }
	gather := func(v, disp int, r VecPhysical) {
		switch m {
		case sse:
			MOVOU(laneMem(src, r1, r3, r5, r7, v, base(v)+disp), r)
		case avxY:
			VMOVDQU(laneMem(src, r1, r3, r5, r7, v, base(v)+disp), xregs[int(r.PhysicalIndex())])
			VINSERTI128(Imm(1), laneMem(srcHi, r1, r3, r5, r7, v, base(v)+disp), r, r)
		}
	}
	scatter := func(v int, r VecPhysical) {
		switch m {
		case sse:
			MOVOU(r, laneMem(dst, r1, r3, r5, r7, v, base(v)))
		case avxY:
			VMOVDQU(xregs[int(r.PhysicalIndex())], laneMem(dst, r1, r3, r5, r7, v, base(v)))
			VEXTRACTI128(Imm(1), r, laneMem(dstHi, r1, r3, r5, r7, v, base(v)))
		}
	}
	prepNext := func(v, disp int) {
		t := temp()
		gather(v, disp, t)
		m.xor(kfold, t)
		m.store(t, tslots.Offset(v*width))
	}
	activate := func(v int) {
		Commentf("Vector %d starts: state = IV ^ P[0] ^ k0", v)
		m.loadKey(Mem{Base: xk}, key)
		t := temp()
		gather(v, 0, t)
		m.xor(t, states[v])
		m.xor(key, states[v])
		prepNext(v, 16)
	}
	const (
		normal = iota
		noLoad
		final
	)
	// step runs one global step for vectors lo..7, vector lo in mode
	// loMode and the others normal, then advances the pointers.
	step := func(lo, loMode int) {
		m.rounds(opEnc, nr, xk, key, states[lo:])
		for v := lo; v < V; v++ {
			mode := normal
			if v == lo {
				mode = loMode
			}
			if mode == final {
				m.aes(opEncLast, klast, states[v])
				scatter(v, states[v])
				continue
			}
			t := temp()
			m.load(tslots.Offset(v*width), t)
			m.aes(opEncLast, t, states[v])
			m.xor(states[v], t)
			m.xor(klast, t)
			scatter(v, t)
			if mode == normal {
				prepNext(v, 32)
			}
		}
		ADDQ(Imm(16), src)
		ADDQ(Imm(16), dst)
		if m == avxY {
			ADDQ(Imm(16), srcHi)
			ADDQ(Imm(16), dstHi)
		}
	}
	// loop runs step(lo, normal) count times; count may be 0.
	loop := func(lo int) {
		top, out := newLabel("skew_loop"), newLabel("skew_out")
		Label(top)
		TESTQ(count, count)
		JZ(LabelRef(out))
		step(lo, normal)
		DECQ(count)
		JMP(LabelRef(top))
		Label(out)
	}

	// Ramp-up: vectors 0..active-1 run while vector active waits for its
	// start, skew steps after the previous one.
	stepUp := func(active int) {
		m.rounds(opEnc, nr, xk, key, states[:active])
		for v := 0; v < active; v++ {
			t := temp()
			m.load(tslots.Offset(v*width), t)
			m.aes(opEncLast, t, states[v])
			m.xor(states[v], t)
			m.xor(klast, t)
			scatter(v, t)
			prepNext(v, 32)
		}
		ADDQ(Imm(16), src)
		ADDQ(Imm(16), dst)
		if m == avxY {
			ADDQ(Imm(16), srcHi)
			ADDQ(Imm(16), dstHi)
		}
	}
	activate(0)
	for p := 1; p < V; p++ {
		top := newLabel("skew_up")
		MOVQ(U32(skew), count)
		Label(top)
		stepUp(p)
		DECQ(count)
		JNZ(LabelRef(top))
		activate(p)
	}

	Comment("Steady state: blocks - 2 - (V-1)*skew steps with every vector")
	MOVQ(blocks, count)
	SUBQ(U32(2+(V-1)*skew), count)
	loop(0)

	Comment("Ramp-down: vector q finishes, skew steps apart")
	for q := 0; q < V; q++ {
		step(q, noLoad)
		step(q, final)
		if q < V-1 && skew > 2 {
			MOVQ(U32(skew-2), count)
			loop(q + 1)
		}
	}

	Comment("Clear the stack slots and vector registers")
	m.clearVectors()
	for v := 0; v < V; v++ {
		m.store(m.reg(0), tslots.Offset(v*width))
	}
	RET()
}
