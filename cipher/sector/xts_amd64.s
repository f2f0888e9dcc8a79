//go:build amd64 && !purego

#include "textflag.h"
#include "aes_amd64.h"

// XTS-AES over n whole blocks (IEEE 1619-2007 section 5.3.1 / 5.4.1 applied
// block after block): C_j = E_K1(P_j xor T_j) xor T_j, T_{j+1} = T_j * alpha.
// *tw holds T_0 (already encrypted with the tweak key) on entry and the tweak
// of the block after the last on return, which the caller needs for
// ciphertext stealing. Decryption is the same with AESDEC and the equivalent
// inverse cipher's round keys. dst may equal src: each group of blocks is
// loaded before any of it is stored.

// xtsMask is the carry mask for XTS_DOUBLE: 0x87 for the low half, 1 for the
// high half.
DATA xtsMask<>+0(SB)/8, $0x87
DATA xtsMask<>+8(SB)/8, $1
GLOBL xtsMask<>(SB), RODATA|NOPTR, $16

// gfPoly is x^7 + x^2 + x + 1 (0x87) in the low half of a 128-bit lane: the
// multiplier for the bits shifted out of the top in MULX_Z.
DATA gfPoly<>+0(SB)/8, $0x87
DATA gfPoly<>+8(SB)/8, $0
GLOBL gfPoly<>(SB), RODATA|NOPTR, $16

// XTS_AESNI is the body of xtsEncAESNI and xtsDecAESNI: BX round keys, CX
// nr, DI dst, SI src, DX n (>= 1), R8 tw. Eight blocks at a time in X0-X7
// with their tweaks in X8-X15, then single blocks.
#define XTS_AESNI(op, lastop) \
	SCHEDULE_END; \
	VMOVDQU (R8), X8; \
	CMPQ DX, $8; \
	JB   tail; \
loop8: \
	XTS_DOUBLE(X8, X9, X0); \
	XTS_DOUBLE(X9, X10, X1); \
	XTS_DOUBLE(X10, X11, X2); \
	XTS_DOUBLE(X11, X12, X3); \
	XTS_DOUBLE(X12, X13, X4); \
	XTS_DOUBLE(X13, X14, X5); \
	XTS_DOUBLE(X14, X15, X6); \
	VPXOR 0(SI), X8, X0; \
	VPXOR 16(SI), X9, X1; \
	VPXOR 32(SI), X10, X2; \
	VPXOR 48(SI), X11, X3; \
	VPXOR 64(SI), X12, X4; \
	VPXOR 80(SI), X13, X5; \
	VPXOR 96(SI), X14, X6; \
	VPXOR 112(SI), X15, X7; \
	WHITEN8; \
	RUN8(op, lastop, loop8_10, loop8_12); \
	VPXOR X8, X0, X0; \
	VPXOR X9, X1, X1; \
	VPXOR X10, X2, X2; \
	VPXOR X11, X3, X3; \
	VPXOR X12, X4, X4; \
	VPXOR X13, X5, X5; \
	VPXOR X14, X6, X6; \
	VPXOR X15, X7, X7; \
	VMOVDQU X0, 0(DI); \
	VMOVDQU X1, 16(DI); \
	VMOVDQU X2, 32(DI); \
	VMOVDQU X3, 48(DI); \
	VMOVDQU X4, 64(DI); \
	VMOVDQU X5, 80(DI); \
	VMOVDQU X6, 96(DI); \
	VMOVDQU X7, 112(DI); \
	XTS_DOUBLE(X15, X8, X0); \
	ADDQ $128, SI; \
	ADDQ $128, DI; \
	SUBQ $8, DX; \
	CMPQ DX, $8; \
	JAE  loop8; \
tail: \
	TESTQ DX, DX; \
	JZ    done; \
loop1: \
	VPXOR (SI), X8, X0; \
	VPXOR (BX), X0, X0; \
	RUN1(op, lastop, X0, loop1_10, loop1_12); \
	VPXOR X8, X0, X0; \
	VMOVDQU X0, (DI); \
	XTS_DOUBLE(X8, X8, X1); \
	ADDQ $16, SI; \
	ADDQ $16, DI; \
	DECQ DX; \
	JNZ  loop1; \
done: \
	VMOVDQU X8, (R8)

// MULX_Z sets dst = src * x^k in each 128-bit lane (k <= 56): both 64-bit
// halves shift left by k, the k bits leaving the low half enter the high
// half (VPSLLDQ moves them across), and the k bits leaving the top are
// reduced by carry-less multiplication with 0x87 (at most k+7 bits, so the
// product stays in the low half). dst may be src; t1, t2 are clobbered.
// Needs the polynomial in Z31.
#define MULX_Z(src, dst, k, t1, t2) \
	VPSRLQ     $(64-k), src, t1; \
	VPCLMULQDQ $0x01, Z31, t1, t2; \
	VPSLLDQ    $8, t1, t1; \
	VPSLLQ     $k, src, dst; \
	VPTERNLOGD $0x96, t1, t2, dst

// XTS_VAES512 is the body of xtsEncVAES512 and xtsDecVAES512: registers as
// for XTS_AESNI. Sixteen blocks per iteration in Z0-Z3, their tweaks in
// Z8-Z11 (T_j .. T_j+15, four per register), round keys in Z16-Z30. The last
// iteration handles the remaining 1..16 blocks with masked loads and stores
// (masked-off elements are neither read nor written), so there is no
// separate tail loop. Afterwards the tweak of the block after the last is
// T_last * alpha, with T_last read back from the tweak registers stored
// on the stack (256 bytes at 0(SP), cleared again before returning).
#define XTS_VAES512(op, lastop) \
	SCHEDULE_END; \
	LOADKEYS_Z(keys10); \
	VBROADCASTI32X4 gfPoly<>(SB), Z31; \
	VMOVDQU (R8), X8; \
	XTS_DOUBLE(X8, X9, X4); \
	XTS_DOUBLE(X9, X10, X4); \
	XTS_DOUBLE(X10, X11, X4); \
	VINSERTI32X4 $1, X9, Z8, Z8; \
	VINSERTI32X4 $2, X10, Z8, Z8; \
	VINSERTI32X4 $3, X11, Z8, Z8; \
	MULX_Z(Z8, Z9, 4, Z4, Z5); \
	MULX_Z(Z9, Z10, 4, Z4, Z5); \
	MULX_Z(Z10, Z11, 4, Z4, Z5); \
	MOVQ $-1, R11; \
	MOVQ $16, R12; \
loop: \
	MOVQ    R12, R10; \
	CMPQ    DX, R12; \
	CMOVQLT DX, R10; \
	MASKS4; \
	VMOVDQU64.Z 0(SI), K1, Z0; \
	VMOVDQU64.Z 64(SI), K2, Z1; \
	VMOVDQU64.Z 128(SI), K3, Z2; \
	VMOVDQU64.Z 192(SI), K4, Z3; \
	VPTERNLOGD $0x96, Z16, Z8, Z0; \
	VPTERNLOGD $0x96, Z16, Z9, Z1; \
	VPTERNLOGD $0x96, Z16, Z10, Z2; \
	VPTERNLOGD $0x96, Z16, Z11, Z3; \
	RUNZ4(op, lastop, loop_10, loop_12); \
	VPXORQ Z8, Z0, Z0; \
	VPXORQ Z9, Z1, Z1; \
	VPXORQ Z10, Z2, Z2; \
	VPXORQ Z11, Z3, Z3; \
	VMOVDQU64 Z0, K1, 0(DI); \
	VMOVDQU64 Z1, K2, 64(DI); \
	VMOVDQU64 Z2, K3, 128(DI); \
	VMOVDQU64 Z3, K4, 192(DI); \
	SUBQ R10, DX; \
	JZ   finish; \
	MULX_Z(Z8, Z8, 16, Z4, Z5); \
	MULX_Z(Z9, Z9, 16, Z6, Z7); \
	MULX_Z(Z10, Z10, 16, Z12, Z13); \
	MULX_Z(Z11, Z11, 16, Z14, Z15); \
	ADDQ $256, SI; \
	ADDQ $256, DI; \
	JMP  loop; \
finish: \
	VMOVDQU64 Z8, 0(SP); \
	VMOVDQU64 Z9, 64(SP); \
	VMOVDQU64 Z10, 128(SP); \
	VMOVDQU64 Z11, 192(SP); \
	SHLQ $4, R10; \
	VMOVDQU -16(SP)(R10*1), X0; \
	XTS_DOUBLE(X0, X0, X1); \
	VMOVDQU X0, (R8); \
	VPXORQ    Z1, Z1, Z1; \
	VMOVDQU64 Z1, 0(SP); \
	VMOVDQU64 Z1, 64(SP); \
	VMOVDQU64 Z1, 128(SP); \
	VMOVDQU64 Z1, 192(SP); \
	VZEROUPPER

// func xtsEncAESNI(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)
// Requires AES-NI and AVX.
TEXT ·xtsEncAESNI(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ tw+40(FP), R8
	XTS_AESNI(VAESENC, VAESENCLAST)
	RET

// func xtsDecAESNI(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)
// Requires AES-NI and AVX; rk is the decryption schedule.
TEXT ·xtsDecAESNI(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ tw+40(FP), R8
	XTS_AESNI(VAESDEC, VAESDECLAST)
	RET

// func xtsEncVAES512(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)
// Requires AVX-512 F/BW/VL, VAES, VPCLMULQDQ and BMI2.
TEXT ·xtsEncVAES512(SB), NOSPLIT, $256-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ tw+40(FP), R8
	XTS_VAES512(VAESENC, VAESENCLAST)
	RET

// func xtsDecVAES512(rk *byte, nr int, dst, src *byte, n int, tw *[16]byte)
// Requirements as xtsEncVAES512; rk is the decryption schedule.
TEXT ·xtsDecVAES512(SB), NOSPLIT, $256-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ tw+40(FP), R8
	XTS_VAES512(VAESDEC, VAESDECLAST)
	RET
