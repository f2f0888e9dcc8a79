package sector

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// impl selects the code that does the bulk of the AES work. A Cipher picks
// one in New (the best the CPU supports, see detectImpl) and keeps it; the
// tests build ciphers with each available impl and compare them.
type impl uint8

const (
	// implGeneric is portable Go: crypto/aes one block per call, with the
	// mode logic in this package. It runs everywhere.
	implGeneric impl = iota
	// implAESNI is amd64 assembly on 128-bit registers (AES-NI, VEX
	// encoded): 8 XTS or CBC-decryption blocks, or 8 CBC-encryption sectors,
	// in flight. Needs AES-NI and AVX.
	implAESNI
	// implVAES512 is amd64 assembly on 512-bit registers (AVX-512 VAES and
	// VPCLMULQDQ): 16 XTS or CBC-decryption blocks, or 16 CBC-encryption
	// sectors, in flight, four blocks per instruction.
	implVAES512
)

func (im impl) String() string {
	switch im {
	case implGeneric:
		return "generic"
	case implAESNI:
		return "aesni"
	case implVAES512:
		return "vaes512"
	}
	return fmt.Sprintf("impl(%d)", uint8(im))
}

// bestImpl is the fastest impl this CPU supports, chosen once at start-up.
// golang.org/x/sys/cpu applies GODEBUG's cpu.* settings before detectImpl
// reads its flags, so GODEBUG=cpu.avx512f=off selects implAESNI on a CPU
// with VAES (the path CPUs without AVX-512 take) and GODEBUG=cpu.aes=off
// implGeneric (TestGODEBUGSelectsImpl).
var bestImpl = detectImpl()

// Implementation names the code New's ciphers run on this machine, for
// reports: "vaes512 (AVX-512 VAES assembly)", "aesni (AES-NI assembly)" or
// "generic (crypto/aes)".
func Implementation() string {
	switch bestImpl {
	case implVAES512:
		return "vaes512 (AVX-512 VAES assembly)"
	case implAESNI:
		return "aesni (AES-NI assembly)"
	}
	return "generic (crypto/aes)"
}

// aesSchedule is an expanded AES key in the form the assembly wants: the
// round keys of the cipher (enc) and of the equivalent inverse cipher (dec,
// FIPS 197 section 5.3.5: the encryption round keys in reverse order, the
// inner ones passed through InvMixColumns, which is what AESDEC expects).
// Round key r occupies bytes 16r..16r+15 in state byte order, so a 16-byte
// load puts it in a register the way AESENC/AESDEC use it.
//
// crypto/aes does not expose its round keys, so they are expanded here; the
// tests check the result against crypto/aes and the FIPS 197 appendix A
// expansions.
type aesSchedule struct {
	enc    [15 * blockSize]byte
	dec    [15 * blockSize]byte
	rounds int // 10, 12 or 14 (AES-128, -192, -256)
}

// expand sets s to the key expansion of FIPS 197 section 5.2 for a 16, 24
// or 32-byte key. It uses no secret-dependent table lookups or branches, so
// it leaks no key bits through the cache: SubWord and InvMixColumns come from
// the AES instructions where the CPU has them (subWord, invMixColumns), or
// are computed in constant time (subWordGeneric, invMixColumnsGeneric; about
// 25 times slower, tens of microseconds per key).
func (s *aesSchedule) expand(key []byte) {
	nk := len(key) / 4
	if len(key)%4 != 0 || nk < 4 || nk > 8 || nk == 5 || nk == 7 {
		panic(fmt.Sprintf("sector: AES key of %d bytes", len(key)))
	}
	s.rounds = nk + 6
	// The words w[i] of FIPS 197 as little-endian uint32s (byte 0 of the
	// word lowest), so that RotWord is a rotation by 8 bits and the XORs
	// are whole words.
	var w [4 * 15]uint32
	n := 4 * (s.rounds + 1)
	for i := range nk {
		w[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	rcon := byte(1)
	for i := nk; i < n; i++ {
		t := w[i-1]
		switch {
		case i%nk == 0:
			// SubWord(RotWord(t)) xor Rcon[i/Nk]
			t = subWord(bits.RotateLeft32(t, -8)) ^ uint32(rcon)
			rcon = xtime(rcon)
		case nk > 6 && i%nk == 4:
			t = subWord(t)
		}
		w[i] = w[i-nk] ^ t
	}
	for i := range n {
		binary.LittleEndian.PutUint32(s.enc[4*i:], w[i])
	}
	clear(w[:])
	// Equivalent inverse cipher: dec round r is enc round Nr-r, with
	// InvMixColumns applied to all but the first and the last.
	nr := s.rounds
	copy(s.dec[0:16], s.enc[16*nr:16*nr+16])
	for r := 1; r < nr; r++ {
		invMixColumns(s.dec[16*r:16*r+16], s.enc[16*(nr-r):16*(nr-r)+16])
	}
	copy(s.dec[16*nr:16*nr+16], s.enc[0:16])
}

// subWordGeneric32 is subWordGeneric on a word held as a little-endian
// uint32, as subWord takes it.
func subWordGeneric32(x uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], x)
	b = subWordGeneric(b)
	return binary.LittleEndian.Uint32(b[:])
}

// xtime multiplies by x in GF(2^8) modulo x^8 + x^4 + x^3 + x + 1, without
// branches.
func xtime(a byte) byte {
	return a<<1 ^ 0x1b&-(a>>7)
}

// gmul multiplies in GF(2^8), in constant time.
func gmul(a, b byte) byte {
	var p byte
	for range 8 {
		p ^= a & -(b & 1)
		a = xtime(a)
		b >>= 1
	}
	return p
}

// subWordGeneric applies the S-box to each byte of w.
func subWordGeneric(w [4]byte) [4]byte {
	return [4]byte{subByte(w[0]), subByte(w[1]), subByte(w[2]), subByte(w[3])}
}

// subByte is the AES S-box (FIPS 197 section 5.1.1) computed rather than
// looked up: the multiplicative inverse a^254 followed by the affine map.
func subByte(a byte) byte {
	inv := byte(1)
	sq := a
	for range 7 { // a^254 = a^2 * a^4 * ... * a^128; 0 maps to 0
		sq = gmul(sq, sq)
		inv = gmul(inv, sq)
	}
	rotl := func(b byte, n uint) byte { return b<<n | b>>(8-n) }
	return inv ^ rotl(inv, 1) ^ rotl(inv, 2) ^ rotl(inv, 3) ^ rotl(inv, 4) ^ 0x63
}

// invMixColumnsGeneric writes InvMixColumns(src) (FIPS 197 section 5.3.3)
// to dst[:16].
func invMixColumnsGeneric(dst, src []byte) {
	for c := 0; c < 16; c += 4 {
		a0, a1, a2, a3 := src[c], src[c+1], src[c+2], src[c+3]
		dst[c] = gmul(a0, 14) ^ gmul(a1, 11) ^ gmul(a2, 13) ^ gmul(a3, 9)
		dst[c+1] = gmul(a0, 9) ^ gmul(a1, 14) ^ gmul(a2, 11) ^ gmul(a3, 13)
		dst[c+2] = gmul(a0, 13) ^ gmul(a1, 9) ^ gmul(a2, 14) ^ gmul(a3, 11)
		dst[c+3] = gmul(a0, 11) ^ gmul(a1, 13) ^ gmul(a2, 9) ^ gmul(a3, 14)
	}
}

// asmBlock is an AES key for the assembly paths. It implements cipher.Block
// (one block per call, AES-NI) so that the mode code in xts.go and cbc.go
// uses it exactly like crypto/aes for the single blocks around the bulk
// work: the XTS tweak, the ESSIV IV, ciphertext stealing. The bulk functions
// (xtsBlocks, cbcEncrypt, cbcDecrypt) recognise it and hand whole runs of
// blocks to the assembly for im.
type asmBlock struct {
	aesSchedule
	im impl
}

var _ cipher.Block = (*asmBlock)(nil)

// newBlock returns the block cipher for key that im uses: crypto/aes's for
// implGeneric, an asmBlock otherwise.
func newBlock(key []byte, im impl) (cipher.Block, error) {
	if im == implGeneric {
		return aes.NewCipher(key)
	}
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, fmt.Errorf("%w: AES key of %d bytes", ErrKeySize, len(key))
	}
	b := &asmBlock{}
	b.init(key, im)
	return b, nil
}

// init sets b to key (16 or 32 bytes, as the XTS halves are) for im.
func (b *asmBlock) init(key []byte, im impl) {
	b.im = im
	b.expand(key)
}

func (b *asmBlock) BlockSize() int { return blockSize }

func (b *asmBlock) Encrypt(dst, src []byte) {
	if len(dst) < blockSize || len(src) < blockSize {
		panic("sector: AES block shorter than 16 bytes")
	}
	encryptBlockAsm(&b.enc[0], b.rounds, &dst[0], &src[0])
}

func (b *asmBlock) Decrypt(dst, src []byte) {
	if len(dst) < blockSize || len(src) < blockSize {
		panic("sector: AES block shorter than 16 bytes")
	}
	decryptBlockAsm(&b.dec[0], b.rounds, &dst[0], &src[0])
}
