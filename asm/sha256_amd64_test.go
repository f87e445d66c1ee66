//go:build !purego

package asm

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
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

// The SHA-NI kernels are selected exactly when the kernel reports the SHA
// extensions: a CPUID check that went wrong would otherwise fall back to
// the generic code (or crash on a CPU without them) and every test would
// still pass.
func TestSHA256SHANISelected(t *testing.T) {
	has, known := cpuinfoFlag("sha_ni")
	if !known {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	if has != hasSHANI {
		t.Fatalf("/proc/cpuinfo says sha_ni %v, CPUID detection says %v", has, hasSHANI)
	}
	if !has {
		if BestSHA256().Name != GenericSHA256.Name {
			t.Fatalf("BestSHA256() = %q without SHA-NI", BestSHA256().Name)
		}
		t.Skip("CPU has no SHA extensions")
	}
	var names []string
	for _, impl := range SHA256Implementations() {
		names = append(names, impl.Name)
	}
	if want := []string{"sha-ni", "sha-ni-x2", "sha-ni-x4", "generic"}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("SHA256Implementations() = %v, want %v", names, want)
	}
	if best := BestSHA256(); best.Name != "sha-ni" || best.Lanes != 4 {
		t.Fatalf("BestSHA256() = %q (%d lanes), want sha-ni", best.Name, best.Lanes)
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
		for j := range 4 {
			data[j] = make([]byte, nb*64+j)[j:]
			rand.Read(data[j])
			for w := range h[j] {
				h[j][w] = uint32(j*0x01010101+w) * 0x9e3779b9
			}
			want[j] = h[j]
			sha256BlocksGeneric(&want[j], data[j])
		}
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
