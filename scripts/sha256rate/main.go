// Command sha256rate is the baseline of scripts/bench-integrity.sh: it hashes
// a file with crypto/sha256 as -j goroutines, each over one contiguous part
// of the file read with ReadAt in 1 MiB pieces, and prints the bytes hashed
// and the seconds it took (reads included, as cryptimg's wall time includes
// them). The digests are printed too, so that the work cannot be skipped.
//
//	go run ./scripts/sha256rate [-j N] FILE
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

const piece = 1 << 20

func main() {
	jobs := flag.Int("j", runtime.GOMAXPROCS(0), "goroutines, each hashing one contiguous part of the file")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sha256rate [-j N] FILE\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *jobs < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *jobs); err != nil {
		fmt.Fprintln(os.Stderr, "sha256rate:", err)
		os.Exit(1)
	}
}

func run(name string, jobs int) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	// Part boundaries are whole pieces, so every ReadAt but the file's
	// last is a full 1 MiB.
	pieces := (size + piece - 1) / piece
	sums := make([][]byte, jobs)
	errs := make([]error, jobs)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range jobs {
		from := pieces * int64(i) / int64(jobs) * piece
		to := min(pieces*int64(i+1)/int64(jobs)*piece, size)
		wg.Go(func() { sums[i], errs[i] = hashPart(f, from, to) })
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("bytes %d seconds %.6f jobs %d GB/s %.3f\n", size, secs, jobs, float64(size)/secs/1e9)
	for i, s := range sums {
		fmt.Printf("part %d %s\n", i, hex.EncodeToString(s))
	}
	return nil
}

// hashPart returns the SHA-256 of f's bytes [from, to).
func hashPart(f *os.File, from, to int64) ([]byte, error) {
	h := sha256.New()
	buf := make([]byte, piece)
	for off := from; off < to; {
		n, err := f.ReadAt(buf[:min(int64(piece), to-off)], off)
		h.Write(buf[:n])
		off += int64(n)
		if err == io.EOF && off < to {
			return nil, fmt.Errorf("%s: unexpected end of file at %d", f.Name(), off)
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
	}
	return h.Sum(nil), nil
}
