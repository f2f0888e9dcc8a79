package sector

import (
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
)

// cbcCipher is AES-CBC with a per-unit IV, as dm-crypt's aes-cbc-* modes, and
// CBC-CS2 ciphertext stealing (NIST SP 800-38A Addendum) for lengths that are
// not a multiple of 16.
//
// crypto/cipher's CBC BlockMode is not used: it is created per IV (one
// allocation per call) and cannot do ciphertext stealing. The generic loops
// below do the chaining around single-block AES calls, which is what the
// standard library's CBC does internally on amd64 as well; with an asmBlock
// the whole blocks go to the assembly instead.
type cbcCipher struct {
	b       cipher.Block // crypto/aes, or an asmBlock
	essiv   cipher.Block // AES-256 keyed with SHA-256(key); nil unless mode == ivESSIV
	mode    ivMode
	spec    string
	keySize int
}

func newCBC(spec string, key []byte, mode ivMode, im impl) (Cipher, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("%w: %s takes a 16, 24 or 32 byte key, got %d bytes", ErrKeySize, spec, len(key))
	}
	b, err := newBlock(key, im)
	if err != nil {
		return nil, err
	}
	c := &cbcCipher{b: b, mode: mode, spec: spec, keySize: len(key)}
	if mode == ivESSIV {
		// ESSIV (Fruhwirth, "New methods in hard disk encryption", 2005;
		// dm-crypt "essiv:sha256"): salt = SHA-256(key), and the IV of sector
		// s is E_salt(LE64(s) || 0^64). The salt is 32 bytes, so the IV
		// cipher is AES-256 whatever the data key size.
		salt := sha256.Sum256(key)
		c.essiv, err = newBlock(salt[:], im)
		clear(salt[:])
		if err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *cbcCipher) Spec() string { return c.spec }
func (c *cbcCipher) KeySize() int { return c.keySize }

// iv returns the IV for unit as two little-endian uint64 halves. For ESSIV the
// AES call needs a 16-byte buffer; dst's first block is used as scratch and
// restored from src afterwards (see xtsCipher.tweak for why).
func (c *cbcCipher) iv(dst, src []byte, unit uint64) (iv0, iv1 uint64) {
	lo, hi := ivWords(c.mode, unit)
	if c.essiv == nil {
		return lo, hi
	}
	d, s := dst[:blockSize], src[:blockSize]
	s0 := binary.LittleEndian.Uint64(s[0:8])
	s1 := binary.LittleEndian.Uint64(s[8:16])
	binary.LittleEndian.PutUint64(d[0:8], lo)
	binary.LittleEndian.PutUint64(d[8:16], hi)
	c.essiv.Encrypt(d, d)
	iv0 = binary.LittleEndian.Uint64(d[0:8])
	iv1 = binary.LittleEndian.Uint64(d[8:16])
	binary.LittleEndian.PutUint64(d[0:8], s0)
	binary.LittleEndian.PutUint64(d[8:16], s1)
	return iv0, iv1
}

// Encrypt encrypts src into dst with CBC-CS2.
func (c *cbcCipher) Encrypt(dst, src []byte, unit uint64) {
	n := checkLengths("cbc encrypt", dst, src)
	dst = dst[:n]
	iv0, iv1 := c.iv(dst, src, unit)
	cbcEncrypt(c.b, dst, src, iv0, iv1)
}

// Decrypt decrypts src into dst with CBC-CS2.
func (c *cbcCipher) Decrypt(dst, src []byte, unit uint64) {
	n := checkLengths("cbc decrypt", dst, src)
	dst = dst[:n]
	iv0, iv1 := c.iv(dst, src, unit)
	cbcDecrypt(c.b, dst, src, iv0, iv1)
}

// cbcEncrypt is CBC-CS2 encryption (SP 800-38A Addendum, section 2.2) of src
// into dst (len(dst) == len(src) >= 16) with the explicit IV iv0 || iv1 (two
// little-endian halves).
//
// With n-1 full blocks and a last block P_n* of d bytes (0 < d < 16), CS2
// pads P_n* with zeros to P_n, CBC-encrypts P_1 .. P_n into C_1 .. C_n, and
// outputs C_1 .. C_{n-2}, C_n, C_{n-1}* where C_{n-1}* is the first d bytes of
// C_{n-1}. When d == 16 it is plain CBC.
func cbcEncrypt(b cipher.Block, dst, src []byte, iv0, iv1 uint64) {
	n := len(src)
	tail := n % blockSize
	full := n - tail
	if ab, ok := b.(*asmBlock); ok {
		var iv [blockSize]byte
		binary.LittleEndian.PutUint64(iv[0:8], iv0)
		binary.LittleEndian.PutUint64(iv[8:16], iv1)
		cbcEncBulk(ab, dst[:full], src[:full], &iv)
	} else {
		// Block 0 is chained to the IV, held in registers; every later block
		// to the previous ciphertext block, already in dst. CBC encryption is
		// inherently serial, so the latency of each step counts: the 16-byte
		// subtle.XORBytes store lets AES's 16-byte load be forwarded
		// directly, where two 8-byte stores would stall it (measured ~25%
		// faster).
		d := dst[:blockSize]
		binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(src[0:8])^iv0)
		binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(src[8:16])^iv1)
		b.Encrypt(d, d)
		for i := blockSize; i < full; i += blockSize {
			d := dst[i : i+blockSize]
			subtle.XORBytes(d, src[i:i+blockSize], dst[i-blockSize:i])
			b.Encrypt(d, d)
		}
	}
	if tail == 0 {
		return
	}
	// dst[full-16:full] holds C_{n-1}. The input to the last block cipher
	// call is P_n xor C_{n-1} = (P_n* xor first d bytes of C_{n-1}) || last
	// 16-d bytes of C_{n-1}, since the padding is zero. Building it in place
	// and moving C_{n-1}* to the tail gives the CS2 order directly.
	last := dst[full-blockSize : full]
	tailDst, tailSrc := dst[full:], src[full:]
	for j := range tail {
		p := tailSrc[j] // read before the store: tailDst may be tailSrc
		c := last[j]
		tailDst[j] = c
		last[j] = p ^ c
	}
	b.Encrypt(last, last) // C_n
}

// cbcDecrypt is CBC-CS2 decryption, the inverse of cbcEncrypt. It works from
// the last block to the first so that every ciphertext block is still intact
// in src when the following block needs it as its chaining value, which makes
// dst == src (in place) work without a copy.
func cbcDecrypt(b cipher.Block, dst, src []byte, iv0, iv1 uint64) {
	n := len(src)
	tail := n % blockSize
	full := n - tail
	i := full - blockSize // the last full block
	if tail != 0 {
		// The full block at i is C_n, the tail C_{n-1}*. D(C_n) = P_n xor
		// C_{n-1}, and P_n ends in 16-d zero bytes, so D(C_n) supplies the
		// missing last 16-d bytes of C_{n-1}, and P_n* = first d bytes of
		// D(C_n) xor C_{n-1}*. Rebuild C_{n-1} in dst[i:], then decrypt it as
		// an ordinary CBC block.
		last := dst[i:full]
		b.Decrypt(last, src[i:full])
		tailDst, tailSrc := dst[full:], src[full:]
		for j := range tail {
			c := tailSrc[j]
			x := last[j]
			tailDst[j] = x ^ c
			last[j] = c
		}
		b.Decrypt(last, last)
		p0, p1 := iv0, iv1
		if i > 0 {
			p0 = binary.LittleEndian.Uint64(src[i-blockSize : i-8])
			p1 = binary.LittleEndian.Uint64(src[i-8 : i])
		}
		binary.LittleEndian.PutUint64(last[0:8], binary.LittleEndian.Uint64(last[0:8])^p0)
		binary.LittleEndian.PutUint64(last[8:16], binary.LittleEndian.Uint64(last[8:16])^p1)
		i -= blockSize
	}
	if ab, ok := b.(*asmBlock); ok {
		// Blocks 0 .. i (i may be -16: none). The assembly reads nothing
		// beyond them and keeps in place working its own way (see
		// cbc_amd64.s).
		var iv [blockSize]byte
		binary.LittleEndian.PutUint64(iv[0:8], iv0)
		binary.LittleEndian.PutUint64(iv[8:16], iv1)
		cbcDecBulk(ab, dst[:i+blockSize], src[:i+blockSize], &iv)
		return
	}
	for ; i > 0; i -= blockSize {
		d := dst[i : i+blockSize]
		b.Decrypt(d, src[i:i+blockSize])
		p := src[i-blockSize : i]
		binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(d[0:8])^binary.LittleEndian.Uint64(p[0:8]))
		binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(d[8:16])^binary.LittleEndian.Uint64(p[8:16]))
	}
	if i == 0 {
		d := dst[:blockSize]
		b.Decrypt(d, src[:blockSize])
		binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(d[0:8])^iv0)
		binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(d[8:16])^iv1)
	}
}

// EncryptSectors implements MultiCipher. With the assembly and a sectorSize
// that is a multiple of 16 it encrypts 16 or 8 units side by side (one CBC
// chain per unit, interleaved so that the AES unit always has independent
// work); the remaining units, and all units otherwise, go through Encrypt.
func (c *cbcCipher) EncryptSectors(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkSectors("cbc encrypt sectors", dst, src, sectorSize)
	i, unit := 0, firstUnit
	if ab, ok := c.b.(*asmBlock); ok && sectorSize%blockSize == 0 {
		var ivs, zero [maxLanes * blockSize]byte
		for _, lanes := range cbcLaneCounts(ab) {
			for ; n-i >= lanes*sectorSize; i += lanes * sectorSize {
				for l := range lanes {
					lo, hi := ivWords(c.mode, unit)
					binary.LittleEndian.PutUint64(ivs[16*l:], lo)
					binary.LittleEndian.PutUint64(ivs[16*l+8:], hi)
					unit++
				}
				if c.essiv != nil {
					// The ESSIV IVs of all lanes at once: CBC over
					// one-block units with a zero IV is ECB.
					cbcEncLanes(c.essiv.(*asmBlock), lanes, ivs[:], ivs[:], blockSize, &zero)
				}
				cbcEncLanes(ab, lanes, dst[i:], src[i:], sectorSize, &ivs)
			}
		}
	}
	for ; i < n; i, unit = i+sectorSize, unit+1 {
		c.Encrypt(dst[i:i+sectorSize], src[i:i+sectorSize], unit)
	}
}

// DecryptSectors implements MultiCipher. CBC decryption is parallel
// within a unit, so each unit alone already keeps the AES unit busy; but
// short units (512 bytes: 32 blocks) would pay a call, an IV and a pipeline
// start each. With the assembly and whole blocks, groups of up to eight
// units are decrypted as one CBC run from the first unit's IV, and the
// first block of each later unit, which that chained to the last
// ciphertext block of the unit before instead of to its own IV, is
// corrected by XORing both in. The ESSIV IVs of a group come from one
// 8-lane call. Otherwise: Decrypt on each unit in turn.
func (c *cbcCipher) DecryptSectors(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkSectors("cbc decrypt sectors", dst, src, sectorSize)
	ab, ok := c.b.(*asmBlock)
	if !ok || sectorSize%blockSize != 0 || n < 2*sectorSize {
		for i, unit := 0, firstUnit; i < n; i, unit = i+sectorSize, unit+1 {
			c.Decrypt(dst[i:i+sectorSize], src[i:i+sectorSize], unit)
		}
		return
	}
	const group = 8
	var ivs, zero [maxLanes * blockSize]byte
	var prev [group * blockSize]byte // last ciphertext block of each unit but the group's last
	for i, unit := 0, firstUnit; i < n; {
		k := min(group, (n-i)/sectorSize)
		for l := range k {
			lo, hi := ivWords(c.mode, unit+uint64(l))
			binary.LittleEndian.PutUint64(ivs[16*l:], lo)
			binary.LittleEndian.PutUint64(ivs[16*l+8:], hi)
		}
		if c.essiv != nil {
			cbcEncLanes(c.essiv.(*asmBlock), group, ivs[:], ivs[:], blockSize, &zero)
		}
		run := src[i : i+k*sectorSize]
		for l := range k - 1 {
			end := (l + 1) * sectorSize
			copy(prev[16*l:16*l+16], run[end-blockSize:end]) // before dst (maybe src) is written
		}
		var iv [blockSize]byte
		copy(iv[:], ivs[:blockSize])
		out := dst[i : i+k*sectorSize]
		cbcDecBulk(ab, out, run, &iv)
		for l := 1; l < k; l++ {
			d := out[l*sectorSize : l*sectorSize+blockSize]
			p, v := prev[16*(l-1):16*l], ivs[16*l:16*l+16]
			binary.LittleEndian.PutUint64(d[0:8], binary.LittleEndian.Uint64(d[0:8])^binary.LittleEndian.Uint64(p[0:8])^binary.LittleEndian.Uint64(v[0:8]))
			binary.LittleEndian.PutUint64(d[8:16], binary.LittleEndian.Uint64(d[8:16])^binary.LittleEndian.Uint64(p[8:16])^binary.LittleEndian.Uint64(v[8:16]))
		}
		i += k * sectorSize
		unit += uint64(k)
	}
}
