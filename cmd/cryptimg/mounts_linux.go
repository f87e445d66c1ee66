//go:build linux

package main

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
)

type mountEntry struct{ point, fstype, source string }

// findMount looks mnt up in /proc/self/mountinfo.
func findMount(mnt string) (mountEntry, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountEntry{}, false
	}
	defer f.Close()
	var found mountEntry
	ok := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, s := range fields {
			if s == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescapeMount(fields[4]) == mnt {
			// The last entry for a path is the one on top.
			found, ok = mountEntry{mnt, fields[sep+1], fields[sep+2]}, true
		}
	}
	return found, ok
}

// unescapeMount undoes the octal escapes (\040 for space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountOf is the mount point of the cryptimg mount that process pid
// serves ("" if none): open names its mounts "cryptimg:PID".
func mountOf(pid int) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	src := "cryptimg:" + strconv.Itoa(pid)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if fields[sep+1] == "fuse."+fuseName && fields[sep+2] == src {
			return unescapeMount(fields[4])
		}
	}
	return ""
}
