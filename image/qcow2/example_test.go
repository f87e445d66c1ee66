package qcow2_test

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/cryptimg/cryptimg/image/qcow2"
)

// Write a sparse image with Writer, then list its guest view with Extents.
func Example() {
	dir, err := os.MkdirTemp("", "qcow2-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, "disk.qcow2"))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	w, err := qcow2.Create(f, 1<<30, qcow2.CreateOptions{}) // 1 GiB virtual, 64 KiB clusters
	if err != nil {
		log.Fatal(err)
	}
	host, err := w.AllocateData(1<<20, 128<<10) // guest 1 MiB..1 MiB+128 KiB
	if err != nil {
		log.Fatal(err)
	}
	// The caller writes the data (encrypted, for LUKS) at the host offset.
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 128<<10), host); err != nil {
		log.Fatal(err)
	}
	if err := w.SetZero(2<<20, 64<<10); err != nil {
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	st, err := f.Stat()
	if err != nil {
		log.Fatal(err)
	}
	im, err := qcow2.Open(f, st.Size())
	if err != nil {
		log.Fatal(err)
	}
	exts, err := im.Extents(f)
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range exts {
		fmt.Printf("%-11v guest %#x+%#x host %#x\n", e.Kind, e.GuestOffset, e.Length, e.HostOffset)
	}
	// Output:
	// unallocated guest 0x0+0x100000 host 0x0
	// data        guest 0x100000+0x20000 host 0x10000
	// unallocated guest 0x120000+0xe0000 host 0x0
	// zero        guest 0x200000+0x10000 host 0x0
	// unallocated guest 0x210000+0x3fdf0000 host 0x0
}
