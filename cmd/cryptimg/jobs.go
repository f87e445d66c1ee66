package main

import (
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
)

// defaultJobs is the number of workers when --jobs is 0: GOMAXPROCS, but
// no more than the CPU limit of the cgroup v2 the process runs in (and of
// its parents), so a container given 2 CPUs of 64 runs 2 workers.
func defaultJobs() int {
	n := runtime.GOMAXPROCS(0)
	if l, ok := cgroupCPULimit("/proc/self/cgroup", "/sys/fs/cgroup"); ok {
		n = min(n, l)
	}
	return max(n, 1)
}

// cgroupCPULimit reads the cpu.max of the process's cgroup v2 (the "0::"
// line of procCgroup) and of each parent under root, and returns the
// smallest limit in whole CPUs, rounded up. ok is false when no cgroup on
// the way has a limit, or the files cannot be read.
func cgroupCPULimit(procCgroup, root string) (cpus int, ok bool) {
	b, err := os.ReadFile(procCgroup)
	if err != nil {
		return 0, false
	}
	var dir string
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		if p, yes := strings.CutPrefix(line, "0::"); yes {
			dir, found = path.Clean("/"+p), true
			break
		}
	}
	if !found {
		return 0, false
	}
	for {
		if c, err := os.ReadFile(path.Join(root, dir, "cpu.max")); err == nil {
			if l, has := parseCPUMax(string(c)); has && (!ok || l < cpus) {
				cpus, ok = l, true
			}
		}
		if dir == "/" {
			return cpus, ok
		}
		dir = path.Dir(dir)
	}
}

// parseCPUMax parses the contents of a cgroup v2 cpu.max file, "$MAX
// $PERIOD" in microseconds, where $MAX "max" means no limit. It returns
// the quota in whole CPUs, rounded up and at least 1.
func parseCPUMax(s string) (cpus int, ok bool) {
	f := strings.Fields(s)
	if len(f) == 0 || f[0] == "max" {
		return 0, false
	}
	quota, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || quota <= 0 {
		return 0, false
	}
	period := int64(100000) // the kernel's default when only $MAX is given
	if len(f) > 1 {
		if period, err = strconv.ParseInt(f[1], 10, 64); err != nil || period <= 0 {
			return 0, false
		}
	}
	return int(max((quota+period-1)/period, 1)), true
}
