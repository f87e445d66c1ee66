package image

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
)

// TestKeyInSecureMemory: a Key keeps its volume key in package secmem's
// memory (on Linux: locked where allowed, out of core dumps), not in the Go
// heap, and Clear wipes and returns it along with the cipher's round keys.
func TestKeyInSecureMemory(t *testing.T) {
	vk := bytes.Repeat([]byte{0x5a}, 64)
	f, err := FormatHeader([]byte("pw"), header.Params{Cipher: "aes-xts-plain64", VolumeKey: vk, ForceIterations: 1000})
	if err != nil {
		t.Fatal(err)
	}
	k := f.Key
	got := k.VolumeKey()
	if !bytes.Equal(got, vk) {
		t.Fatalf("volume key %x", got)
	}
	if runtime.GOOS == "linux" && !secmem.Owns(got) {
		t.Error("the volume key is not in package secmem's memory")
	}
	f.Clear()
	if k.VolumeKey() != nil || secmem.Owns(got) {
		t.Error("Clear left the volume key's memory behind")
	}
}
