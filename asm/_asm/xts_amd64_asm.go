package main

// XTS kernels (IEEE 1619, dm-crypt's aes-xts-plain64 and aes-xts-plain).
//
// A call processes n consecutive sectors of ss bytes. Sector j's initial
// tweak is T = AES_k2(le64((first + j*step) & mask) || 0^8); block i of the
// sector is C = AES_k1(P ^ T*x^i) ^ T*x^i in GF(2^128) with the polynomial
// x^128 + x^7 + x^2 + x + 1, the 128-bit tweak read as a little-endian
// integer.
//
// Structure (like decSectors): the initial tweaks of a chunk of 8 (xmm) or
// 16 (ymm) sectors are encrypted side by side and kept in a stack buffer.
// For each sector, the tweaks of the first V registers' worth of blocks,
// T*x^0 .. T*x^(B-1) with B = 8 (xmm) or 16 (ymm), are derived from T in
// vector registers with mulX and kept on the stack; each iteration then
// loads V registers of data, XORs the tweak and round key 0, runs the
// rounds, and finishes with AESENCLAST(state, k[nr] ^ tweak), which is the
// output already XORed with its tweak. The tweaks then advance by x^B for
// the next iteration, again in vector registers. Multiplying by x^k for
// k < 64 is two 64-bit shifts, a byte shift to carry between the halves,
// and one carry-less multiply of the k overflow bits by 0x87.
//
// Every load of an iteration comes before its stores, so dst may equal src.
// ss must be a multiple of V*width (256 bytes for ymm, 128 for xmm).

import (
	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const xtsSig = "func(nr int, xk *byte, mask uint64, txk *byte, dst, src *byte, first, step uint64, ss int, n int)"

// mulX sets dst = src * x^k (0 < k < 64) in each 128-bit lane, using a and
// b as scratch and poly holding 0x87 in the low quadword of each lane. dst
// must differ from src, a and b.
func (m isa) mulX(src, dst, a, b, poly VecPhysical, k int) {
	if k%8 == 0 {
		// Whole bytes: one byte shift each way, no carries between the
		// quadwords to patch.
		n := uint64(k / 8)
		if m == sse {
			MOVO(src, a)
			PSRLDQ(Imm(16-n), a)
			PCLMULQDQ(Imm(0), poly, a)
			MOVO(src, dst)
			PSLLDQ(Imm(n), dst)
			PXOR(a, dst)
			return
		}
		VPSRLDQ(Imm(16-n), src, a)
		VPCLMULQDQ(Imm(0), poly, a, a)
		VPSLLDQ(Imm(n), src, dst)
		VPXOR(a, dst, dst)
		return
	}
	if m == sse {
		MOVO(src, dst)
		PSLLQ(Imm(uint64(k)), dst)
		MOVO(src, a)
		PSRLQ(Imm(uint64(64-k)), a)
		MOVO(a, b)
		PSLLDQ(Imm(8), b)
		PXOR(b, dst)
		PSRLDQ(Imm(8), a)
		PCLMULQDQ(Imm(0), poly, a)
		PXOR(a, dst)
		return
	}
	VPSLLQ(Imm(uint64(k)), src, dst)
	VPSRLQ(Imm(uint64(64-k)), src, a)
	VPSLLDQ(Imm(8), a, b)
	VPXOR(b, dst, dst)
	VPSRLDQ(Imm(8), a, a)
	VPCLMULQDQ(Imm(0), poly, a, a)
	VPXOR(a, dst, dst)
}

// loadXTSParams loads the arguments of xtsSig into AX, BX, SI, DI, DX, CX
// and R8–R11; R12–R15 stay free for the kernels' counters.
func loadXTSParams() (nr, xk, mask, txk, dst, src, first, step, ss, n GPPhysical) {
	load := func(name string, r GPPhysical) GPPhysical { return Load(Param(name), r).(GPPhysical) }
	return load("nr", RAX), load("xk", RBX), load("mask", RSI), load("txk", RDI), load("dst", RDX),
		load("src", RCX), load("first", R8), load("step", R9), load("ss", R10), load("n", R11)
}

func xtsSectors(name string, m isa, dec bool) {
	TEXT(name, 0, xtsSig)
	Pragma("noescape")
	verb := "encrypts"
	if dec {
		verb = "decrypts"
	}
	Doc(name+" "+verb+" n consecutive sectors of ss bytes with AES-XTS, the",
		"initial tweak of sector j being AES_txk(le64((first + j*step) & mask) || 0).")
	const V = 8
	width := m.width()
	lanes := width / 16
	chunk := V * lanes // sectors whose tweaks are encrypted together
	perIter := V * lanes
	ivbuf := AllocLocal(V * width)
	twbuf := AllocLocal(V * width)
	states := make([]VecPhysical, V)
	for i := range states {
		states[i] = m.reg(i)
	}
	key, poly, klast := m.reg(8), m.reg(14), m.reg(15)
	ta, tb, tc, td := m.reg(9), m.reg(10), m.reg(11), m.reg(12)
	te := m.reg(13)

	nr, xk, mask, txk, dst, src, first, step, ss, left := loadXTSParams()
	inChunk, blocks, t1, t2 := R12, R13, R14, R15

	Comment("poly = 0x87 in the low quadword of each lane")
	MOVQ(U32(0x87), t1)
	polyX := xregs[int(poly.PhysicalIndex())]
	if m == sse {
		MOVQ(t1, polyX)
	} else {
		VMOVQ(t1, polyX)
		VPBROADCASTQ(polyX, poly)
		// Keep the high quadword of each lane zero: imm 0 reads only the
		// low ones, but a clean constant is easier to reason about.
		VPXOR(ta, ta, ta)
		VPBLENDD(Imm(0xcc), ta, poly, poly)
	}

	chunkLoop := newLabel("xts_chunk")
	done := newLabel("xts_done")
	Label(chunkLoop)
	TESTQ(left, left)
	JZ(LabelRef(done))

	Comment("Initial tweaks of the next chunk of sectors")
	sectorIVs(m, chunkIVs{
		states: states, key: key, temp: func() VecPhysical { return ta }, nr: nr, xk: txk,
		first: first, step: step, mask: mask, left: left, inChunk: inChunk, t1: t1, t2: t2,
		buf: ivbuf, chunk: chunk,
	})
	m.lastKey(nr, xk, t1, klast)

	sectorLoop := newLabel("xts_sector")
	blockLoop := newLabel("xts_blocks")
	sectorDone := newLabel("xts_sector_done")

	Label(sectorLoop)
	Comment("Tweaks T*x^0 .. T*x^(B-1) of the sector's first iteration")
	t0x := xregs[int(ta.PhysicalIndex())]
	if m == sse {
		MOVOU(ivbuf.Idx(t2, 1), ta)
		MOVOU(ta, twbuf.Offset(0))
		for v := 1; v < V; v++ {
			m.mulX(ta, tb, tc, td, poly, v)
			MOVOU(tb, twbuf.Offset(16*v))
		}
	} else {
		VMOVDQU(ivbuf.Idx(t2, 1), t0x)
		// (T, T*x) in the two lanes of ta.
		t1x := xregs[int(tb.PhysicalIndex())]
		avxX.mulX(t0x, t1x, xregs[int(tc.PhysicalIndex())], xregs[int(td.PhysicalIndex())], xregs[int(poly.PhysicalIndex())], 1)
		VINSERTI128(Imm(1), t1x, ta, ta)
		VMOVDQU(ta, twbuf.Offset(0))
		for v := 1; v < V; v++ {
			m.mulX(ta, tb, tc, td, poly, 2*v)
			VMOVDQU(tb, twbuf.Offset(width*v))
		}
	}
	MOVQ(ss, blocks)
	SHRQ(Imm(4), blocks)

	op, last := opEnc, opEncLast
	if dec {
		op, last = opDec, opDecLast
	}
	Label(blockLoop)
	m.loadKey(Mem{Base: xk}, key)
	for v, s := range states {
		m.load(Mem{Base: src, Disp: v * width}, s)
		if m == sse {
			MOVOU(twbuf.Offset(v*width), ta)
			PXOR(ta, s)
		} else {
			VPXOR(twbuf.Offset(v*width), s, s)
		}
		m.xor(key, s)
	}
	m.rounds(op, nr, xk, key, states)
	finish := func(advance bool) {
		for v, s := range states {
			if m == sse {
				MOVOU(twbuf.Offset(v*width), ta)
				MOVO(ta, te)
				PXOR(klast, te)
			} else {
				VMOVDQU(twbuf.Offset(v*width), ta)
				VPXOR(klast, ta, te)
			}
			m.aes(last, te, s)
			m.store(s, Mem{Base: dst, Disp: v * width})
			if advance {
				m.mulX(ta, tb, tc, td, poly, perIter)
				m.store(tb, twbuf.Offset(v*width))
			}
		}
		ADDQ(U32(V*width), src)
		ADDQ(U32(V*width), dst)
	}
	// The sector's last iteration needs no next tweaks.
	lastIter := newLabel("xts_last_iter")
	CMPQ(blocks, Imm(uint64(perIter)))
	JE(LabelRef(lastIter))
	finish(true)
	SUBQ(Imm(uint64(perIter)), blocks)
	JMP(LabelRef(blockLoop))
	Label(lastIter)
	finish(false)

	Label(sectorDone)
	ADDQ(Imm(16), t2)
	DECQ(inChunk)
	JNZ(LabelRef(sectorLoop))
	JMP(LabelRef(chunkLoop))

	Label(done)
	Comment("Clear the tweak buffers and vector registers")
	m.clearVectors()
	for v := 0; v < V; v++ {
		m.store(m.reg(0), ivbuf.Offset(v*width))
		m.store(m.reg(0), twbuf.Offset(v*width))
	}
	RET()
}

var zregs = []VecPhysical{Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15,
	Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31}

// zmulX sets dst = src * x^k (0 < k < 64) in each 128-bit lane of zmm
// registers (AVX-512BW and VPCLMULQDQ); dst must differ from src and a.
func zmulX(src, dst, a, b, poly VecPhysical, k int) {
	if k%8 == 0 {
		n := uint64(k / 8)
		VPSRLDQ(Imm(16-n), src, a)
		VPCLMULQDQ(Imm(0), poly, a, a)
		VPSLLDQ(Imm(n), src, dst)
		VPXORQ(a, dst, dst)
		return
	}
	VPSLLQ(Imm(uint64(k)), src, dst)
	VPSRLQ(Imm(uint64(64-k)), src, a)
	VPSLLDQ(Imm(8), a, b)
	VPXORQ(b, dst, dst)
	VPSRLDQ(Imm(8), a, a)
	VPCLMULQDQ(Imm(0), poly, a, a)
	VPXORQ(a, dst, dst)
}

// xtsSectorsZ is the AVX-512 (zmm, four blocks per register) form of
// xtsSectors. With 32 vector registers the tweaks of an iteration stay in
// registers: states Z0-Z7, tweaks Z16-Z23, round key Z8, last round key Z9,
// poly Z10, scratch Z11-Z15. An iteration covers 32 blocks, so ss must be a
// multiple of 512; a chunk is 32 sectors.
// xtsLaneShifts holds the shift counts of xtsSectorsZ's first tweak
// register: quadwords of lane l shift left by l and right by 64-l.
var xtsLaneShifts Mem

func xtsConstants() {
	xtsLaneShifts = GLOBL("xtsLaneShifts", RODATA|NOPTR)
	// The assembler wants DATA in increasing offsets.
	for i, count := range []func(l int) uint64{func(l int) uint64 { return uint64(l) }, func(l int) uint64 { return uint64(64 - l) }} {
		for l := 0; l < 4; l++ {
			for q := 0; q < 2; q++ {
				DATA(64*i+16*l+8*q, U64(count(l)))
			}
		}
	}
}

func xtsSectorsZ(name string, dec bool) {
	TEXT(name, 0, xtsSig)
	Pragma("noescape")
	verb := "encrypts"
	if dec {
		verb = "decrypts"
	}
	Doc(name+" "+verb+" n consecutive sectors of ss bytes with AES-XTS on zmm",
		"registers, the initial tweak of sector j being AES_txk(le64((first + j*step) & mask) || 0).")
	const V, width, lanes = 8, 64, 4
	const chunk, perIter = V * lanes, V * lanes
	ivbuf := AllocLocal(V * width)
	states, tweaks := zregs[0:V], zregs[16:16+V]
	key, klast, poly := Z8, Z9, Z10
	ta, tb, tc, td := Z11, Z12, Z13, Z14
	shl, shr := Z25, Z26 // lane l: l and 64-l, per quadword

	nr, xk, mask, txk, dst, src, first, step, ss, left := loadXTSParams()
	inChunk, blocks, t1, t2 := R12, R13, R14, R15

	Comment("poly = 0x87 in the low quadword of each lane")
	MOVQ(U32(0x87), t1)
	VMOVQ(t1, X10)
	VSHUFI64X2(Imm(0), poly, poly, poly)
	Comment("per-lane shift counts: lane l multiplies by x^l")
	VMOVDQU64(xtsLaneShifts.Offset(0), shl)
	VMOVDQU64(xtsLaneShifts.Offset(64), shr)

	chunkLoop := newLabel("xtsz_chunk")
	done := newLabel("xtsz_done")
	Label(chunkLoop)
	TESTQ(left, left)
	JZ(LabelRef(done))

	Comment("Initial tweaks of the next chunk of 32 sectors")
	for v := 0; v < V; v++ {
		for l := 0; l < lanes; l++ {
			j := v*lanes + l
			MOVQ(first, t1)
			if j != 0 {
				MOVQ(step, t2)
				IMUL3Q(Imm(uint64(j)), t2, t2)
				ADDQ(t2, t1)
			}
			ANDQ(mask, t1)
			if l == 0 {
				VMOVQ(t1, xregs[v])
			} else {
				VMOVQ(t1, X11)
				VINSERTI32X4(Imm(uint64(l)), X11, states[v], states[v])
			}
		}
	}
	VBROADCASTI32X4(Mem{Base: txk}, key)
	for _, s := range states {
		VPXORQ(key, s, s)
	}
	zrounds(opEnc, nr, txk, key, states)
	zlastKey(nr, txk, t1, key)
	for v, s := range states {
		VAESENCLAST(key, s, s)
		VMOVDQU64(s, ivbuf.Offset(v*width))
	}
	MOVQ(step, t1)
	IMUL3Q(Imm(uint64(chunk)), t1, t1)
	ADDQ(t1, first)
	MOVQ(U32(chunk), inChunk)
	CMPQ(left, inChunk)
	CMOVQLT(left, inChunk)
	SUBQ(inChunk, left)
	XORQ(t2, t2)
	zlastKey(nr, xk, t1, klast)

	sectorLoop := newLabel("xtsz_sector")
	blockLoop := newLabel("xtsz_blocks")
	Label(sectorLoop)
	Comment("Tweaks T*x^0 .. T*x^31 of the sector's first iteration")
	// T in every lane, then lane l times x^l with per-lane shifts (a
	// shift by 64 gives zero, so lane 0 keeps T).
	VBROADCASTI32X4(ivbuf.Idx(t2, 1), td)
	VPSLLVQ(shl, td, tweaks[0])
	VPSRLVQ(shr, td, tc)
	VPSLLDQ(Imm(8), tc, tb)
	VPXORQ(tb, tweaks[0], tweaks[0])
	VPSRLDQ(Imm(8), tc, tc)
	VPCLMULQDQ(Imm(0), poly, tc, tc)
	VPXORQ(tc, tweaks[0], tweaks[0])
	VMOVDQA64(tweaks[0], ta)
	for v := 1; v < V; v++ {
		zmulX(ta, tweaks[v], tc, td, poly, 4*v)
	}
	MOVQ(ss, blocks)
	SHRQ(Imm(4), blocks)

	op, last := VAESENC, VAESENCLAST
	if dec {
		op, last = VAESDEC, VAESDECLAST
	}
	Label(blockLoop)
	VBROADCASTI32X4(Mem{Base: xk}, key)
	for v, s := range states {
		// s = P ^ tweak ^ k0 in one ternary-logic op.
		VMOVDQA64(key, s)
		VPTERNLOGQ(Imm(0x96), Mem{Base: src, Disp: v * width}, tweaks[v], s)
	}
	{
		doneR := newLabel("xtsz_rounds_done")
		for r := 1; r <= 13; r++ {
			switch r {
			case 10:
				CMPQ(nr, Imm(12))
				JB(LabelRef(doneR))
			case 12:
				JE(LabelRef(doneR))
			}
			VBROADCASTI32X4(Mem{Base: xk, Disp: 16 * r}, key)
			for _, s := range states {
				op(key, s, s)
			}
		}
		Label(doneR)
	}
	// The sector's last iteration needs no next tweaks (a 512-byte sector
	// has only one iteration).
	lastIter := newLabel("xtsz_last_iter")
	CMPQ(blocks, Imm(uint64(perIter)))
	JE(LabelRef(lastIter))
	for v, s := range states {
		VPXORQ(klast, tweaks[v], tb)
		last(tb, s, s)
		VMOVDQU64(s, Mem{Base: dst, Disp: v * width})
		// tweak *= x^32: four bytes up, the top four reduced.
		VPSRLDQ(Imm(12), tweaks[v], tc)
		VPCLMULQDQ(Imm(0), poly, tc, tc)
		VPSLLDQ(Imm(4), tweaks[v], tweaks[v])
		VPXORQ(tc, tweaks[v], tweaks[v])
	}
	ADDQ(U32(V*width), src)
	ADDQ(U32(V*width), dst)
	SUBQ(Imm(uint64(perIter)), blocks)
	JMP(LabelRef(blockLoop))
	Label(lastIter)
	for v, s := range states {
		VPXORQ(klast, tweaks[v], tb)
		last(tb, s, s)
		VMOVDQU64(s, Mem{Base: dst, Disp: v * width})
	}
	ADDQ(U32(V*width), src)
	ADDQ(U32(V*width), dst)

	ADDQ(Imm(16), t2)
	DECQ(inChunk)
	JNZ(LabelRef(sectorLoop))
	JMP(LabelRef(chunkLoop))

	Label(done)
	Comment("Clear the tweak buffer and every vector register")
	VZEROALL()
	for _, r := range zregs[16:] {
		VPXORQ(r, r, r)
	}
	for v := 0; v < V; v++ {
		VMOVDQU64(Z0, ivbuf.Offset(v*width))
	}
	RET()
}

func zrounds(op aesOp, nr, xk GPPhysical, k VecPhysical, states []VecPhysical) {
	done := newLabel("zrounds_done")
	f := []func(Op, Op, Op){VAESENC, VAESENCLAST, VAESDEC, VAESDECLAST}[op]
	for r := 1; r <= 13; r++ {
		switch r {
		case 10:
			CMPQ(nr, Imm(12))
			JB(LabelRef(done))
		case 12:
			JE(LabelRef(done))
		}
		VBROADCASTI32X4(Mem{Base: xk, Disp: 16 * r}, k)
		for _, s := range states {
			f(k, s, s)
		}
	}
	Label(done)
}

func zlastKey(nr, xk, tmp GPPhysical, k VecPhysical) {
	MOVQ(nr, tmp)
	SHLQ(Imm(4), tmp)
	ADDQ(xk, tmp)
	VBROADCASTI32X4(Mem{Base: tmp}, k)
}
