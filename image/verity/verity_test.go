package verity

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cryptimg/cryptimg/asm"
)

// fill fills b with bytes from a seeded generator.
func fill(b []byte, seed uint64) {
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(b)
}

// TestMultiSHA256 compares the multi-buffer salted hash with crypto/sha256
// on every asm implementation, over salts and messages that put the salt's
// end and the padding at every awkward place of a 64-byte block.
func TestMultiSHA256(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	for _, impl := range asm.SHA256Implementations() {
		for _, sl := range []int{0, 1, 31, 32, 55, 56, 63, 64, 65, 127, 128, 200, 256} {
			salt := rnd(sl)
			for _, m := range []int{1, 8, 9, 55, 56, 63, 64, 100, 512, 4096} {
				for _, n := range []int{1, 3, 16, 17, 33} {
					msgs := rnd(n * m)
					const slot = 40 // digests apart, gaps untouched
					out := bytes.Repeat([]byte{0xee}, n*slot)
					newMultiSHA256(impl, salt).digests(out, slot, msgs, m)
					for i := range n {
						want := sha256.Sum256(append(append([]byte{}, salt...), msgs[i*m:(i+1)*m]...))
						if !bytes.Equal(out[i*slot:i*slot+32], want[:]) {
							t.Fatalf("%s salt %d msg %d count %d: message %d hashed wrong", impl.Name, sl, m, n, i)
						}
						if !bytes.Equal(out[i*slot+32:(i+1)*slot], bytes.Repeat([]byte{0xee}, slot-32)) {
							t.Fatalf("%s: bytes between digests written", impl.Name)
						}
					}
				}
			}
		}
	}
}

// model builds the hash file the simplest way, from the format's rules
// (one level at a time, one block at a time, crypto/* hashes): the
// reference the parallel Format is compared with.
func model(data []byte, p Params, hashFile []byte) ([]byte, []byte) {
	hf := hashFuncs[p.Hash]
	H := func(x []byte) []byte {
		h := hf.new()
		if p.HashType == 1 {
			h.Write(p.Salt)
			h.Write(x)
		} else {
			h.Write(x)
			h.Write(p.Salt)
		}
		return h.Sum(nil)
	}
	per, b := 1, 0
	for per*2*hf.size <= p.HashBlockSize {
		per, b = per*2, b+1
	}
	slot := hf.size
	if p.HashType == 1 {
		slot = p.HashBlockSize >> b
	}
	var cur [][]byte
	for k := range p.DataBlocks {
		cur = append(cur, H(data[k*uint64(p.DataBlockSize):(k+1)*uint64(p.DataBlockSize)]))
	}
	var levels [][]byte
	for len(cur) > 1 {
		var lvl []byte
		var next [][]byte
		for i := 0; i < len(cur); i += per {
			blk := make([]byte, p.HashBlockSize)
			for j := i; j < min(i+per, len(cur)); j++ {
				copy(blk[(j-i)*slot:], cur[j])
			}
			lvl = append(lvl, blk...)
			next = append(next, H(blk))
		}
		levels = append(levels, lvl)
		cur = next
	}
	var T int64
	if p.NoSuperblock {
		T = p.HashOffset / int64(p.HashBlockSize)
	} else {
		T = (p.HashOffset + 512 + int64(p.HashBlockSize) - 1) / int64(p.HashBlockSize)
	}
	out := append([]byte{}, hashFile...)
	pos := T * int64(p.HashBlockSize)
	for i := len(levels) - 1; i >= 0; i-- {
		if need := pos + int64(len(levels[i])); int64(len(out)) < need {
			out = append(out, make([]byte, need-int64(len(out)))...)
		}
		copy(out[pos:], levels[i])
		pos += int64(len(levels[i]))
	}
	if !p.NoSuperblock {
		sb := make([]byte, 512)
		copy(sb, "verity")
		binary.LittleEndian.PutUint32(sb[8:], 1)
		binary.LittleEndian.PutUint32(sb[12:], p.HashType)
		copy(sb[16:], p.UUID[:])
		copy(sb[32:], p.Hash)
		binary.LittleEndian.PutUint32(sb[64:], uint32(p.DataBlockSize))
		binary.LittleEndian.PutUint32(sb[68:], uint32(p.HashBlockSize))
		binary.LittleEndian.PutUint64(sb[72:], p.DataBlocks)
		binary.LittleEndian.PutUint16(sb[80:], uint16(len(p.Salt)))
		copy(sb[88:], p.Salt)
		if need := p.HashOffset + 512; int64(len(out)) < need {
			out = append(out, make([]byte, need-int64(len(out)))...)
		}
		copy(out[p.HashOffset:], sb)
	}
	if end := pos; int64(len(out)) < end {
		out = append(out, make([]byte, end-int64(len(out)))...)
	}
	return cur[0], out
}

type treeCase struct {
	name string
	size int // data bytes
	p    Params
}

func treeCases() []treeCase {
	base := func(mod func(*Params)) Params {
		p := Params{HashType: 1, Hash: "sha256", DataBlockSize: 4096, HashBlockSize: 4096,
			Salt: []byte("0123456789abcdef0123456789abcdef"), UUID: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	return []treeCase{
		{"one block", 4096, base(nil)},
		{"two blocks", 8192, base(nil)},
		{"128 blocks", 128 * 4096, base(nil)},
		{"129 blocks and a tail", 129*4096 + 100, base(nil)},
		// 512-byte blocks: 16 digests a block, three levels, and chunks of
		// 2048 blocks, so several workers and a short last chunk.
		{"512/512 5000 blocks", 5000 * 512, base(func(p *Params) { p.DataBlockSize, p.HashBlockSize = 512, 512 })},
		{"512/1024 sha1", 3000 * 512, base(func(p *Params) { p.DataBlockSize, p.HashBlockSize, p.Hash = 512, 1024, "sha1" })},
		{"sha512", 300 * 4096, base(func(p *Params) { p.Hash = "sha512" })},
		{"type 0", 300 * 4096, base(func(p *Params) { p.HashType = 0 })},
		{"type 0 sha1", 205 * 4096, base(func(p *Params) { p.HashType, p.Hash = 0, "sha1" })},
		{"no salt", 129 * 4096, base(func(p *Params) { p.Salt = nil })},
		{"salt 256", 129 * 4096, base(func(p *Params) { p.Salt = bytes.Repeat([]byte{7}, 256) })},
		{"salt 5 and 1024 data blocks", 700 * 1024, base(func(p *Params) { p.Salt, p.DataBlockSize = []byte("salty"), 1024 })},
		{"hash offset 1536", 129 * 4096, base(func(p *Params) { p.HashOffset = 1536 })},
		{"no superblock offset 6144", 129 * 4096, base(func(p *Params) { p.NoSuperblock, p.HashOffset = true, 6144 })},
		{"data blocks limited", 129 * 4096, base(func(p *Params) { p.DataBlocks = 100 })},
	}
}

// TestFormatModel compares Format's hash file and root hash with the
// model's, for every case, with two workers and with one.
func TestFormatModel(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range treeCases() {
		for _, jobs := range []int{1, 2} {
			data := make([]byte, tc.size)
			fill(data, uint64(tc.size))
			p := tc.p
			p.Salt = append([]byte{}, p.Salt...)
			if err := p.SetDataSize(int64(len(data))); err != nil {
				t.Fatal(err)
			}
			wantRoot, want := model(data, p, nil)
			hf, err := os.Create(filepath.Join(dir, "hash"))
			if err != nil {
				t.Fatal(err)
			}
			// One worker reads a bytes.Reader (sectors.Run), two a file
			// (mapped on Linux).
			var src io.ReaderAt = bytes.NewReader(data)
			if jobs == 2 {
				df := filepath.Join(dir, "data")
				if err := os.WriteFile(df, data, 0o600); err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(df)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				src = f
			}
			var done int64
			root, err := Format(context.Background(), src, hf, p, Options{Jobs: jobs, Progress: func(n int64) { done = n }})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			got, _ := os.ReadFile(hf.Name())
			hf.Close()
			if !bytes.Equal(root, wantRoot) {
				t.Errorf("%s, %d jobs: root %x, want %x", tc.name, jobs, root, wantRoot)
			}
			if n := int64(p.DataBlocks) * int64(p.DataBlockSize); done != n && p.DataBlocks > 1 {
				t.Errorf("%s, %d jobs: progress ended at %d bytes, want %d", tc.name, jobs, done, n)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s, %d jobs: hash file differs from the model (%d and %d bytes)", tc.name, jobs, len(got), len(want))
			}
			if err := Verify(context.Background(), src, bytes.NewReader(got), p, root, Options{Jobs: jobs}); err != nil {
				t.Errorf("%s: Verify of its own tree: %v", tc.name, err)
			}
		}
	}
}

// TestFormatSharedFile puts data and tree in one file, leaves the bytes
// around the tree alone, and refuses a tree over its own data.
func TestFormatSharedFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img := make([]byte, 1<<20)
	fill(img, 3)
	f.Write(img)
	p := treeCases()[0].p
	p.DataBlocks, p.HashOffset = 100, 100*4096
	wantRoot, want := model(img, p, img)
	root, err := Format(context.Background(), f, f, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(f.Name())
	if !bytes.Equal(root, wantRoot) || !bytes.Equal(got, want) {
		t.Fatal("shared file differs from the model")
	}
	p.DataBlocks = 101
	if _, err := Format(context.Background(), f, f, p, Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("data over the hash area: %v, want ErrInvalid", err)
	}
}

// TestVerifyNamesFirstBadBlock flips one byte at a time and checks the
// block Verify names: the data block, or the hash block and its level.
func TestVerifyNamesFirstBadBlock(t *testing.T) {
	// 512-byte blocks, 16 digests a block: 5000 data blocks give levels of
	// 313, 20, 2 and 1 blocks.
	p := treeCases()[4].p
	data := make([]byte, 5000*512)
	fill(data, 5)
	p.DataBlocks = 5000
	root, hash := model(data, p, nil)
	g, err := p.Geometry()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Levels) != 4 || g.Levels[3].Count != 1 || g.Levels[0].Count != 313 {
		t.Fatalf("levels %+v", g.Levels)
	}
	at := func(level int, block uint64, b int) int64 {
		return int64(g.Levels[level].Start+block)*512 + int64(b)
	}
	cases := []struct {
		name     string
		inData   bool
		off      int64
		want     CorruptError
		wrongKey bool
	}{
		{"data block 0", true, 3, CorruptError{Level: -1, Block: 0, Offset: 0}, false},
		{"data block 4242", true, 4242*512 + 511, CorruptError{Level: -1, Block: 4242, Offset: 4242 * 512}, false},
		{"last data block", true, 4999 * 512, CorruptError{Level: -1, Block: 4999, Offset: 4999 * 512}, false},
		{"leaf digest", false, at(0, 100, 5), CorruptError{Level: 0, Block: 100, Offset: at(0, 100, 0)}, false},
		{"leaf spare of the last", false, at(0, 312, 500), CorruptError{Level: 0, Block: 312, Offset: at(0, 312, 0)}, false},
		{"level 1", false, at(1, 7, 0), CorruptError{Level: 1, Block: 7, Offset: at(1, 7, 0)}, false},
		{"level 2", false, at(2, 1, 31), CorruptError{Level: 2, Block: 1, Offset: at(2, 1, 0)}, false},
		{"top", false, at(3, 0, 40), CorruptError{Level: 3, Block: 0, Offset: at(3, 0, 0), Root: true}, false},
		{"wrong root hash", false, -1, CorruptError{Level: 3, Block: 0, Offset: at(3, 0, 0), Root: true}, true},
	}
	for _, c := range cases {
		d, h, r := bytes.Clone(data), bytes.Clone(hash), bytes.Clone(root)
		switch {
		case c.wrongKey:
			r[0] ^= 1
		case c.inData:
			d[c.off] ^= 0x40
		default:
			h[c.off] ^= 0x40
		}
		err := Verify(context.Background(), bytes.NewReader(d), bytes.NewReader(h), p, r, Options{Jobs: 2})
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s: %v, want a CorruptError", c.name, err)
		}
		ce.Spare = false
		if *ce != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, *ce, c.want)
		}
	}
	// Short files: the data, the hash device.
	if err := Verify(context.Background(), bytes.NewReader(data[:len(data)-1]), bytes.NewReader(hash), p, root, Options{}); !errors.Is(err, ErrTruncated) {
		t.Errorf("short data: %v, want ErrTruncated", err)
	}
	if err := Verify(context.Background(), bytes.NewReader(data), bytes.NewReader(hash[:len(hash)-512]), p, root, Options{}); !errors.Is(err, ErrTruncated) {
		t.Errorf("short hash device: %v, want ErrTruncated", err)
	}
	// One data block: no tree, the block against the root.
	p.DataBlocks = 1
	one := data[:512]
	root1, hash1 := model(one, p, nil)
	one = bytes.Clone(one)
	one[9] ^= 1
	err = Verify(context.Background(), bytes.NewReader(one), bytes.NewReader(hash1), p, root1, Options{})
	var ce *CorruptError
	if !errors.As(err, &ce) || *ce != (CorruptError{Level: -1, Root: true}) {
		t.Fatalf("one block: %v", err)
	}
}

// TestSuperblock reads back what MarshalSuperblock writes and refuses
// what veritysetup refuses.
func TestSuperblock(t *testing.T) {
	p := treeCases()[3].p
	p.DataBlocks = 129
	p.HashOffset = 8192
	sb, err := p.MarshalSuperblock()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSuperblock(sb, 8192)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(p) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, p)
	}
	bad := map[string]func(b []byte){
		"magic":      func(b []byte) { b[6] = 1 },
		"version":    func(b []byte) { b[8] = 2 },
		"hash type":  func(b []byte) { b[12] = 2 },
		"salt size":  func(b []byte) { binary.LittleEndian.PutUint16(b[80:], 257) },
		"block size": func(b []byte) { binary.LittleEndian.PutUint32(b[64:], 256) },
		"algorithm":  func(b []byte) { copy(b[32:], "md5\x00") },
	}
	for name, f := range bad {
		b := bytes.Clone(sb)
		f(b)
		if _, err := ParseSuperblock(b, 0); !errors.Is(err, ErrSuperblock) && !errors.Is(err, ErrNoSuperblock) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}

// BenchmarkDigests hashes 4096-byte data blocks with a 32-byte salt on
// each multi-buffer implementation and on crypto/sha256 (stdlib).
func BenchmarkDigests(b *testing.B) {
	p := Params{HashType: 1, Hash: "sha256", DataBlockSize: 4096, HashBlockSize: 4096, Salt: make([]byte, 32)}
	msgs := make([]byte, 256*4096)
	out := make([]byte, 256*32)
	for _, impl := range asm.SHA256Implementations() {
		b.Run(impl.Name, func(b *testing.B) {
			m := newMultiSHA256(impl, p.Salt)
			b.SetBytes(int64(len(msgs)))
			for b.Loop() {
				m.digests(out, 32, msgs, 4096)
			}
		})
	}
	b.Run("stdlib", func(b *testing.B) {
		useMultiSHA256 = false
		defer func() { useMultiSHA256 = true }()
		hs := newHasher(&p)
		b.SetBytes(int64(len(msgs)))
		for b.Loop() {
			hs.digests(out, 32, msgs, 4096)
		}
	})
}
