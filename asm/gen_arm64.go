//go:build ignore

// Command gen_arm64 writes cbc_arm64.s and cbc_arm64_stubs.go: the arm64
// ESSIV-CBC kernels on the ARMv8 Crypto Extensions (AESE/AESMC, AESD/AESIMC).
// Run it with `GOARCH=arm64 go generate ./asm` from the module root (or `go
// run gen_arm64.go` in this directory); scripts/test-arm64.sh checks that the
// checked-in output is current.
//
// # Register plan
//
// Bulk round keys live in V17–V31 for the whole call, laid out so that the
// last round key is always V31: round key i of an nr-round schedule is in
// V(31-nr+i). AES-256 uses V17–V31, AES-192 V19–V31, AES-128 V21–V31, and
// the round chain is entered at the first register the key size uses, so
// the shorter schedules skip the leading rounds.
//
// Encryption runs N sectors side by side (N lanes, 1 ≤ N ≤ 8), because CBC is
// serial within a sector: lane i keeps its chaining value in Vi and loads
// its plaintext into V(8+i). V16 holds rk[0] ^ rk[nr]. Each lane keeps the
// state before the final AddRoundKey, X = C ^ rk[nr], so the next block's
// first round is AESE(X, P ^ rk[0] ^ rk[nr]) = SubBytes(ShiftRows(C ^ P ^
// rk[0])): the plaintext XOR and the previous final AddRoundKey are folded
// into the round key operand of the first AESE and leave the serial chain,
// which is then nr AESE/AESMC steps long. The ciphertext C = X ^ rk[nr] is
// formed off the chain, in the register the plaintext came in.
//
// Decryption of one sector is parallel, so it runs 8 blocks at a time in
// V0–V7, with copies of the ciphertext in V8–V15 and the ciphertext block
// before them in V16 (the IV for the first block). The copies and V16 get
// the final decryption round key rk[0] XORed in while the AESD rounds run,
// so the end of the chain is a single XOR per block: P = X ^ (C ^ rk[0])
// with X the state after the last AESD. All 8 blocks are loaded before any
// is stored, so dst == src works.
//
// ESSIV IVs are computed 8 (or N) sectors at a time with the IV key
// streamed from memory one round key at a time through V8 (and V9), since
// V17–V31 are taken by the bulk key. The IV key's round count is a loop
// bound, so any key size works, though ESSIV always uses AES-256.
//
// Lane i reads and writes its sector through one walking pointer per
// direction with register post-increment: +sectorSize to reach the next
// lane, and 16-(N-1)*sectorSize after the last lane to come back to lane 0's
// next block. That keeps the general-register count independent of N.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"strings"
	"text/template"
)

// lastKeyReg holds rk[nr], the last round key of any key size.
const lastKeyReg = 31

// keyRegs returns the vector registers holding round keys first..last of an
// nr-round schedule.
func keyRegs(nr, first, last int) []int {
	var r []int
	for i := first; i <= last; i++ {
		r = append(r, lastKeyReg-nr+i)
	}
	return r
}

// vlist formats consecutive registers V(from)..V(from+n-1) as a register list.
func vlist(from, n int) string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("V%d.B16", from+i))
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// loadKeys emits loads of the rounds+1 keys at XK into V(31-nr)..V31 with
// as few 4-register VLD1s as possible.
func loadKeys(nr int) string {
	var b strings.Builder
	reg, left := lastKeyReg-nr, nr+1
	for left > 0 {
		n := min(left, 4)
		if left > n {
			fmt.Fprintf(&b, "\tVLD1.P\t%d(XK), %s\n", 16*n, vlist(reg, n))
		} else {
			fmt.Fprintf(&b, "\tVLD1\t(XK), %s\n", vlist(reg, n))
		}
		reg += n
		left -= n
	}
	return b.String()
}

// rounds emits one instruction pair per lane and per key register: op
// (AESE or AESD) with the key, then mix (AESMC or AESIMC) when mix is set.
// Pairs on the same register are adjacent so cores that fuse them can.
func rounds(op, mix string, keys []int, lanes int) string {
	var b strings.Builder
	for _, k := range keys {
		for i := range lanes {
			fmt.Fprintf(&b, "\t%s\tV%d.B16, V%d.B16\n", op, k, i)
			if mix != "" {
				fmt.Fprintf(&b, "\t%s\tV%d.B16, V%d.B16\n", mix, i, i)
			}
		}
	}
	return b.String()
}

// chain emits the middle rounds of a bulk-key pass for lanes blocks in
// V0..V(lanes-1): a dispatch on NR, then the MixColumns rounds from round
// key `from` (1 for encryption, whose round 0 is folded, 0 for decryption)
// up to nr-2, and the last op round with rk[nr-1]. The final AddRoundKey is
// left to the caller. label must be unique within the function.
func chain(op, mix string, from, lanes int, label string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\tCMP\t$12, NR\n\tBLT\t%s_128\n\tBEQ\t%s_192\n", label, label)
	// AES-256 needs rk[from]..; AES-192 and AES-128 join where their own
	// round key `from` sits in the register file.
	b.WriteString(rounds(op, mix, keyRegs(14, from, from+1), lanes))
	fmt.Fprintf(&b, "%s_192:\n", label)
	b.WriteString(rounds(op, mix, keyRegs(12, from, from+1), lanes))
	fmt.Fprintf(&b, "%s_128:\n", label)
	b.WriteString(rounds(op, mix, keyRegs(10, from, 8), lanes))
	b.WriteString(rounds(op, "", []int{lastKeyReg - 1}, lanes))
	return b.String()
}

// ivs emits the ESSIV IV inputs of lanes sectors into V0..V(lanes-1):
// block i is le64(SECTOR) || 0^8, SECTOR advancing by STEP per lane. The
// "ivrounds" template then runs the IV key over them.
func ivs(lanes int) string {
	var b strings.Builder
	for i := range lanes {
		// FMOVD to a D register zeroes the upper 64 bits.
		fmt.Fprintf(&b, "\tFMOVD\tSECTOR, F%d\n\tADD\tSTEP, SECTOR, SECTOR\n", i)
	}
	return b.String()
}

var funcs = template.FuncMap{
	"loadKeys": loadKeys,
	"rounds":   rounds,
	"chain":    chain,
	"ivs":      ivs,
	"vlist":    vlist,
	"seq": func(a, b int) []int {
		var s []int
		for i := a; i < b; i++ {
			s = append(s, i)
		}
		return s
	},
	"add": func(a, b int) int { return a + b },
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	},
	"sub": func(a, b int) int { return a - b },
}

const asmHeader = `// Code generated by gen_arm64.go. DO NOT EDIT.

//go:build !purego

#include "textflag.h"

`

const asmTemplate = `
// General registers shared by the kernels.
#define XK R0
#define NR R1
#define IVK R2
#define IVNR R3
#define DST R4
#define SRC R5
#define COUNT R6
#define SSIZE R7
#define SECTOR R8
#define STEP R9
#define BACK R10
#define SKIP R11
#define BLOCKS R12
#define IVXK R13
#define IVCNT R14
#define SCRATCH R15
#define LEFT R16

// func subWordCE(w uint32) uint32
// SubBytes of each byte of w: with w in all four columns and a zero round
// key, AESE's ShiftRows moves equal bytes onto each other.
TEXT ·subWordCE(SB), NOSPLIT, $0-12
	MOVWU	w+0(FP), R0
	VDUP	R0, V0.S4
	VEOR	V1.B16, V1.B16, V1.B16
	AESE	V1.B16, V0.B16
	VMOV	V0.S[0], R0
	MOVW	R0, ret+8(FP)
	RET

// func invMixColumnsCE(dst, src *[16]byte)
TEXT ·invMixColumnsCE(SB), NOSPLIT, $0-16
	MOVD	dst+0(FP), R0
	MOVD	src+8(FP), R1
	VLD1	(R1), [V0.B16]
	AESIMC	V0.B16, V0.B16
	VST1	[V0.B16], (R0)
	RET

{{define "ivrounds"}}
	MOVD	IVK, IVXK
	SUB	$1, IVNR, IVCNT
{{.Label}}_ivloop:
	VLD1.P	16(IVXK), [V8.B16]
{{rounds "AESE" "AESMC" (seq 8 9) .Lanes}}
	SUBS	$1, IVCNT, IVCNT
	BNE	{{.Label}}_ivloop
	VLD1	(IVXK), [V8.B16, V9.B16]
{{end}}

{{define "loadargs"}}
	MOVD	xk+0(FP), XK
	MOVD	nr+8(FP), NR
	MOVD	ivxk+16(FP), IVK
	MOVD	ivnr+24(FP), IVNR
	MOVD	dst+32(FP), DST
	MOVD	src+40(FP), SRC
	MOVD	{{.}}+48(FP), COUNT
	MOVD	sectorSize+56(FP), SSIZE
	MOVD	sector+64(FP), SECTOR
	MOVD	step+72(FP), STEP
{{end}}

{{define "keys"}}
	CMP	$12, NR
	BLT	{{.Label}}_keys128
	BEQ	{{.Label}}_keys192
{{loadKeys 14}}
{{if .Fold}}	VEOR	V17.B16, V31.B16, V16.B16
{{end}}
	B	{{.Label}}_keysdone
{{.Label}}_keys192:
{{loadKeys 12}}
{{if .Fold}}	VEOR	V19.B16, V31.B16, V16.B16
{{end}}
	B	{{.Label}}_keysdone
{{.Label}}_keys128:
{{loadKeys 10}}
{{if .Fold}}	VEOR	V21.B16, V31.B16, V16.B16
{{end}}
{{.Label}}_keysdone:
{{end}}

{{range $n := seq 1 9}}
// func encLanes{{$n}}CE(xk *[240]byte, nr int, ivxk *[240]byte, ivnr int, dst, src *byte, groups, sectorSize int, sector, step uint64)
// Encrypts groups×{{$n}} consecutive sectors, {{$n}} at a time.
TEXT ·encLanes{{$n}}CE(SB), NOSPLIT, $0-80
{{template "loadargs" "groups"}}
{{template "keys" (dict "Label" "enc" "Fold" true)}}
	// SKIP = ({{$n}}-1)*sectorSize, BACK = 16-SKIP.
	MOVD	${{sub $n 1}}, SKIP
	MUL	SSIZE, SKIP, SKIP
	MOVD	$16, BACK
	SUB	SKIP, BACK, BACK

enc_group:
{{ivs $n}}
{{template "ivrounds" (dict "Label" "enc" "Lanes" $n)}}
	VEOR	V31.B16, V9.B16, V9.B16
{{rounds "AESE" "" (seq 8 9) $n}}
{{range $i := seq 0 $n}}	VEOR	V9.B16, V{{$i}}.B16, V{{$i}}.B16
{{end}}
	// Lane registers = IV ^ rk[nr], the X of a block before the first.
	LSR	$4, SSIZE, BLOCKS

enc_block:
{{range $i := seq 0 $n}}
	VLD1.P	(SRC)({{if eq $i (sub $n 1)}}BACK{{else}}SSIZE{{end}}), [V{{add 8 $i}}.B16]
{{end}}
{{range $i := seq 0 $n}}
	VEOR	V16.B16, V{{add 8 $i}}.B16, V{{add 8 $i}}.B16
{{end}}
{{range $i := seq 0 $n}}	AESE	V{{add 8 $i}}.B16, V{{$i}}.B16
	AESMC	V{{$i}}.B16, V{{$i}}.B16
{{end}}
{{chain "AESE" "AESMC" 1 $n "enc_r"}}
{{range $i := seq 0 $n}}	VEOR	V31.B16, V{{$i}}.B16, V{{add 8 $i}}.B16
{{end}}
{{range $i := seq 0 $n}}	VST1.P	[V{{add 8 $i}}.B16], (DST)({{if eq $i (sub $n 1)}}BACK{{else}}SSIZE{{end}})
{{end}}
	SUBS	$1, BLOCKS, BLOCKS
	BNE	enc_block

	// The pointers are at lane 1's first block; skip to the next group.
	ADD	SKIP, SRC, SRC
	ADD	SKIP, DST, DST
	SUBS	$1, COUNT, COUNT
	BNE	enc_group
	RET
{{end}}

// func decCE(xk *[240]byte, nr int, ivxk *[240]byte, ivnr int, dst, src *byte, sectors, sectorSize int, sector, step uint64)
// Decrypts sectors consecutive sectors. The IVs of 8 sectors at a time are
// computed together and parked, as IV ^ rk[0], in the frame, which is wiped
// on return.
TEXT ·decCE(SB), NOSPLIT, $128-80
{{template "loadargs" "sectors"}}
{{template "keys" (dict "Label" "dec" "Fold" false)}}
	ADD	$8, RSP, SCRATCH

dec_group:
{{ivs 8}}
{{template "ivrounds" (dict "Label" "dec" "Lanes" 8)}}
	VEOR	V31.B16, V9.B16, V9.B16
{{rounds "AESE" "" (seq 8 9) 8}}
{{range $i := seq 0 8}}	VEOR	V9.B16, V{{$i}}.B16, V{{$i}}.B16
{{end}}
	MOVD	SCRATCH, IVXK
	VST1.P	{{vlist 0 4}}, 64(IVXK)
	VST1	{{vlist 4 4}}, (IVXK)
	// LEFT = min(COUNT, 8) sectors use these IVs.
	MOVD	$8, LEFT
	CMP	LEFT, COUNT
	CSEL	LT, COUNT, LEFT, LEFT
	SUB	LEFT, COUNT, COUNT
	MOVD	SCRATCH, IVXK

dec_sector:
	VLD1.P	16(IVXK), [V16.B16]
	LSR	$4, SSIZE, BLOCKS
	CMP	$8, BLOCKS
	BLT	dec_tail

dec_8:
	VLD1	(SRC), {{vlist 0 4}}
	VLD1.P	64(SRC), {{vlist 8 4}}
	VLD1	(SRC), {{vlist 4 4}}
	VLD1.P	64(SRC), {{vlist 12 4}}
{{range $i := seq 8 16}}	VEOR	V31.B16, V{{$i}}.B16, V{{$i}}.B16
{{end}}
{{chain "AESD" "AESIMC" 0 8 "dec_r8"}}
	VEOR	V16.B16, V0.B16, V0.B16
{{range $i := seq 1 8}}
	VEOR	V{{add 7 $i}}.B16, V{{$i}}.B16, V{{$i}}.B16
{{end}}
	VORR	V15.B16, V15.B16, V16.B16
	VST1.P	{{vlist 0 4}}, 64(DST)
	VST1.P	{{vlist 4 4}}, 64(DST)
	SUB	$8, BLOCKS, BLOCKS
	CMP	$8, BLOCKS
	BGE	dec_8

dec_tail:
	CBZ	BLOCKS, dec_sectordone

dec_1:
	VLD1.P	16(SRC), [V8.B16]
	VORR	V8.B16, V8.B16, V0.B16
	VEOR	V31.B16, V8.B16, V8.B16
{{chain "AESD" "AESIMC" 0 1 "dec_r1"}}
	VEOR	V16.B16, V0.B16, V0.B16
	VORR	V8.B16, V8.B16, V16.B16
	VST1.P	[V0.B16], 16(DST)
	SUBS	$1, BLOCKS, BLOCKS
	BNE	dec_1

dec_sectordone:
	SUBS	$1, LEFT, LEFT
	BNE	dec_sector
	CBNZ	COUNT, dec_group

	// Wipe the parked IVs.
	VEOR	V0.B16, V0.B16, V0.B16
	VEOR	V1.B16, V1.B16, V1.B16
	VEOR	V2.B16, V2.B16, V2.B16
	VEOR	V3.B16, V3.B16, V3.B16
	MOVD	SCRATCH, IVXK
	VST1.P	{{vlist 0 4}}, 64(IVXK)
	VST1	{{vlist 0 4}}, (IVXK)
	RET
`

const stubTemplate = `// Code generated by gen_arm64.go. DO NOT EDIT.

//go:build !purego

package asm

// subWordCE applies the AES S-box to each byte of w.
//
//go:noescape
func subWordCE(w uint32) uint32

// invMixColumnsCE writes InvMixColumns(src) to dst.
//
//go:noescape
func invMixColumnsCE(dst, src *[16]byte)
{{range $n := seq 1 9}}
// encLanes{{$n}}CE encrypts groups×{{$n}} consecutive sectors of sectorSize bytes,
// {{$n}} at a time, with ESSIV IVs starting at sector and advancing by step.
//
//go:noescape
func encLanes{{$n}}CE(xk *[240]byte, nr int, ivxk *[240]byte, ivnr int, dst, src *byte, groups, sectorSize int, sector, step uint64)
{{end}}
// decCE decrypts sectors consecutive sectors of sectorSize bytes with ESSIV
// IVs starting at sector and advancing by step.
//
//go:noescape
func decCE(xk *[240]byte, nr int, ivxk *[240]byte, ivnr int, dst, src *byte, sectors, sectorSize int, sector, step uint64)
`

// tidy lays out the rendered assembly, so the template need not care about
// whitespace: instructions get one tab of indent, labels, directives and
// top-level comments none; blank lines are dropped except before a
// top-level comment or TEXT that follows code.
func tidy(src []byte) []byte {
	var out []string
	prevCode := false
	for _, line := range strings.Split(string(src), "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
			continue
		case strings.HasPrefix(line, "//"), strings.HasPrefix(t, "TEXT"):
			if prevCode {
				out = append(out, "")
			}
			out = append(out, t)
			prevCode = false
			continue
		case strings.HasPrefix(t, "//"):
			out = append(out, "\t"+t)
		case strings.HasSuffix(t, ":"), strings.HasPrefix(t, "#"):
			out = append(out, t)
		default:
			out = append(out, "\t"+t)
		}
		prevCode = true
	}
	return []byte(strings.Join(out, "\n") + "\n")
}

func main() {
	render := func(name, text string) []byte {
		var buf bytes.Buffer
		t := template.Must(template.New(name).Funcs(funcs).Parse(text))
		if err := t.Execute(&buf, nil); err != nil {
			log.Fatal(err)
		}
		return buf.Bytes()
	}
	asm := append([]byte(asmHeader), tidy(render("asm", asmTemplate))...)
	stubs, err := format.Source(render("stubs", stubTemplate))
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("cbc_arm64.s", asm, 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("cbc_arm64_stubs.go", stubs, 0o644); err != nil {
		log.Fatal(err)
	}
}
