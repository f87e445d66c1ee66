package main

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/secmem"
)

// TestReadKeyFile: key files of every size around the growing buffer's
// steps and the 8 MiB limit read back whole; --keyfile-offset and
// --keyfile-size cut them as cryptsetup does; an empty or oversized file,
// or one shorter than --keyfile-size, is refused.
func TestReadKeyFile(t *testing.T) {
	for _, c := range []struct {
		size         int
		offset, want int64 // want: --keyfile-size
		err          string
	}{
		{size: 1}, {size: 32}, {size: 4095}, {size: 4096}, {size: 4097}, {size: 8191}, {size: 65536 + 3},
		{size: maxKeyFileSize},
		{size: maxKeyFileSize + 1, err: "larger than 8192 KiB"},
		{size: maxKeyFileSize + 1, want: 100},
		{size: maxKeyFileSize + 1, offset: 1},
		{size: 0, err: "empty"},
		{size: 10, offset: 10, err: "empty"},
		{size: 10, offset: 11, err: "shorter than --keyfile-offset"},
		{size: 10, offset: 4, want: 6},
		{size: 10, want: 11, err: "shorter than --keyfile-size"},
		{size: 5000, offset: 100, want: 4500},
	} {
		data := make([]byte, c.size)
		for i := range data {
			data[i] = byte(i*31 + i>>12)
		}
		g := &globalOptions{stdin: bytes.NewReader(data)}
		got, err := readKeyFile(g, keyOptions{keyFile: "-", keyfileOffset: c.offset, keyfileSize: c.want})
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("size %d offset %d keyfile-size %d: error %v, want %q", c.size, c.offset, c.want, err, c.err)
			}
			continue
		}
		want := data[c.offset:]
		if c.want > 0 {
			want = want[:c.want]
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("size %d offset %d keyfile-size %d: %d bytes, %v; want %d", c.size, c.offset, c.want, len(got), err, len(want))
		}
		// The key is in package secmem's memory (locked where allowed,
		// out of core dumps), and Free returns it.
		if runtime.GOOS == "linux" && !secmem.Owns(got) {
			t.Errorf("size %d: the key is not in package secmem's memory", c.size)
		}
		secmem.Free(got)
		if secmem.Owns(got) {
			t.Errorf("size %d: Free left the key's memory behind", c.size)
		}
	}
}
