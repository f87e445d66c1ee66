package asm

import (
	"encoding/binary"
	"math/bits"
)

// sha256IV is the initial hash value H(0) of FIPS 180-4 section 5.3.3: the
// first 32 bits of the fractional parts of the square roots of the first
// eight primes.
var sha256IV = SHA256State{
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
}

// sha256K holds the constants K0..K63 of FIPS 180-4 section 4.2.2: the
// first 32 bits of the fractional parts of the cube roots of the first 64
// primes. TestSHA256Constants checks them against that definition, from
// which sha256_gen.go computes the assembly's copy.
var sha256K = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5,
	0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
	0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
	0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5,
	0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// sha256BlocksGeneric compresses the whole blocks of p into h: FIPS 180-4
// section 6.2.2, steps 1 to 4, once per block. It uses only additions,
// rotations and bitwise operations, so its timing does not depend on the
// data (Init runs it over key blocks).
func sha256BlocksGeneric(h *SHA256State, p []byte) {
	var w [64]uint32
	for len(p) >= sha256BlockSize {
		// Step 1: the message schedule.
		for t := range 16 {
			w[t] = binary.BigEndian.Uint32(p[4*t:])
		}
		for t := 16; t < 64; t++ {
			x, y := w[t-15], w[t-2]
			s0 := bits.RotateLeft32(x, -7) ^ bits.RotateLeft32(x, -18) ^ x>>3
			s1 := bits.RotateLeft32(y, -17) ^ bits.RotateLeft32(y, -19) ^ y>>10
			w[t] = s1 + w[t-7] + s0 + w[t-16]
		}
		// Steps 2 and 3: the working variables and the 64 rounds.
		a, b, c, d, e, f, g, hh := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
		for t := range 64 {
			sigma1 := bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)
			ch := e&f ^ ^e&g
			t1 := hh + sigma1 + ch + sha256K[t] + w[t]
			sigma0 := bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)
			maj := a&b ^ a&c ^ b&c
			t2 := sigma0 + maj
			hh, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
		}
		// Step 4: the intermediate hash value.
		h[0] += a
		h[1] += b
		h[2] += c
		h[3] += d
		h[4] += e
		h[5] += f
		h[6] += g
		h[7] += hh
		p = p[sha256BlockSize:]
	}
	// The schedule of a key block is key material.
	clear(w[:])
}
