package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// hostVolumeKey is the volume key of the image at path as cryptimg
// unlocks it with passphrase pass.
func hostVolumeKey(t *testing.T, path, pass string) []byte {
	t.Helper()
	_, _, k := unlockedImage(t, path, pass, os.O_RDONLY)
	return bytes.Clone(k.VolumeKey())
}

// kernelCreateCloneChecks registers the kernel checks of create and clone
// with o (the caller boots, with o.run):
//
//   - create makes an empty raw LUKS1 and LUKS2 image, cryptimg writes
//     plaintext into it through its writable view (the library's write path,
//     which open serves over FUSE), once whole and once a partial,
//     unaligned write over it, and dm-crypt opens the image and reads that
//     plaintext;
//   - an encrypted image is cloned with --new-key-file (LUKS1) and, from a
//     LUKS2 source, with --master-key-file: dm-crypt opens each clone with
//     its key and reads the source's plaintext, and refuses the source's key
//     on the --new-key-file clone. On the host, each clone has a UUID and a
//     volume key of its own, the derived one being header/derive's for the
//     clone's UUID.
func kernelCreateCloneChecks(t *testing.T, o *oracle, dir string) {
	t.Helper()
	const pass = "kernel create and clone passphrase"
	key := writeFile(t, filepath.Join(dir, "create-clone-key"), pass)
	const size = 4 << 20

	// create, then data written on the host through cryptimg's view.
	for _, c := range []struct {
		name string
		args []string
	}{
		{"create-luks1", nil},
		{"create-luks2", []string{"--type", "luks2", "--pbkdf", "pbkdf2"}},
	} {
		img := filepath.Join(dir, c.name+".luks")
		fastCreate(t, key, "4M", img, c.args...)
		want := make([]byte, size)
		for i := range want {
			want[i] = byte(i*7 + i>>9)
		}
		writeAt(t, img, pass, want, 0)
		patch := bytes.Repeat([]byte("written over by cryptimg\n"), 41)[:1000]
		writeAt(t, img, pass, patch, 1<<20+333) // inside two sectors of one 4096-byte LUKS2 sector
		copy(want[1<<20+333:], patch)
		if got := readAll(t, img, pass); !bytes.Equal(got, want) {
			t.Fatalf("%s: cryptimg does not read back what it wrote", c.name)
		}
		o.reads(c.name, img, key, shaOf(want))
	}

	// clone: the same plaintext under a new key and UUID.
	newKey := writeFile(t, filepath.Join(dir, "clone-new-key"), "the clone's own passphrase")
	master := randomFile(t, dir, "clone-master.key", 64)
	plain := randomFile(t, dir, "clone-plain.raw", 3<<20)
	want := fileSHA(t, plain)
	for _, c := range []struct {
		name     string
		enc      []string // the source's encrypt flags
		clone    []string // clone's flags
		cloneKey string   // the clone's passphrase file
	}{
		{"clone-new-key", nil, []string{"--new-key-file", newKey}, newKey},
		{"clone-master", []string{"--type", "luks2", "--pbkdf", "pbkdf2"}, []string{"--master-key-file", master, "--pbkdf", "pbkdf2"}, key},
	} {
		src := filepath.Join(dir, c.name+"-source.luks")
		fastEncrypt(t, key, plain, src, c.enc...)
		dst := filepath.Join(dir, c.name+".luks")
		mustRun(t, append(append([]string{"clone", "-d", key, fastIter}, c.clone...), src, dst)...)
		cloneKey, _ := os.ReadFile(c.cloneKey)
		srcVK, dstVK := hostVolumeKey(t, src, pass), hostVolumeKey(t, dst, string(cloneKey))
		if bytes.Equal(srcVK, dstVK) {
			t.Errorf("%s: the clone has the source's volume key", c.name)
		}
		su, du := dumpOf(t, src).UUID, dumpOf(t, dst).UUID
		if su == du {
			t.Errorf("%s: the clone has the source's UUID %s", c.name, su)
		}
		if c.name == "clone-master" && !bytes.Equal(dstVK, derivedKey(t, master, du, len(dstVK))) {
			t.Errorf("%s: volume key is not HKDF-SHA512(master, %s)", c.name, du)
		}
		o.reads(c.name, dst, c.cloneKey, want)
		o.reads(c.name+"-source", src, key, want)
		if c.cloneKey != key {
			o.refuses(c.name+"-source-key", dst, key)
		}
	}
}
