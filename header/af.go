package header

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// The anti-forensic splitter of LUKS1 (specification §2.4, the H1 variant of
// cryptsetup lib/luks1/af.c). A key of n bytes becomes stripes*n bytes: all
// stripes but the last are random, and the last is the key XORed with the
// diffused running XOR of the others, so every stripe is needed to recover it.

// diffuse replaces buf by H(be32(0) || block 0) || H(be32(1) || block 1) ...,
// where blocks are digest-sized and a short final block gets the first
// len(block) bytes of its hash. scratch must hold at least 4+h.Size() bytes;
// passing it in keeps the loop free of allocations.
func diffuse(h hash.Hash, buf, scratch []byte) {
	ds := h.Size()
	iv, sum := scratch[:4], scratch[4:4]
	for i := 0; i*ds < len(buf); i++ {
		block := buf[i*ds : min((i+1)*ds, len(buf))]
		binary.BigEndian.PutUint32(iv, uint32(i))
		h.Reset()
		h.Write(iv)
		h.Write(block)
		copy(block, h.Sum(sum))
	}
}

func checkAF(keyBytes, stripes int) error {
	if keyBytes <= 0 {
		return errors.New("af: empty key")
	}
	if stripes <= 0 {
		return fmt.Errorf("af: invalid stripe count %d", stripes)
	}
	if keyBytes > (1<<31)/stripes {
		return fmt.Errorf("af: %d stripes of %d bytes is too large", stripes, keyBytes)
	}
	return nil
}

// AFSplit splits data into stripes*len(data) bytes of anti-forensic material
// using the named hash and random bytes from rnd (crypto/rand if nil).
func AFSplit(data []byte, stripes int, hashName string, rnd io.Reader) ([]byte, error) {
	n := len(data)
	if err := checkAF(n, stripes); err != nil {
		return nil, err
	}
	newHash, err := hashFunc(hashName)
	if err != nil {
		return nil, err
	}
	rnd = randReader(rnd)
	out := make([]byte, n*stripes)
	last := out[n*(stripes-1):]
	if _, err := io.ReadFull(rnd, out[:len(out)-n]); err != nil {
		return nil, fmt.Errorf("af: reading random stripes: %w", err)
	}
	h := newHash()
	tmp := make([]byte, 4+h.Size())
	// The running value d lives in the last stripe until the key is mixed in.
	for k := 0; k < stripes-1; k++ {
		subtle.XORBytes(last, last, out[k*n:(k+1)*n])
		diffuse(h, last, tmp)
	}
	subtle.XORBytes(last, last, data)
	clear(tmp)
	return out, nil
}

// AFMerge recovers the keyBytes-byte key from anti-forensic material made by
// AFSplit. material must hold at least keyBytes*stripes bytes; anything after
// that (sector padding) is ignored.
func AFMerge(material []byte, keyBytes, stripes int, hashName string) ([]byte, error) {
	if err := checkAF(keyBytes, stripes); err != nil {
		return nil, err
	}
	if len(material) < keyBytes*stripes {
		return nil, fmt.Errorf("af: material is %d bytes, need %d", len(material), keyBytes*stripes)
	}
	newHash, err := hashFunc(hashName)
	if err != nil {
		return nil, err
	}
	h := newHash()
	tmp := make([]byte, 4+h.Size())
	d := make([]byte, keyBytes)
	for k := 0; k < stripes-1; k++ {
		subtle.XORBytes(d, d, material[k*keyBytes:(k+1)*keyBytes])
		diffuse(h, d, tmp)
	}
	subtle.XORBytes(d, d, material[(stripes-1)*keyBytes:stripes*keyBytes])
	clear(tmp)
	return d, nil
}

// afSectors is cryptsetup's AF_split_sectors: the 512-byte sectors that the
// key material of a keyBytes-byte key takes.
func afSectors(keyBytes, stripes uint64) uint64 {
	return (keyBytes*stripes + SectorSize - 1) / SectorSize
}
