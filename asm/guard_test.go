//go:build linux || darwin

package asm

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"syscall"
	"testing"
)

// guarded maps size bytes rounded up to whole pages between two PROT_NONE
// pages. It returns the usable region; buffers cut from its start touch the
// lower guard page and buffers cut from its end touch the upper one.
func guarded(t *testing.T, size int) []byte {
	t.Helper()
	page := syscall.Getpagesize()
	inner := (size + page - 1) / page * page
	mem, err := syscall.Mmap(-1, 0, inner+2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[:page], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mprotect(mem[page+inner:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	return mem[page : page+inner]
}

// Every kernel must stay inside its buffers: a read or write of even one
// byte past either end of src or dst faults on a guard page.
func TestGuardPages(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	k, ivk := newSchedules(t, key)
	type shape struct{ ss, n int }
	shapes := []shape{{16, 1}, {48, 1}, {512, 1}, {4096, 1}, {4112, 1}}
	for _, ss := range []int{512, 4096} {
		for _, n := range []int{2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33} {
			shapes = append(shapes, shape{ss, n})
		}
	}
	maxLen := 33 * 4096
	srcMem, dstMem := guarded(t, maxLen), guarded(t, maxLen)
	for _, impl := range Implementations() {
		for _, sh := range shapes {
			n := sh.ss * sh.n
			plain := make([]byte, n)
			rand.Read(plain)
			want := make([]byte, n)
			Generic.Encrypt(k, ivk, want, plain, 99, sh.ss)
			// src at the end of its region and dst at the start of its
			// region, then the other way round, then in place at both ends.
			layouts := []struct {
				name     string
				src, dst []byte
			}{
				{"src-end/dst-start", srcMem[len(srcMem)-n:], dstMem[:n]},
				{"src-start/dst-end", srcMem[:n], dstMem[len(dstMem)-n:]},
				{"inplace-end", srcMem[len(srcMem)-n:], srcMem[len(srcMem)-n:]},
				{"inplace-start", dstMem[:n], dstMem[:n]},
			}
			for _, l := range layouts {
				name := fmt.Sprintf("%s/ss%d/n%d/%s", impl.Name, sh.ss, sh.n, l.name)
				copy(l.src, plain)
				impl.Encrypt(k, ivk, l.dst, l.src, 99, sh.ss)
				if !bytes.Equal(l.dst, want) {
					t.Fatalf("%s: encrypt differs from generic", name)
				}
				copy(l.src, want)
				impl.Decrypt(k, ivk, l.dst, l.src, 99, sh.ss)
				if !bytes.Equal(l.dst, plain) {
					t.Fatalf("%s: decrypt differs from the plaintext", name)
				}
			}
		}
	}
}

// The XTS kernels stay inside their buffers too.
func TestXTSGuardPages(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	k, _ := NewSchedule(key[:32])
	tk, _ := NewSchedule(key[32:])
	maxLen := 33 * 4096
	srcMem, dstMem := guarded(t, maxLen), guarded(t, maxLen)
	for _, impl := range XTSImplementations() {
		for _, ss := range []int{512, 4096} {
			for _, n := range []int{1, 2, 7, 8, 9, 15, 16, 17, 33} {
				size := ss * n
				plain := make([]byte, size)
				rand.Read(plain)
				want := make([]byte, size)
				GenericXTS.Encrypt(k, tk, want, plain, 5, ^uint64(0), ss)
				for _, l := range []struct {
					name     string
					src, dst []byte
				}{
					{"src-end/dst-start", srcMem[len(srcMem)-size:], dstMem[:size]},
					{"src-start/dst-end", srcMem[:size], dstMem[len(dstMem)-size:]},
					{"inplace-end", srcMem[len(srcMem)-size:], srcMem[len(srcMem)-size:]},
					{"inplace-start", dstMem[:size], dstMem[:size]},
				} {
					name := fmt.Sprintf("%s/ss%d/n%d/%s", impl.Name, ss, n, l.name)
					copy(l.src, plain)
					impl.Encrypt(k, tk, l.dst, l.src, 5, ^uint64(0), ss)
					if !bytes.Equal(l.dst, want) {
						t.Fatalf("%s: encrypt differs from generic", name)
					}
					copy(l.src, want)
					impl.Decrypt(k, tk, l.dst, l.src, 5, ^uint64(0), ss)
					if !bytes.Equal(l.dst, plain) {
						t.Fatalf("%s: decrypt differs from the plaintext", name)
					}
				}
			}
		}
	}
}
