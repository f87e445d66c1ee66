package verity

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"

	"github.com/cryptimg/cryptimg/asm"
)

// hashFunc is a digest the tree can use, by its kernel crypto API name.
type hashFunc struct {
	size int
	new  func() hash.Hash
}

var hashFuncs = map[string]hashFunc{
	"sha1":   {sha1.Size, sha1.New},
	"sha224": {sha256.Size224, sha256.New224},
	"sha256": {sha256.Size, sha256.New},
	"sha384": {sha512.Size384, sha512.New384},
	"sha512": {sha512.Size, sha512.New},
}

func newHashFunc(name string) (hashFunc, error) {
	h, ok := hashFuncs[name]
	if !ok {
		return hashFunc{}, fmt.Errorf("%w: hash %q (sha1, sha224, sha256, sha384 or sha512)", ErrInvalid, name)
	}
	return h, nil
}

// hasher computes the salted digests H(x) of the tree (lib/verity/
// verity_hash.c, verify_hash_block): HASH(salt ‖ x) for hash type 1,
// HASH(x ‖ salt) for type 0. One per goroutine: it holds scratch space.
type hasher struct {
	typ  uint32
	salt []byte
	h    hash.Hash
	sum  []byte
	// multi is set for type 1 sha256, which runs on asm's multi-buffer
	// kernels, several messages side by side.
	multi *multiSHA256
}

// useMultiSHA256 lets the tests compare the multi-buffer path with the
// standard library's.
var useMultiSHA256 = true

func newHasher(p *Params) *hasher {
	hf, _ := newHashFunc(p.Hash)
	hs := &hasher{typ: p.HashType, salt: p.Salt, h: hf.new()}
	if p.HashType == 1 && p.Hash == "sha256" && useMultiSHA256 {
		hs.multi = newMultiSHA256(asm.BestSHA256(), p.Salt)
	}
	return hs
}

// digests writes H(msg_i) at out[i*slot:] for the len(msgs)/m messages
// msg_i = msgs[i*m:(i+1)*m]. The bytes between digests are left as they are.
func (hs *hasher) digests(out []byte, slot int, msgs []byte, m int) {
	if hs.multi != nil {
		hs.multi.digests(out, slot, msgs, m)
		return
	}
	for i := 0; i < len(msgs)/m; i++ {
		msg := msgs[i*m : (i+1)*m]
		hs.h.Reset()
		if hs.typ == 1 {
			hs.h.Write(hs.salt)
			hs.h.Write(msg)
		} else {
			hs.h.Write(msg)
			hs.h.Write(hs.salt)
		}
		hs.sum = hs.h.Sum(hs.sum[:0])
		copy(out[i*slot:], hs.sum)
	}
}

const (
	shaBlock = 64
	shaLanes = 16
)

// multiSHA256 hashes salt ‖ msg for many messages of one size with a
// multi-buffer SHA-256 (FIPS 180-4): the salt's whole 64-byte blocks are
// compressed once; per message, the block that joins the salt's last bytes
// to the message's first is assembled in buf, the message's whole blocks
// are read in place, and its last bytes and the padding (FIPS 180-4
// section 5.1.1) go through buf again.
type multiSHA256 struct {
	blocks  asm.SHA256BlocksFunc
	start   asm.SHA256State // after the salt's whole blocks
	rem     []byte          // the salt's bytes after them, fewer than 64
	saltLen int
	h       [shaLanes]asm.SHA256State
	p       [shaLanes][]byte
	buf     [shaLanes][2 * shaBlock]byte
}

func newMultiSHA256(impl asm.SHA256Impl, salt []byte) *multiSHA256 {
	s := &multiSHA256{blocks: impl.Blocks, saltLen: len(salt)}
	whole := len(salt) / shaBlock * shaBlock
	h := []asm.SHA256State{asm.SHA256IV()}
	if whole > 0 {
		impl.Blocks(h, [][]byte{salt[:whole]})
	}
	s.start = h[0]
	s.rem = salt[whole:]
	return s
}

func (s *multiSHA256) digests(out []byte, slot int, msgs []byte, m int) {
	n := len(msgs) / m
	r := len(s.rem)
	join := r > 0 && r+m >= shaBlock
	mOff := 0 // message bytes in the joining block
	if join {
		mOff = shaBlock - r
	}
	nbM := (m - mOff) / shaBlock
	rest := r // salt bytes in the last block(s)
	if join {
		rest = 0
	}
	t := rest + m - mOff - nbM*shaBlock // bytes before the padding
	tb := 1
	if t > shaBlock-9 {
		tb = 2
	}
	bitLen := uint64(s.saltLen+m) * 8
	for i := 0; i < n; i += shaLanes {
		lanes := min(shaLanes, n-i)
		h, p := s.h[:lanes], s.p[:lanes]
		for j := range lanes {
			h[j] = s.start
		}
		msg := func(j int) []byte { return msgs[(i+j)*m : (i+j+1)*m] }
		if join {
			for j := range lanes {
				b := s.buf[j][:shaBlock]
				copy(b, s.rem)
				copy(b[r:], msg(j)[:mOff])
				p[j] = b
			}
			s.blocks(h, p)
		}
		if nbM > 0 {
			for j := range lanes {
				p[j] = msg(j)[mOff : mOff+nbM*shaBlock]
			}
			s.blocks(h, p)
		}
		for j := range lanes {
			b := s.buf[j][:tb*shaBlock]
			copy(b, s.rem[:rest])
			copy(b[rest:], msg(j)[mOff+nbM*shaBlock:])
			b[t] = 0x80
			clear(b[t+1 : len(b)-8])
			binary.BigEndian.PutUint64(b[len(b)-8:], bitLen)
			p[j] = b
		}
		s.blocks(h, p)
		for j := range lanes {
			d := out[(i+j)*slot:]
			for k, w := range h[j] {
				binary.BigEndian.PutUint32(d[4*k:], w)
			}
		}
	}
}
