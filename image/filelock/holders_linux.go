//go:build linux

package filelock

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

const procRoot = "/proc"

// lockEntry is one lock of /proc/locks, or of a "lock:" line of
// /proc/PID/fdinfo/FD (the same format).
type lockEntry struct {
	pid          int
	mode         Mode
	major, minor uint32
	inode        uint64
}

// parseLockLine parses a flock(2) lock held (not waited for) from a line
// of /proc/locks:
//
//	1: FLOCK  ADVISORY  WRITE 4242 fe:00:9980169 0 EOF
//
// (the device's major and minor in hex, the inode in decimal; fs/locks.c
// lock_get_status), or the same after "lock:\t" in fdinfo. The pid is the
// process that took the lock, which may have handed the file on to a child
// and exited since.
func parseLockLine(line string) (lockEntry, bool) {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "lock:" {
		f = f[1:]
	}
	if len(f) > 0 && strings.HasSuffix(f[0], ":") {
		f = f[1:] // the lock's number
	}
	// "->" marks a process blocked on the lock above: not a holder.
	if len(f) < 5 || f[0] != "FLOCK" {
		return lockEntry{}, false
	}
	var e lockEntry
	switch f[2] {
	case "READ":
		e.mode = Shared
	case "WRITE":
		e.mode = Exclusive
	default:
		return lockEntry{}, false
	}
	pid, err := strconv.Atoi(f[3])
	if err != nil {
		return lockEntry{}, false
	}
	e.pid = pid
	dev := strings.Split(f[4], ":")
	if len(dev) != 3 {
		return lockEntry{}, false
	}
	maj, err1 := strconv.ParseUint(dev[0], 16, 32)
	min, err2 := strconv.ParseUint(dev[1], 16, 32)
	ino, err3 := strconv.ParseUint(dev[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return lockEntry{}, false
	}
	e.major, e.minor, e.inode = uint32(maj), uint32(min), ino
	return e, true
}

// parseLocks returns the flock(2) locks on inode ino that r, in the
// format of /proc/locks, lists. Only the inode is compared: the device
// there is the filesystem's, which differs from what stat(2) says on btrfs
// subvolumes; the caller confirms the file through the holder's
// descriptors.
func parseLocks(r io.Reader, ino uint64) []lockEntry {
	var es []lockEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if e, ok := parseLockLine(sc.Text()); ok && e.inode == ino {
			es = append(es, e)
		}
	}
	return es
}

func holders(f *os.File) ([]Holder, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil
	}
	lf, err := os.Open(filepath.Join(procRoot, "locks"))
	if err != nil {
		return nil, err
	}
	es := parseLocks(lf, sys.Ino)
	lf.Close()
	if len(es) == 0 {
		return nil, nil
	}
	var hs []Holder
	for _, e := range es {
		if slices.ContainsFunc(hs, func(h Holder) bool { return h.PID == e.pid }) {
			continue
		}
		if m, ok := holdsLock(e.pid, st, sys.Ino); ok {
			hs = append(hs, holder(e.pid, m))
		}
	}
	if len(hs) > 0 {
		return hs, nil
	}
	// The processes that took the locks hold them no more: they handed
	// the file to another process (as open --background does to the child
	// that serves the mount) and exited, or closed their copy. The lock
	// lives on with the open file: look for it in every process's files.
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if m, ok := holdsLock(pid, st, sys.Ino); ok {
			hs = append(hs, holder(pid, m))
		}
	}
	return hs, nil
}

// holdsLock reports whether process pid has a descriptor of the file st
// that carries a flock(2) lock, and its mode. fdinfo is read first: it is
// proc(5) alone, while a stat through /proc/PID/fd/N reaches the file's
// filesystem, which might be a hung FUSE mount for a file of no interest.
func holdsLock(pid int, st os.FileInfo, ino uint64) (Mode, bool) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(dir, "fdinfo"))
	if err != nil {
		return 0, false
	}
	for _, fd := range fds {
		b, err := os.ReadFile(filepath.Join(dir, "fdinfo", fd.Name()))
		if err != nil {
			continue
		}
		for line := range bytes.Lines(b) {
			if !bytes.HasPrefix(line, []byte("lock:")) {
				continue
			}
			e, ok := parseLockLine(string(line))
			if !ok || e.inode != ino {
				continue
			}
			if fst, err := os.Stat(filepath.Join(dir, "fd", fd.Name())); err == nil && os.SameFile(st, fst) {
				return e.mode, true
			}
		}
	}
	return 0, false
}

// holder describes process pid, holding a lock of mode m.
func holder(pid int, m Mode) Holder {
	h := Holder{PID: pid, Mode: m}
	if b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cmdline")); err == nil {
		h.Args = splitCmdline(b)
	}
	return h
}

// splitCmdline splits /proc/PID/cmdline (arguments each ended by a NUL).
func splitCmdline(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}
