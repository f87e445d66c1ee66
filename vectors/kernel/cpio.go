package kernel

import (
	"bytes"
	"fmt"
	"io"
	"os"
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
	src  string // if set, the contents are this host file's, read by writeTo
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

// fileFrom adds a regular file whose contents writeTo reads from the host
// file src (symlinks followed).
func (a *archive) fileFrom(name string, perm uint32, src string) {
	a.dirs(path.Dir(name))
	a.entries[clean(name)] = entry{mode: modeFile | perm, src: src}
}

// manifest describes the archive without reading its host files: every
// entry's name, mode and data or source path with the source's size and
// modification time. Equal manifests make equal archives.
func (a *archive) manifest() []byte {
	var b bytes.Buffer
	for _, n := range a.names() {
		e := a.entries[n]
		fmt.Fprintf(&b, "%s %o %d:%x", n, e.mode, len(e.data), e.data)
		if e.src != "" {
			if st, err := os.Stat(e.src); err == nil {
				fmt.Fprintf(&b, " %s %d %d", e.src, st.Size(), st.ModTime().UnixNano())
			} else {
				fmt.Fprintf(&b, " %s missing", e.src)
			}
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func (a *archive) names() []string {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	// Sorting puts "a" before "a/b", so a directory precedes its contents.
	sort.Strings(names)
	return names
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
	ino := uint32(1)
	for _, n := range a.names() {
		e := a.entries[n]
		if e.src != "" {
			b, err := os.ReadFile(e.src)
			if err != nil {
				return err
			}
			e.data = b
		}
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
