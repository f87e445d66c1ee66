package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestParseCPUMax(t *testing.T) {
	for _, c := range []struct {
		in   string
		cpus int
		ok   bool
	}{
		{"max 100000\n", 0, false},
		{"150000 100000\n", 2, true},
		{"200000 100000", 2, true},
		{"50000 100000", 1, true},
		{"1600000 100000", 16, true},
		{"300000", 3, true},
		{"", 0, false},
		{"x 100000", 0, false},
		{"100000 0", 0, false},
	} {
		cpus, ok := parseCPUMax(c.in)
		if cpus != c.cpus || ok != c.ok {
			t.Errorf("parseCPUMax(%q) = %d, %v; want %d, %v", c.in, cpus, ok, c.cpus, c.ok)
		}
	}
}

// TestCgroupCPULimit: the smallest limit on the way from the process's
// cgroup up to the root counts.
func TestCgroupCPULimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc", "0::/a/b\n")
	write("cg/a/b/cpu.max", "max 100000\n")
	write("cg/a/cpu.max", "250000 100000\n")
	write("cg/cpu.max", "max 100000\n")
	if cpus, ok := cgroupCPULimit(filepath.Join(dir, "proc"), filepath.Join(dir, "cg")); cpus != 3 || !ok {
		t.Errorf("limit = %d, %v; want 3 (the parent's), true", cpus, ok)
	}
	write("cg/a/b/cpu.max", "100000 100000\n")
	if cpus, ok := cgroupCPULimit(filepath.Join(dir, "proc"), filepath.Join(dir, "cg")); cpus != 1 || !ok {
		t.Errorf("limit = %d, %v; want 1, true", cpus, ok)
	}
	write("cg/a/b/cpu.max", "max 100000\n")
	write("cg/a/cpu.max", "max 100000\n")
	if _, ok := cgroupCPULimit(filepath.Join(dir, "proc"), filepath.Join(dir, "cg")); ok {
		t.Error("a limit found where every cpu.max is max")
	}
	if _, ok := cgroupCPULimit(filepath.Join(dir, "missing"), filepath.Join(dir, "cg")); ok {
		t.Error("a limit found without a cgroup file")
	}
	if j := defaultJobs(); j < 1 || j > runtime.GOMAXPROCS(0) {
		t.Errorf("defaultJobs() = %d, want 1..GOMAXPROCS", j)
	}
}
