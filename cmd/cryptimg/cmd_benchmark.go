package main

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cryptimg/cryptimg/essiv"
	sector "github.com/cryptimg/cryptimg/header/cipher"
	"github.com/spf13/cobra"
	"golang.org/x/crypto/xts"
)

// benchmarkSizes are the request sizes of the kernel's tcrypt speed tests.
var benchmarkSizes = []int{16, 64, 256, 512, 1024, 1472, 4096, 8192}

type benchmarkOptions struct {
	cipher   string
	json     bool
	duration time.Duration
	keyBits  []int
	sizes    []int
}

// benchmarkCiphers are what benchmark --cipher measures, in order ("all":
// each).
var benchmarkCiphers = []string{"essiv", "xts", "integrity"}

func newBenchmarkCommand(g *globalOptions) *cobra.Command {
	var o benchmarkOptions
	cmd := &cobra.Command{
		Use:   "benchmark [--json]",
		Short: "Measure the sector ciphers against Go's libraries",
		Long: `Measure essiv(cbc(aes),sha256) in memory, as the kernel's tcrypt speed test
does: one request (one sector of the given size) per operation, for each key
size, request size and direction, with the Go standard library's AES-CBC and
an ESSIV IV per request measured in the same run as the baseline. The last
rows per key size and direction show the batch path the pipeline uses: 1 MiB
of 512-byte, then of 4096-byte sectors per call.

Then aes-xts-plain64 with 256- and 512-bit keys, one sector of 512 or 4096
bytes per request and 1 MiB batches, against golang.org/x/crypto/xts in the
same run; its batch rows also give the ratio to ESSIV-CBC decryption (256-bit
key) of the same batch, measured right after.

Then the authenticated modes of LUKS2 with integrity (--integrity): each
mode's encrypt (seal: encrypt and tag), decrypt (check and decrypt) and
verify (check only) of 1 MiB batches of 512- and 4096-byte sectors with
their tags, against crypto/sha256 over the same 1 MiB measured right after:
the per-sector HMAC-SHA256 is what bounds them.

All figures are for one core.

No disk I/O and no key derivation are involved.
` + exitStatusHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchmark(g, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cipher, "cipher", "all", "what to measure: essiv, xts, integrity or all")
	cmd.RegisterFlagCompletionFunc("cipher", cobra.FixedCompletions(append(slices.Clone(benchmarkCiphers), "all"), cobra.ShellCompDirectiveNoFileComp))
	f.BoolVar(&o.json, "json", false, "print JSON lines, one per measurement")
	f.DurationVar(&o.duration, "time", 100*time.Millisecond, "time spent on each measurement")
	f.IntSliceVar(&o.keyBits, "key-size", []int{128, 192, 256}, "key sizes in bits")
	f.IntSliceVar(&o.sizes, "sizes", benchmarkSizes, "request sizes in bytes (multiples of 16)")
	return cmd
}

// benchmarkRow is one line of the benchmark, also its --json form.
type benchmarkRow struct {
	Cipher        string  `json:"cipher"`
	KeyBits       int     `json:"key_bits"`
	Op            string  `json:"op"`
	Bytes         int     `json:"bytes"`
	Batch         int     `json:"batch"` // sectors per call
	Kernel        string  `json:"kernel"`
	OpsPerSec     float64 `json:"ops_per_second"`
	MBPerSec      float64 `json:"mb_per_second"`
	StdOpsPerSec  float64 `json:"stdlib_ops_per_second"`
	StdMBPerSec   float64 `json:"stdlib_mb_per_second"`
	SpeedupStdlib float64 `json:"speedup"`
	// EssivRatio, XTS batch rows only: throughput over ESSIV-CBC
	// decryption (256-bit key) of the same batch.
	EssivRatio float64 `json:"essiv_decrypt_ratio,omitempty"`
	// SectorSize, integrity rows only, where the stdlib figures are
	// crypto/sha256 over the same bytes.
	SectorSize int `json:"sector_size,omitempty"`
}

func runBenchmark(g *globalOptions, o benchmarkOptions) error {
	if o.duration <= 0 {
		return usagef("--time must be positive")
	}
	for _, b := range o.keyBits {
		if b != 128 && b != 192 && b != 256 {
			return usagef("unsupported --key-size %d: use 128, 192 or 256", b)
		}
	}
	for _, s := range o.sizes {
		if s <= 0 || s%16 != 0 || s > 1<<20 {
			return usagef("invalid request size %d: a multiple of 16 up to 1 MiB", s)
		}
	}
	runs := map[string]func(*globalOptions, benchmarkOptions) error{
		"essiv": benchmarkESSIV, "xts": benchmarkXTS, "integrity": benchmarkIntegrity,
	}
	if _, ok := runs[o.cipher]; !ok && o.cipher != "all" {
		return usagef("unsupported --cipher %q: use essiv, xts, integrity or all", o.cipher)
	}
	for _, name := range benchmarkCiphers {
		if o.cipher == name || o.cipher == "all" {
			if err := runs[name](g, o); err != nil {
				return err
			}
		}
	}
	return nil
}

func benchmarkESSIV(g *globalOptions, o benchmarkOptions) error {
	if !o.json {
		fmt.Fprintf(g.stdout, "testing speed of essiv(cbc(aes),sha256), kernel %s, against Go's crypto/cipher CBC\n", essiv.Kernel())
		fmt.Fprintf(g.stdout, "%4s %-8s %8s %6s %12s %10s %12s %10s %8s\n",
			"key", "op", "bytes", "batch", "ops/s", "MB/s", "std ops/s", "std MB/s", "speedup")
	}
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i * 37)
	}
	for _, bits := range o.keyBits {
		k := key[:bits/8]
		c, err := essiv.NewCipher(k)
		if err != nil {
			return err
		}
		std := newStdESSIV(k)
		for _, op := range []string{"encrypt", "decrypt"} {
			enc := op == "encrypt"
			type job struct{ size, batch int }
			jobs := make([]job, 0, len(o.sizes)+1)
			for _, s := range o.sizes {
				jobs = append(jobs, job{s, 1})
			}
			jobs = append(jobs, job{512, 2048}, job{4096, 256})
			for _, j := range jobs {
				n := j.size * j.batch
				buf := make([]byte, n)
				ours := measure(o.duration, func(i uint64) {
					switch {
					case j.batch > 1 && enc:
						c.EncryptSectors(buf, buf, i, j.size)
					case j.batch > 1:
						c.DecryptSectors(buf, buf, i, j.size)
					case enc:
						c.Encrypt(buf, buf, i)
					default:
						c.Decrypt(buf, buf, i)
					}
				})
				theirs := measure(o.duration, func(i uint64) {
					for s := 0; s < j.batch; s++ {
						std.crypt(buf[s*j.size:(s+1)*j.size], i+uint64(s*j.size/512), enc)
					}
				})
				row := benchmarkRow{
					Cipher: "aes-cbc-essiv:sha256", KeyBits: bits, Op: op, Bytes: n, Batch: j.batch, Kernel: essiv.Kernel(),
					OpsPerSec: ours, MBPerSec: ours * float64(n) / 1e6,
					StdOpsPerSec: theirs, StdMBPerSec: theirs * float64(n) / 1e6,
					SpeedupStdlib: ours / theirs,
				}
				if o.json {
					if err := json.NewEncoder(g.stdout).Encode(row); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(g.stdout, "%4d %-8s %8d %6d %12.0f %10.1f %12.0f %10.1f %7.2fx\n",
					bits, op, n, j.batch, row.OpsPerSec, row.MBPerSec, row.StdOpsPerSec, row.StdMBPerSec, row.SpeedupStdlib)
			}
		}
		c.Clear()
	}
	return nil
}

// benchmarkXTS measures aes-xts-plain64 against golang.org/x/crypto/xts.
func benchmarkXTS(g *globalOptions, o benchmarkOptions) error {
	ref, err := sector.Parse("aes-xts-plain64")
	if err != nil {
		return err
	}
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i*53 + 7)
	}
	kernel := sector.XTSKernel()
	if !o.json {
		fmt.Fprintf(g.stdout, "\ntesting speed of xts(aes) with plain64 IVs, kernel %s, against golang.org/x/crypto/xts\n", kernel)
		fmt.Fprintf(g.stdout, "%4s %-8s %8s %6s %12s %10s %12s %10s %8s %8s\n",
			"key", "op", "bytes", "batch", "ops/s", "MB/s", "x ops/s", "x MB/s", "speedup", "/essiv")
	}
	ess, err := essiv.NewCipher(key[:32])
	if err != nil {
		return err
	}
	defer ess.Clear()
	for _, bits := range []int{256, 512} {
		k := key[:bits/8]
		cs := map[int]sector.Sector{}
		for _, ss := range []int{512, 4096} {
			if cs[ss], err = ref.NewSector(k, sector.Geometry{SectorSize: ss}); err != nil {
				return err
			}
		}
		x, err := xts.NewCipher(aes.NewCipher, k)
		if err != nil {
			return err
		}
		for _, op := range []string{"encrypt", "decrypt"} {
			enc := op == "encrypt"
			for _, j := range []struct{ size, batch int }{{512, 1}, {4096, 1}, {512, 2048}, {4096, 256}} {
				n := j.size * j.batch
				buf := make([]byte, n)
				ours := measure(o.duration, func(i uint64) {
					if enc {
						cs[j.size].EncryptSectors(buf, buf, i)
					} else {
						cs[j.size].DecryptSectors(buf, buf, i)
					}
				})
				theirs := measure(o.duration, func(i uint64) {
					for s := 0; s < j.batch; s++ {
						b := buf[s*j.size : (s+1)*j.size]
						if enc {
							x.Encrypt(b, b, i+uint64(s*j.size/512))
						} else {
							x.Decrypt(b, b, i+uint64(s*j.size/512))
						}
					}
				})
				row := benchmarkRow{
					Cipher: "aes-xts-plain64", KeyBits: bits, Op: op, Bytes: n, Batch: j.batch, Kernel: kernel,
					OpsPerSec: ours, MBPerSec: ours * float64(n) / 1e6,
					StdOpsPerSec: theirs, StdMBPerSec: theirs * float64(n) / 1e6,
					SpeedupStdlib: ours / theirs,
				}
				ratio := ""
				if j.batch > 1 {
					e := measure(o.duration, func(i uint64) { ess.DecryptSectors(buf, buf, i, j.size) })
					row.EssivRatio = ours / e
					ratio = fmt.Sprintf("%7.2fx", row.EssivRatio)
				}
				if o.json {
					if err := json.NewEncoder(g.stdout).Encode(row); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(g.stdout, "%4d %-8s %8d %6d %12.0f %10.1f %12.0f %10.1f %7.2fx %8s\n",
					bits, op, n, j.batch, row.OpsPerSec, row.MBPerSec, row.StdOpsPerSec, row.StdMBPerSec, row.SpeedupStdlib, ratio)
			}
		}
		for _, c := range cs {
			c.Clear()
		}
	}
	return nil
}

// benchmarkIntegrity measures the authenticated modes on 1 MiB batches
// against crypto/sha256 over the same bytes.
func benchmarkIntegrity(g *globalOptions, o benchmarkOptions) error {
	const n = 1 << 20
	if !o.json {
		fmt.Fprintf(g.stdout, "\ntesting speed of the integrity modes, HMAC-SHA256 by %s, against crypto/sha256 over the same bytes\n", sector.MACKernel())
		fmt.Fprintf(g.stdout, "%-42s %4s %-8s %6s %10s %10s %8s\n",
			"mode", "key", "op", "sector", "MB/s", "sha256", "ratio")
	}
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i * 31)
	}
	for _, m := range sector.AuthModes() {
		key := make([]byte, m.DefaultCipherKeyBytes+m.MACKeyBytes)
		for i := range key {
			key[i] = byte(i*29 + 3)
		}
		for _, ss := range []int{512, 4096} {
			a, err := m.NewSector(key, sector.Geometry{SectorSize: ss})
			if err != nil {
				return err
			}
			tags := make([]byte, n/ss*a.TagSize())
			if err := a.Seal(dst, tags, src, 0); err != nil {
				return err
			}
			ops := []struct {
				name string
				f    func(i uint64) error
			}{
				{"encrypt", func(uint64) error { return a.Seal(dst, tags, src, 0) }},
				{"decrypt", func(uint64) error { return a.Open(src, dst, tags, 0) }},
				{"verify", func(uint64) error { return a.Check(dst, tags, 0) }},
			}
			for _, op := range ops {
				var opErr error
				ours := measure(o.duration, func(i uint64) {
					if err := op.f(i); err != nil && opErr == nil {
						opErr = err
					}
				})
				if opErr != nil {
					return fmt.Errorf("benchmark %s %s: %w", m.Name(), op.name, opErr)
				}
				theirs := measure(o.duration, func(uint64) { sha256.Sum256(dst) })
				row := benchmarkRow{
					Cipher: m.Name(), KeyBits: 8 * m.DefaultCipherKeyBytes, Op: op.name, Bytes: n, Batch: n / ss,
					Kernel: sector.MACKernel(), SectorSize: ss,
					OpsPerSec: ours, MBPerSec: ours * n / 1e6,
					StdOpsPerSec: theirs, StdMBPerSec: theirs * n / 1e6,
					SpeedupStdlib: ours / theirs,
				}
				if m.MACKeyBytes == 0 {
					row.Kernel = "crypto/cipher"
				}
				if o.json {
					if err := json.NewEncoder(g.stdout).Encode(row); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(g.stdout, "%-42s %4d %-8s %6d %10.1f %10.1f %7.2fx\n",
					m.Name(), row.KeyBits, op.name, ss, row.MBPerSec, row.StdMBPerSec, row.SpeedupStdlib)
			}
			a.Clear()
		}
	}
	return nil
}

// measure runs f for about d and returns calls per second. The argument
// is the call number, used as the sector number.
func measure(d time.Duration, f func(i uint64)) float64 {
	f(0) // warm up
	var calls uint64
	start := time.Now()
	for batch := uint64(1); ; batch *= 2 {
		for range batch {
			f(calls)
			calls++
		}
		if el := time.Since(start); el >= d {
			return float64(calls) / el.Seconds()
		}
	}
}

// stdESSIV is the baseline: crypto/aes and crypto/cipher CBC modes reused
// across requests through SetIV, and one block encryption per request for
// the ESSIV IV.
type stdESSIV struct {
	iv       cipher.Block
	enc, dec cipher.BlockMode
	ivbuf    []byte
}

func newStdESSIV(key []byte) *stdESSIV {
	b, _ := aes.NewCipher(key)
	salt := sha256.Sum256(key)
	ivb, _ := aes.NewCipher(salt[:])
	zero := make([]byte, 16)
	return &stdESSIV{iv: ivb, enc: cipher.NewCBCEncrypter(b, zero), dec: cipher.NewCBCDecrypter(b, zero), ivbuf: make([]byte, 16)}
}

func (s *stdESSIV) crypt(buf []byte, sector uint64, encrypt bool) {
	clear(s.ivbuf)
	bin.LittleEndian.PutUint64(s.ivbuf, sector)
	s.iv.Encrypt(s.ivbuf, s.ivbuf)
	m := s.dec
	if encrypt {
		m = s.enc
	}
	m.(interface{ SetIV([]byte) }).SetIV(s.ivbuf)
	m.CryptBlocks(buf, buf)
}
