//go:build amd64 && !purego

package sector

import "golang.org/x/sys/cpu"

// detectImpl picks the assembly the CPU can run. The 512-bit path needs
// VAES and VPCLMULQDQ on ZMM registers, which x/sys/cpu reports only when the
// OS also saves the AVX-512 state; BW and VL for the byte shifts and the
// EVEX forms on narrower registers, BMI2 for BZHI. CPUs with VAES but without
// AVX-512 (VAES on YMM only) take the 128-bit path.
func detectImpl() impl {
	x := &cpu.X86
	switch {
	case !x.HasAES || !x.HasAVX:
		return implGeneric
	case x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL &&
		x.HasAVX512VAES && x.HasAVX512VPCLMULQDQ && x.HasBMI2:
		return implVAES512
	}
	return implAESNI
}

// availableImpls lists the impls this CPU can run, generic first.
func availableImpls() []impl {
	switch bestImpl {
	case implVAES512:
		return []impl{implGeneric, implAESNI, implVAES512}
	case implAESNI:
		return []impl{implGeneric, implAESNI}
	}
	return []impl{implGeneric}
}

// subWord is SubWord (the S-box on each byte) for the key expansion, on
// a word held as a little-endian uint32, by AESENCLAST where the CPU has
// it.
func subWord(w uint32) uint32 {
	if !cpu.X86.HasAES {
		return subWordGeneric32(w)
	}
	return subWordAsm(w)
}

// invMixColumns writes InvMixColumns(src) to dst[:16], by AESIMC where the
// CPU has it.
func invMixColumns(dst, src []byte) {
	if !cpu.X86.HasAES {
		invMixColumnsGeneric(dst, src)
		return
	}
	invMixColumnsAsm(&dst[:16][0], &src[:16][0])
}

// The assembly (aes_amd64.s, xts_amd64.s, cbc_amd64.s). rk points at the
// encryption or decryption round keys of an aesSchedule, nr is its round
// count; n counts 16-byte blocks and is at least 1.

func subWordAsm(w uint32) uint32

//go:noescape
func invMixColumnsAsm(dst, src *byte)

//go:noescape
func encryptBlockAsm(rk *byte, nr int, dst, src *byte)

//go:noescape
func decryptBlockAsm(rk *byte, nr int, dst, src *byte)

//go:noescape
func xtsEncAESNI(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)

//go:noescape
func xtsDecAESNI(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)

//go:noescape
func xtsUnitsEncAESNI(rk1, rk2 *byte, nr int, dst, src *byte, units, groups int, unit, mask uint64)

//go:noescape
func xtsUnitsDecAESNI(rk1, rk2 *byte, nr int, dst, src *byte, units, groups int, unit, mask uint64)

//go:noescape
func xtsEncVAES512(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)

//go:noescape
func xtsDecVAES512(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)

//go:noescape
func cbcEncAESNI(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func cbcEnc8AESNI(rk *byte, nr int, dst, src *byte, stride, n int, ivs *[maxLanes * blockSize]byte)

//go:noescape
func cbcEnc16VAES512(rk *byte, nr int, dst, src *byte, stride, n int, ivs *[maxLanes * blockSize]byte)

//go:noescape
func cbcDecAESNI(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)

//go:noescape
func cbcDecVAES512(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)

// xtsBulk runs XTS over the whole blocks of src into dst (len(src) a
// multiple of 16, len(dst) >= len(src)); *tw holds T_0 and receives the tweak
// after the last block.
func xtsBulk(b *asmBlock, encrypt bool, dst, src []byte, tw *[16]byte) {
	n := len(src) / blockSize
	if n == 0 {
		return
	}
	d, s := &dst[:len(src)][0], &src[0]
	switch {
	case b.im == implVAES512 && encrypt:
		xtsEncVAES512(&b.enc[0], b.rounds, d, s, n, tw)
	case b.im == implVAES512:
		xtsDecVAES512(&b.dec[0], b.rounds, d, s, n, tw)
	case encrypt:
		xtsEncAESNI(&b.enc[0], b.rounds, d, s, n, tw)
	default:
		xtsDecAESNI(&b.dec[0], b.rounds, d, s, n, tw)
	}
}

// xtsUnitsBulk runs XTS over len(src)/unitSize whole data units numbered
// from unit on, tweaks included, in one assembly call, and reports whether
// it could: the AES-NI path takes units that are a multiple of 128 bytes
// (no ciphertext stealing, whole groups of eight blocks).
func xtsUnitsBulk(k1, k2 *asmBlock, encrypt bool, dst, src []byte, unitSize int, unit, mask uint64) bool {
	if k1.im != implAESNI || unitSize%128 != 0 || len(src) < unitSize {
		return false
	}
	units := len(src) / unitSize
	d, s := &dst[:units*unitSize][0], &src[0]
	if encrypt {
		xtsUnitsEncAESNI(&k1.enc[0], &k2.enc[0], k1.rounds, d, s, units, unitSize/128, unit, mask)
	} else {
		xtsUnitsDecAESNI(&k1.dec[0], &k2.enc[0], k1.rounds, d, s, units, unitSize/128, unit, mask)
	}
	return true
}

// cbcEncBulk CBC-encrypts the whole blocks of src into dst chained from *iv
// and leaves the last ciphertext block in *iv.
func cbcEncBulk(b *asmBlock, dst, src []byte, iv *[16]byte) {
	n := len(src) / blockSize
	if n == 0 {
		return
	}
	cbcEncAESNI(&b.enc[0], b.rounds, &dst[:len(src)][0], &src[0], n, iv)
}

// cbcDecBulk CBC-decrypts the whole blocks of src into dst chained from *iv.
func cbcDecBulk(b *asmBlock, dst, src []byte, iv *[16]byte) {
	n := len(src) / blockSize
	if n == 0 {
		return
	}
	d, s := &dst[:len(src)][0], &src[0]
	if b.im == implVAES512 {
		cbcDecVAES512(&b.dec[0], b.rounds, d, s, n, iv)
	} else {
		cbcDecAESNI(&b.dec[0], b.rounds, d, s, n, iv)
	}
}

// cbcLaneCounts lists the numbers of units cbcEncLanes can encrypt side by
// side, largest first.
func cbcLaneCounts(b *asmBlock) []int {
	if b.im == implVAES512 {
		return lanes16or8
	}
	return lanes8
}

var lanes16or8, lanes8 = []int{16, 8}, []int{8}

// cbcEncLanes CBC-encrypts lanes (one of cbcLaneCounts) consecutive units of
// unitSize bytes (a non-zero multiple of 16) from src into dst, unit u
// chained from the IV in ivs[16u:16u+16].
func cbcEncLanes(b *asmBlock, lanes int, dst, src []byte, unitSize int, ivs *[maxLanes * blockSize]byte) {
	total := lanes * unitSize
	d, s := &dst[:total][0], &src[:total][0]
	if lanes == 16 {
		cbcEnc16VAES512(&b.enc[0], b.rounds, d, s, unitSize, unitSize/blockSize, ivs)
	} else {
		cbcEnc8AESNI(&b.enc[0], b.rounds, d, s, unitSize, unitSize/blockSize, ivs)
	}
}
