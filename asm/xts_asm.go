//go:build (amd64 || arm64) && !purego

package asm

// xtsKernel is the signature of every XTS assembly kernel.
type xtsKernel func(nr int, xk *byte, mask uint64, txk *byte, dst, src *byte, first, step uint64, ss int, n int)

// xtsEnc makes the XTSFunc of an encryption kernel, which takes the data
// key's encryption schedule.
func xtsEnc(f xtsKernel) XTSFunc {
	return func(k, tk *Schedule, dst, src []byte, first, mask uint64, ss int) {
		xtsCall(f, &k.enc[0], k, tk, dst, src, first, mask, ss)
	}
}

// xtsDec makes the XTSFunc of a decryption kernel, which takes the data
// key's decryption schedule (the tweak key always encrypts).
func xtsDec(f xtsKernel) XTSFunc {
	return func(k, tk *Schedule, dst, src []byte, first, mask uint64, ss int) {
		xtsCall(f, &k.dec[0], k, tk, dst, src, first, mask, ss)
	}
}

// xtsCall runs a kernel over the whole batch. The kernels process up to 512
// bytes per iteration (zmm); the sector size must be a multiple of 512, as
// LUKS sectors are.
func xtsCall(f xtsKernel, xk *byte, k, tk *Schedule, dst, src []byte, first, mask uint64, ss int) {
	if ss <= 0 || ss%512 != 0 {
		panic("asm: XTS sector size is not a positive multiple of 512")
	}
	n := len(src) / ss
	if n == 0 {
		return
	}
	_ = dst[len(src)-1]
	f(k.rounds, xk, mask, &tk.enc[0], &dst[0], &src[0], first, uint64(ss/512), ss, n)
}
