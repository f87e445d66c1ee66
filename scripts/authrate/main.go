// Command authrate measures cryptimg's integrity data path with the
// destination's page allocation taken out: verify, decrypt and encrypt of
// LUKS2 images with integrity, through package image (what the commands
// call), side by side with plain SHA-256 over the same plaintext
// (crypto/sha256 on -j goroutines, as scripts/sha256rate), in one process
// and in interleaved rounds.
//
// decrypt and encrypt write into output files made in a warm-up round and
// kept: their tmpfs pages exist already, so a write costs its copy but no
// new page. On the machines here a new tmpfs page can cost anything from
// 0.1 to 3.4 s per GiB (the hypervisor takes back freed guest memory;
// /sys/module/page_reporting), which no program controls and which the
// SHA-256 baseline never pays; scripts/bench-integrity.sh measures the
// commands with it, dd beside them. copy is the write cryptimg still pays
// here, the plaintext copied into a kept file.
//
//	go run ./scripts/authrate [-size MiB] [-rounds N] [-dir DIR] [-modes m,...]
//
// It prints a Markdown table: per job the median wall and CPU seconds
// (user+sys of the whole process, from getrusage), GB/s of plaintext, and
// the per-round ratios to sha256 -j2: throughput (its wall ÷ the job's)
// and work per CPU second (its CPU ÷ the job's), as median (min–max).
package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
)

type mode struct {
	name, cipher, integrity string
	sectorSize              int
}

var modes = []mode{
	{"essiv-4096", "aes-cbc-essiv:sha256", "hmac(sha256)", 4096},
	{"xts-4096", "aes-xts-plain64", "hmac(sha256)", 4096},
	{"essiv-512", "aes-cbc-essiv:sha256", "hmac(sha256)", 512},
	{"gcm-4096", "aes-gcm-random", "aead", 4096},
}

func main() {
	sizeMiB := flag.Int("size", 1024, "plaintext MiB")
	rounds := flag.Int("rounds", 7, "measured rounds (after one warm-up round)")
	dir := flag.String("dir", "", "working directory (default: a new one in /dev/shm, removed at the end)")
	only := flag.String("modes", "", "comma-separated modes (default all: essiv-4096,xts-4096,essiv-512,gcm-4096)")
	jobKinds := flag.String("jobs", "", "comma-separated kinds to run besides the baseline: copy, verify, decrypt, encrypt (default all)")
	profile := flag.String("cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	chunkList := flag.String("chunks", "", "comma-separated pipeline chunk sizes in KiB: each mode's jobs run once per size, in the same rounds (default: the pipeline's own)")
	flag.Parse()
	if *chunkList != "" {
		for _, c := range strings.Split(*chunkList, ",") {
			n, err := strconv.Atoi(c)
			if err != nil || n <= 0 {
				fmt.Fprintf(os.Stderr, "authrate: bad chunk size %q\n", c)
				os.Exit(2)
			}
			chunks = append(chunks, int64(n)<<10)
		}
	}
	cpuProfile = *profile
	if *jobKinds != "" {
		kinds = strings.Split(*jobKinds, ",")
	}
	if err := run(*sizeMiB, *rounds, *dir, *only); err != nil {
		fmt.Fprintln(os.Stderr, "authrate:", err)
		os.Exit(1)
	}
}

var (
	cpuProfile string
	kinds      []string // the jobs to run, by the last word of their names; nil: all
	chunks     []int64  // pipeline chunk sizes to compare; nil: the default only
)

// variant is one pipeline setting to run every job of a mode with.
type variant struct {
	suffix string // added to the mode's name: "" or "-cN" (N KiB)
	pipe   image.Pipeline
}

func variants() []variant {
	if chunks == nil {
		return []variant{{}}
	}
	var vs []variant
	for _, c := range chunks {
		vs = append(vs, variant{fmt.Sprintf("-c%d", c>>10), image.Pipeline{ChunkSize: int(c)}})
	}
	return vs
}

// wanted reports whether job name is to run: the baseline always is.
func wanted(name string) bool {
	if kinds == nil || name == "sha256-j2" {
		return true
	}
	return slices.Contains(kinds, name[strings.LastIndex(name, "-")+1:])
}

// sample is one job's wall and CPU seconds in one round.
type sample struct{ wall, cpu float64 }

func run(sizeMiB, rounds int, dir, only string) error {
	if dir == "" {
		d, err := os.MkdirTemp("/dev/shm", "cryptimg-authrate.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ms := modes
	if only != "" {
		ms = nil
		for _, n := range strings.Split(only, ",") {
			i := slices.IndexFunc(modes, func(m mode) bool { return m.name == n })
			if i < 0 {
				return fmt.Errorf("unknown mode %q", n)
			}
			ms = append(ms, modes[i])
		}
	}
	size := int64(sizeMiB) << 20
	plainPath := filepath.Join(dir, "plain.raw")
	if err := writeRandom(plainPath, size); err != nil {
		return err
	}
	plainFile, err := os.Open(plainPath)
	if err != nil {
		return err
	}
	defer plainFile.Close()
	plain, err := image.OpenPlain(plainFile)
	if err != nil {
		return err
	}
	ctx := context.Background()
	pass := []byte("benchmark passphrase")

	type job struct {
		name string
		do   func() error
	}
	jobs := []job{
		{"sha256-j2", func() error { return hashFile(plainFile, size, 2) }},
		{"copy", func() error { return copyInto(filepath.Join(dir, "copy.out"), plainFile, size) }},
	}
	for _, m := range ms {
		p := header.Params{Version: 2, Cipher: m.cipher, Integrity: m.integrity, SectorSize: m.sectorSize,
			PBKDF: "pbkdf2", ForceIterations: 1000}
		f, err := image.FormatHeader(pass, p)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		defer f.Clear()
		// The image verify and decrypt read.
		imgPath := filepath.Join(dir, m.name+".luks")
		if err := encryptInto(ctx, imgPath, plain, f, image.Pipeline{}); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		e, k, closeImg, err := openUnlocked(imgPath, pass)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		defer closeImg()
		for _, v := range variants() {
			name := m.name + v.suffix
			decPath, encPath := filepath.Join(dir, name+".dec"), filepath.Join(dir, name+".enc")
			jobs = append(jobs,
				job{name + "-verify", func() error {
					r, err := e.Verify(ctx, k, v.pipe)
					if err == nil && r.Corrupt != nil {
						err = r.Corrupt
					}
					return err
				}},
				job{name + "-decrypt", func() error {
					return withKept(decPath, func(w *os.File) error {
						return e.DecryptTo(ctx, w, k, image.DecryptOptions{Format: image.Raw, Pipeline: v.pipe})
					})
				}},
				job{name + "-encrypt", func() error { return encryptInto(ctx, encPath, plain, f, v.pipe) }})
		}
	}

	jobs = slices.DeleteFunc(jobs, func(j job) bool { return !wanted(j.name) })
	times := make([][]sample, len(jobs))
	for r := 0; r <= rounds; r++ {
		if r == 1 && cpuProfile != "" {
			pf, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(pf); err != nil {
				return err
			}
			defer pf.Close()
			defer pprof.StopCPUProfile()
		}
		for i, j := range jobs {
			runtime.GC()
			s, err := measure(j.do)
			if err != nil {
				return fmt.Errorf("%s: %w", j.name, err)
			}
			if r > 0 { // round 0 warms up: it makes the kept outputs
				times[i] = append(times[i], s)
			}
		}
	}

	// The outputs of the last round must be right, or the figures mean
	// nothing: each decrypt output is the plaintext, and each encrypt
	// output unlocks and verifies.
	want, err := digest(plainFile, size)
	if err != nil {
		return err
	}
	for _, m := range ms {
		for _, v := range variants() {
			if err := checkOutputs(ctx, dir, m.name+v.suffix, pass, want, size); err != nil {
				return fmt.Errorf("%s: %w", m.name+v.suffix, err)
			}
		}
	}

	host, _ := os.Hostname()
	fmt.Printf("# authrate: %d MiB on tmpfs, median of %d rounds, GOMAXPROCS %d, %s, %s, %s\n\n",
		sizeMiB, rounds, runtime.GOMAXPROCS(0), cpuModel(), runtime.Version(), host)
	fmt.Println("| job | wall s | CPU s | GB/s | CPU | ÷ sha256 -j2 (throughput) | ÷ sha256 -j2 (per CPU s) | ≥ 0.8 |")
	fmt.Println("| --- | --- | --- | --- | --- | --- | --- | --- |")
	base := times[0]
	for i, j := range jobs {
		ts := times[i]
		wall := median(pick(ts, func(s sample) float64 { return s.wall }))
		cpu := median(pick(ts, func(s sample) float64 { return s.cpu }))
		var thr, per []float64
		for r, s := range ts {
			thr = append(thr, base[r].wall/s.wall)
			per = append(per, base[r].cpu/s.cpu)
		}
		meets := ""
		if i > 0 && j.name != "copy" {
			meets = "no"
			if median(thr) >= 0.8 {
				meets = "yes"
			}
		}
		fmt.Printf("| %s | %.3f | %.3f | %.2f | %.2f | %s | %s | %s |\n", j.name, wall, cpu,
			float64(size)/wall/1e9, cpu/wall, spread(thr), spread(per), meets)
	}
	return nil
}

// measure runs do and returns its wall time and the CPU time (user+sys)
// the process used meanwhile.
func measure(do func() error) (sample, error) {
	c0 := cpuSeconds()
	t0 := time.Now()
	err := do()
	return sample{wall: time.Since(t0).Seconds(), cpu: cpuSeconds() - c0}, err
}

// withKept opens the kept output path (made on first use) and runs fn on
// it: after the first run its pages exist, and writing it again allocates
// none.
func withKept(path string, fn func(*os.File) error) error {
	w, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := fn(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// encryptInto encrypts plain under f into the kept file at path. Each run
// writes the same layout over the last one (image.EncryptTo's sparse
// header area leaves zero pages unwritten, and f is the same each time).
func encryptInto(ctx context.Context, path string, plain *image.Plain, f *image.Formatted, pipe image.Pipeline) error {
	return withKept(path, func(w *os.File) error {
		return image.EncryptTo(ctx, w, plain, f, image.EncryptOptions{Format: image.Raw, Pipeline: pipe})
	})
}

// checkOutputs checks the kept outputs of mode name.
func checkOutputs(ctx context.Context, dir, name string, pass []byte, want [32]byte, size int64) error {
	if wanted(name + "-decrypt") {
		if err := checkDecrypted(dir, name, want, size); err != nil {
			return err
		}
	}
	if !wanted(name + "-encrypt") {
		return nil
	}
	e, k, closeImg, err := openUnlocked(filepath.Join(dir, name+".enc"), pass)
	if err != nil {
		return err
	}
	defer closeImg()
	r, err := e.Verify(ctx, k, image.Pipeline{})
	if err != nil {
		return err
	}
	if r.Corrupt != nil || r.Bytes != size {
		return fmt.Errorf("the encrypt output verifies %d bytes, %v", r.Bytes, r.Corrupt)
	}
	return nil
}

// openUnlocked opens the image at path and unlocks it with pass; done
// clears the key and closes the file.
func openUnlocked(path string, pass []byte) (e *image.Encrypted, k *image.Key, done func(), err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	if e, err = image.Open(f); err == nil {
		k, err = e.Unlock(pass, -1)
	}
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	return e, k, func() { k.Clear(); f.Close() }, nil
}

// checkDecrypted checks that the decrypt output of mode name is the
// plaintext, whose digest is want.
func checkDecrypted(dir, name string, want [32]byte, size int64) error {
	dec, err := os.Open(filepath.Join(dir, name+".dec"))
	if err != nil {
		return err
	}
	defer dec.Close()
	if got, err := digest(dec, size); err != nil {
		return err
	} else if got != want {
		return errors.New("the decrypt output is not the plaintext")
	}
	return nil
}

// digest is the SHA-256 of f's first size bytes.
func digest(f *os.File, size int64) ([32]byte, error) {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, size)); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

const piece = 1 << 20

// hashFile is the baseline: jobs goroutines, each hashing a contiguous
// part of f with crypto/sha256, read in 1 MiB pieces.
func hashFile(f *os.File, size int64, jobs int) error {
	pieces := (size + piece - 1) / piece
	errs := make([]error, jobs)
	var wg sync.WaitGroup
	for i := range jobs {
		from := pieces * int64(i) / int64(jobs) * piece
		to := min(pieces*int64(i+1)/int64(jobs)*piece, size)
		wg.Go(func() {
			h := sha256.New()
			buf := make([]byte, piece)
			for off := from; off < to; off += piece {
				n, err := f.ReadAt(buf[:min(piece, to-off)], off)
				if err != nil && !errors.Is(err, io.EOF) {
					errs[i] = err
					return
				}
				h.Write(buf[:n])
			}
			h.Sum(nil)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyInto copies f into the kept file at path in 1 MiB pieces: the
// read and write a decrypt pays on top of its cipher, without new pages.
func copyInto(path string, f *os.File, size int64) error {
	return withKept(path, func(w *os.File) error {
		buf := make([]byte, piece)
		for off := int64(0); off < size; off += piece {
			n, err := f.ReadAt(buf[:min(piece, size-off)], off)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if _, err := w.WriteAt(buf[:n], off); err != nil {
				return err
			}
		}
		return nil
	})
}

func writeRandom(path string, size int64) error {
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(w, rand.Reader, size); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func pick(ss []sample, f func(sample) float64) []float64 {
	var out []float64
	for _, s := range ss {
		out = append(out, f(s))
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func spread(v []float64) string {
	return fmt.Sprintf("%.2f (%.2f–%.2f)", median(v), slices.Min(v), slices.Max(v))
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
