//go:build !purego

package asm

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The checked-in sha256_amd64.s is what sha256_gen.go writes.
func TestSHA256AsmGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out := filepath.Join(t.TempDir(), "sha256_amd64.s")
	cmd := exec.Command(goTool, "run", "sha256_gen.go", "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run sha256_gen.go: %v\n%s", err, msg)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("sha256_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("sha256_amd64.s is stale; run go generate ./asm")
	}
}

// cpuinfoFlag reports whether the kernel lists flag for the first CPU in
// /proc/cpuinfo, and whether it could tell.
func cpuinfoFlag(flag string) (has, known bool) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(name) == "flags" {
			for _, f := range strings.Fields(value) {
				if f == flag {
					return true, true
				}
			}
			return false, true
		}
	}
	return false, false
}

// cpuinfoField is the value of the first line of /proc/cpuinfo named name.
func cpuinfoField(name string) string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.SplitSeq(string(b), "\n") {
		if n, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(n) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// The kernels are selected exactly when the kernel reports their
// instructions: a CPUID check that went wrong would otherwise fall back to
// the generic code (or crash on a CPU without them) and every test would
// still pass. The 16-lane AVX-512 kernel leads where it is measured to
// win (Zen 5) or where there is no SHA-NI; the SHA-NI kernels otherwise.
func TestSHA256KernelsSelected(t *testing.T) {
	sha, known := cpuinfoFlag("sha_ni")
	if !known {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	f, _ := cpuinfoFlag("avx512f")
	bw, _ := cpuinfoFlag("avx512bw")
	if sha != hasSHANI {
		t.Fatalf("/proc/cpuinfo says sha_ni %v, CPUID detection says %v", sha, hasSHANI)
	}
	if (f && bw) != hasSHA256AVX512 {
		t.Fatalf("/proc/cpuinfo says avx512f and avx512bw %v, detection says %v", f && bw, hasSHA256AVX512)
	}
	var want []string
	if sha {
		want = append(want, "sha-ni", "sha-ni-x2", "sha-ni-x4")
		// Zen 3 and 4 (AMD family 25) prefer the 2-lane kernel.
		if cpuinfoField("vendor_id") == "AuthenticAMD" && cpuinfoField("cpu family") == "25" {
			want[0], want[1] = want[1], want[0]
		}
	}
	if f && bw {
		if !sha || preferSHA256AVX512() {
			want = append([]string{"avx512"}, want...)
		} else {
			want = append(want, "avx512")
		}
	}
	want = append(want, "generic")
	var names []string
	for _, impl := range SHA256Implementations() {
		names = append(names, impl.Name)
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("SHA256Implementations() = %v, want %v", names, want)
	}
	if BestSHA256().Name != want[0] {
		t.Fatalf("BestSHA256() = %q, want %q", BestSHA256().Name, want[0])
	}
	if want[0] == "generic" {
		t.Skip("CPU has neither SHA extensions nor AVX-512")
	}
}

// preferSHA256AVX512 picks the 16-lane kernel on AMD family 0x1a (Zen 5)
// only; the family decoding is checked against /proc/cpuinfo.
func TestSHA256PreferAVX512(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	var vendor, family string
	for line := range strings.SplitSeq(string(b), "\n") {
		name, value, ok := strings.Cut(line, ":")
		switch strings.TrimSpace(name) {
		case "vendor_id":
			if vendor == "" && ok {
				vendor = strings.TrimSpace(value)
			}
		case "cpu family":
			if family == "" && ok {
				family = strings.TrimSpace(value)
			}
		}
	}
	fam, err := strconv.Atoi(family)
	if vendor == "" || err != nil {
		t.Skip("no vendor or family in /proc/cpuinfo")
	}
	want := hasSHA256AVX512 && (!hasSHANI || vendor == "AuthenticAMD" && fam >= 0x1a)
	if got := preferSHA256AVX512(); got != want {
		t.Fatalf("preferSHA256AVX512() = %v on %s family %d (sha-ni %v, avx512 %v), want %v", got, vendor, fam, hasSHANI, hasSHA256AVX512, want)
	}
}

// directLanes fills each lane j with its own chaining value h[j] and nb
// random blocks data[j] (unaligned by j bytes), and want[j] with what the
// generic compression makes of them.
func directLanes(h, want []SHA256State, data [][]byte, nb int) {
	for j := range h {
		data[j] = make([]byte, nb*64+j)[j:]
		rand.Read(data[j])
		for w := range h[j] {
			h[j][w] = uint32(j*0x01010101+w) * 0x9e3779b9
		}
		want[j] = h[j]
		sha256BlocksGeneric(&want[j], data[j])
	}
}

// The kernels called directly, one lane count each, against the generic
// compression: the driver never calls the 4-lane kernel with fewer lanes
// or the 1-lane kernel for whole groups, so pin each on its own.
func TestSHA256KernelsDirect(t *testing.T) {
	if !hasSHANI {
		t.Skip("no SHA-NI")
	}
	for _, nb := range []int{1, 2, 3, 16, 65} {
		var h, want [4]SHA256State
		var data [4][]byte
		directLanes(h[:], want[:], data[:], nb)
		got := h
		sha256x1SHANI(&got[0], &data[0][0], nb)
		if got[0] != want[0] {
			t.Fatalf("x1, %d blocks: differs from generic", nb)
		}
		got = h
		sha256x2SHANI((*[2]SHA256State)(got[:2]), &data[0][0], &data[1][0], nb)
		if got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("x2, %d blocks: differs from generic", nb)
		}
		got = h
		sha256x4SHANI(&got, &data[0][0], &data[1][0], &data[2][0], &data[3][0], nb)
		if got != want {
			t.Fatalf("x4, %d blocks: differs from generic", nb)
		}
	}
}

// The 16-lane kernel called directly: every lane its own data and
// chaining value, and sha256x16 with fewer lanes leaves the real lanes
// right and reads only lane 0's blocks for the rest.
func TestSHA256X16Direct(t *testing.T) {
	if !hasSHA256AVX512 {
		t.Skip("no AVX-512")
	}
	for _, nb := range []int{1, 2, 3, 16, 65} {
		var h, want [16]SHA256State
		var data [16][]byte
		directLanes(h[:], want[:], data[:], nb)
		got := h
		p := data
		sha256x16AVX512(&got, &p, nb)
		if got != want {
			t.Fatalf("x16, %d blocks: differs from generic", nb)
		}
		for _, lanes := range []int{1, 9, 10, 15} {
			got, p = h, data
			sha256x16(&got, &p, lanes, nb)
			if !slices.Equal(got[:lanes], want[:lanes]) {
				t.Fatalf("x16 with %d lanes, %d blocks: differs from generic", lanes, nb)
			}
		}
	}
}
