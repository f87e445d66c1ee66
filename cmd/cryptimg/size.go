package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// wholeBytes writes n bytes in the largest IEC unit that divides it,
// "1 MiB", for help that states a default.
func wholeBytes(n int64) string {
	unit := 0
	for n != 0 && n%1024 == 0 && unit < 4 {
		n /= 1024
		unit++
	}
	return fmt.Sprintf("%d %s", n, []string{"bytes", "KiB", "MiB", "GiB", "TiB"}[unit])
}

// parseSize reads a size in bytes with an optional suffix K, M, G or T
// (either case), each a power of 1024 as in qemu-img.
func parseSize(s string) (int64, error) {
	num, shift := s, 0
	if n := len(s); n > 0 {
		if i := strings.Index("KMGT", strings.ToUpper(s[n-1:])); i >= 0 {
			num, shift = s[:n-1], 10*(i+1)
		}
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes, optionally with a suffix K, M, G or T", s)
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v > math.MaxInt64>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return v << shift, nil
}
