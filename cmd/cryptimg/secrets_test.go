package main

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cryptimg/cryptimg/asm/secmem"
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

// TestKeyfileSizeOverLimit: a --keyfile-size or --new-keyfile-size over the
// 8 MiB key file limit is a usage error naming the flag (the largest int64
// once overflowed the read's bound and panicked, exiting 2 as if no key
// matched); the limit itself still reads.
func TestKeyfileSizeOverLimit(t *testing.T) {
	dir := t.TempDir()
	key := writeFile(t, filepath.Join(dir, "key"), testPassphrase)
	img := filepath.Join(dir, "disk.luks")
	fastEncrypt(t, key, randomFile(t, dir, "plain.raw", 1<<20), img)
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"test-key", "-d", key, "--keyfile-size", "9223372036854775807", img}, "--keyfile-size"},
		{[]string{"test-key", "-d", key, "--keyfile-size", "8388609", img}, "--keyfile-size"},
		{[]string{"add-key", "-d", key, fastIter, "--new-keyfile-size", "9223372036854775807", img, key}, "--new-keyfile-size"},
	} {
		r := cryptimg(t, "", c.args...)
		want := "cryptimg: error: " + c.flag + " "
		if r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "over the key file limit of 8388608 bytes") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", c.args, r.code, r.stderr)
		}
	}
	// At the limit, the usual answer: the file is shorter.
	if r := cryptimg(t, "", "test-key", "-d", key, "--keyfile-size", "8388608", img); r.code != 1 || !strings.Contains(r.stderr, "shorter than --keyfile-size") {
		t.Errorf("--keyfile-size at the limit: exit %d, stderr %q", r.code, r.stderr)
	}
}
