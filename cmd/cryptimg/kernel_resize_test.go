package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
)

// kernelResizeChecks adds to o the kernel's view of images cryptimg
// resized, built in dir (which must outlive o.run). It registers no boot of
// its own: the caller runs o.run() once, together with its other checks.
//
// Every image gets its first 2 MiB of data through cryptimg's writable view
// before `cryptimg resize` grows it, then the rest of the new size after the
// old end, the same way; dm-crypt must open the grown image and read all of
// it, the data written after growing included (sha256 of the whole mapped
// device):
//
//   - resize-luks1: raw LUKS1 (aes-cbc-essiv:sha256), 2 MiB grown to 5 MiB;
//   - resize-luks2-dynamic: raw LUKS2 (4096-byte sectors, "dynamic"
//     segment), 2 MiB to 5 MiB;
//   - resize-luks2-fixed: raw LUKS2 whose data segment has a fixed size,
//     2 MiB to 5 MiB. (cryptsetup 2.6.1's open maps the device to its end
//     whatever a fixed segment says, as its LUKS2_activate leaves the size
//     to the device: measured with 1 MiB appended to the file, the mapping
//     grew by 1 MiB. resize therefore keeps the file ending where the
//     segment does, and the check reads exactly the 5 MiB.)
//
// And the other way, resize-kernel-writes: a LUKS1 image grown from 2 to
// 4 MiB is opened read-write by the kernel, which writes 2 MiB after the
// old end and reads back the whole device; after o.run() (a t.Cleanup)
// cryptimg must read the same plaintext from the file.
func kernelResizeChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	key := writeFile(t, filepath.Join(dir, "resize-key"), "kernel resize passphrase")
	const old, grown = 2 << 20, 5 << 20
	data := make([]byte, grown)
	for i := range data {
		data[i] = byte(i*31 + i>>12)
	}
	pass := "kernel resize passphrase"
	build := func(name string, extra ...string) string {
		img := filepath.Join(dir, name+".img")
		fastCreate(t, key, "2M", img, extra...)
		return img
	}
	grow := func(img string, fixed bool) {
		if fixed {
			fixSegment(t, img)
		}
		writeAt(t, img, pass, data[:old], 0)
		mustRun(t, "resize", "--size", "5M", img)
		writeAt(t, img, pass, data[old:], old)
	}

	l1 := build("resize-luks1")
	grow(l1, false)
	o.reads("resize-luks1", l1, key, shaOf(data))

	dyn := build("resize-luks2-dynamic", "--type", "luks2", "--pbkdf", "pbkdf2")
	grow(dyn, false)
	o.reads("resize-luks2-dynamic", dyn, key, shaOf(data))

	fixed := build("resize-luks2-fixed", "--type", "luks2", "--pbkdf", "pbkdf2")
	grow(fixed, true)
	o.reads("resize-luks2-fixed", fixed, key, shaOf(data))

	// The kernel writes after the old end of a grown image.
	const wgrown = 4 << 20
	w := build("resize-kernel-writes")
	writeAt(t, w, pass, data[:old], 0)
	mustRun(t, "resize", "--size", "4M", w)
	tail := bytes.Repeat([]byte("written by dm-crypt after growing\n"), (wgrown-old)/34+1)[:wgrown-old]
	want := append(append([]byte(nil), data[:old]...), tail...)
	pattern := o.b.File("resize-tail", tail)
	m := o.mapper()
	name := "resize-kernel-writes"
	o.check(name, fmt.Sprintf("unlock %s %s %s\ndd if=%s of=/dev/mapper/%s bs=65536 seek=%d conv=fsync,notrunc 2>/dev/null\nsha /dev/mapper/%s\nlock %s",
		o.disk(w), m, o.key(key), pattern, m, old/65536, m, m))
	sum := shaOf(want)
	o.sums[name] = hex.EncodeToString(sum[:])
	before := readAll(t, w, pass)
	t.Cleanup(func() {
		if t.Failed() || t.Skipped() {
			return
		}
		got := readAll(t, w, pass)
		switch {
		case bytes.Equal(got, before):
			t.Errorf("kernelResizeChecks: %s is unchanged: o.run() was not called after kernelResizeChecks", name)
		case !bytes.Equal(got, want):
			t.Errorf("%s: cryptimg does not read what the kernel wrote after the old end", name)
		}
	})
}
