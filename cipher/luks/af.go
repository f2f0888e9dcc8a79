package luks

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"hash"
)

// The anti-forensic splitter of LUKS (Clemens Fruhwirth, "TKS1", and
// cryptsetup lib/luks1/af.c; LUKS2 keeps it as af type "luks1"). A key of n
// bytes is stored as `stripes` blocks of n bytes: all but the last are
// random, and the last is the key XOR the diffusion of the running XOR of the
// others. Destroying any one block (a few bytes of a bad sector are enough)
// destroys the key, which is the point: a wiped keyslot stays wiped even if
// the disk remapped some of its sectors.

// afMaxStripes bounds the stripe count read from a header. cryptsetup always
// writes 4000 and refuses to write anything else.
const afMaxStripes = 4000

// afStripes is the stripe count Format writes, as cryptsetup does.
const afStripes = 4000

// afSize is the number of bytes an AF-split key occupies on disk: keyLen *
// stripes rounded up to whole 512-byte sectors, because keyslot material is
// encrypted and read in sectors (cryptsetup's AF_split_sectors).
func afSize(keyLen, stripes int) int {
	return (keyLen*stripes + 511) &^ 511
}

// diffuse replaces buf, in place, by the concatenation of
// H(BE32(i) || block_i) over its hash-sized blocks; the last block may be
// short and is hashed short and truncated. This is af.c's diffuse().
func diffuse(buf []byte, h hash.Hash) {
	var iv [4]byte
	var sum []byte
	size := h.Size()
	for i, off := uint32(0), 0; off < len(buf); i, off = i+1, off+size {
		block := buf[off:min(off+size, len(buf))]
		binary.BigEndian.PutUint32(iv[:], i)
		h.Reset()
		h.Write(iv[:])
		h.Write(block)
		sum = h.Sum(sum[:0])
		copy(block, sum)
	}
}

// afMerge recovers a key of keyLen bytes from its stripes in src (at least
// keyLen*stripes bytes). stripes must be >= 1.
func afMerge(src []byte, keyLen, stripes int, newHash func() hash.Hash) []byte {
	h := newHash()
	acc := make([]byte, keyLen)
	for i := 0; i < stripes-1; i++ {
		subtle.XORBytes(acc, acc, src[i*keyLen:(i+1)*keyLen])
		diffuse(acc, h)
	}
	key := make([]byte, keyLen)
	subtle.XORBytes(key, acc, src[(stripes-1)*keyLen:stripes*keyLen])
	return key
}

// afSplit spreads key over stripes blocks, returned in a buffer of
// afSize(len(key), stripes) bytes (the sector padding is zero).
func afSplit(key []byte, stripes int, newHash func() hash.Hash) []byte {
	h := newHash()
	n := len(key)
	dst := make([]byte, afSize(n, stripes))
	rand.Read(dst[:(stripes-1)*n])
	acc := make([]byte, n)
	for i := 0; i < stripes-1; i++ {
		subtle.XORBytes(acc, acc, dst[i*n:(i+1)*n])
		diffuse(acc, h)
	}
	subtle.XORBytes(dst[(stripes-1)*n:stripes*n], acc, key)
	return dst
}
