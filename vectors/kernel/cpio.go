package kernel

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// archive is an initramfs in the making: the "newc" cpio format the kernel
// unpacks (Documentation/driver-api/early-userspace/buffer-format.rst).
// Entries are written in path order with every parent directory first.
type archive struct {
	entries map[string]entry
}

type entry struct {
	mode uint32 // type and permission bits, as in stat(2)
	data []byte // file contents or symlink target
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeLink = 0o120000
)

func newArchive() *archive { return &archive{entries: map[string]entry{}} }

// file adds a regular file (and its parent directories).
func (a *archive) file(name string, perm uint32, data []byte) {
	a.dirs(path.Dir(name))
	a.entries[clean(name)] = entry{mode: modeFile | perm, data: data}
}

// symlink adds name pointing at target.
func (a *archive) symlink(name, target string) {
	a.dirs(path.Dir(name))
	a.entries[clean(name)] = entry{mode: modeLink | 0o777, data: []byte(target)}
}

// dirs adds a directory and its parents.
func (a *archive) dirs(name string) {
	for d := clean(name); d != "" && d != "."; d = clean(path.Dir(d)) {
		if _, ok := a.entries[d]; !ok {
			a.entries[d] = entry{mode: modeDir | 0o755}
		}
	}
}

func clean(name string) string { return strings.TrimPrefix(path.Clean("/"+name), "/") }

// writeTo writes the archive, trailer included.
func (a *archive) writeTo(w io.Writer) error {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Sorting puts "a" before "a/b", so a directory precedes its contents.
	sort.Strings(names)
	ino := uint32(1)
	for _, n := range names {
		e := a.entries[n]
		if err := writeEntry(w, ino, n, e.mode, e.data); err != nil {
			return err
		}
		ino++
	}
	return writeEntry(w, 0, "TRAILER!!!", 0, nil)
}

func writeEntry(w io.Writer, ino uint32, name string, mode uint32, data []byte) error {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
	// rdevmajor, rdevminor, namesize (with its NUL), check.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := append([]byte(hdr), name...)
	buf = append(buf, 0)
	buf = pad4(buf)
	buf = append(buf, data...)
	buf = pad4(buf)
	_, err := w.Write(buf)
	return err
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
