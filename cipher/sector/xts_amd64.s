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
// nr, DI dst, SI src, DX n (>= 1), R8 tw. Eight blocks at a time in X0-X7,
// then single blocks.
//
// The tweaks are computed in general-purpose registers (R11 low half, R12
// high half, R13 scratch: XTS_DOUBLE_GPR), on the integer units, so that the
// vector units that also run AES do only the XORs. They are computed two
// groups of eight ahead, one doubling per round, and kept on the stack in
// three 128-byte buffers: R9 the current group's, R10 the next one's, R8 the
// one being filled. Two groups ahead because a 16-byte load of a tweak
// written by two 8-byte stores cannot be forwarded from the store buffer:
// it has to wait until the stores have reached the cache. The whitening
// folds into the tweak XOR (X12 holds round key 0, X14 the last round key,
// X13 the round key of the current round, loaded once for the eight
// blocks). The stack buffers are cleared before returning.
#define XTS_AESNI(op, lastop) \
	SCHEDULE_END; \
	VMOVDQU (BX), X12; \
	VMOVDQU (AX), X14; \
	MOVQ 0(R8), R11; \
	MOVQ 8(R8), R12; \
	CMPQ DX, $8; \
	JB   tail; \
	LEAQ 0(SP), R9; \
	LEAQ 128(SP), R10; \
	LEAQ 256(SP), R8; \
	MOVQ R11, 0(R9); \
	MOVQ R12, 8(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 16(R9); \
	MOVQ R12, 24(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 32(R9); \
	MOVQ R12, 40(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 48(R9); \
	MOVQ R12, 56(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 64(R9); \
	MOVQ R12, 72(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 80(R9); \
	MOVQ R12, 88(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 96(R9); \
	MOVQ R12, 104(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 112(R9); \
	MOVQ R12, 120(R9); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 0(R10); \
	MOVQ R12, 8(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 16(R10); \
	MOVQ R12, 24(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 32(R10); \
	MOVQ R12, 40(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 48(R10); \
	MOVQ R12, 56(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 64(R10); \
	MOVQ R12, 72(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 80(R10); \
	MOVQ R12, 88(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 96(R10); \
	MOVQ R12, 104(R10); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 112(R10); \
	MOVQ R12, 120(R10); \
loop8: \
	VPXOR 0(R9), X12, X0; \
	VPXOR 16(R9), X12, X1; \
	VPXOR 32(R9), X12, X2; \
	VPXOR 48(R9), X12, X3; \
	VPXOR 64(R9), X12, X4; \
	VPXOR 80(R9), X12, X5; \
	VPXOR 96(R9), X12, X6; \
	VPXOR 112(R9), X12, X7; \
	VPXOR 0(SI), X0, X0; \
	VPXOR 16(SI), X1, X1; \
	VPXOR 32(SI), X2, X2; \
	VPXOR 48(SI), X3, X3; \
	VPXOR 64(SI), X4, X4; \
	VPXOR 80(SI), X5, X5; \
	VPXOR 96(SI), X6, X6; \
	VPXOR 112(SI), X7, X7; \
	CMPQ CX, $12; \
	JB   loop8_10; \
	JEQ  loop8_12; \
	ROUND8R(op, -208); \
	ROUND8R(op, -192); \
loop8_12: \
	ROUND8R(op, -176); \
	ROUND8R(op, -160); \
loop8_10: \
	ROUND8R(op, -144); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 0(R8); \
	MOVQ R12, 8(R8); \
	ROUND8R(op, -128); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 16(R8); \
	MOVQ R12, 24(R8); \
	ROUND8R(op, -112); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 32(R8); \
	MOVQ R12, 40(R8); \
	ROUND8R(op, -96); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 48(R8); \
	MOVQ R12, 56(R8); \
	ROUND8R(op, -80); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 64(R8); \
	MOVQ R12, 72(R8); \
	ROUND8R(op, -64); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 80(R8); \
	MOVQ R12, 88(R8); \
	ROUND8R(op, -48); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 96(R8); \
	MOVQ R12, 104(R8); \
	ROUND8R(op, -32); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 112(R8); \
	MOVQ R12, 120(R8); \
	ROUND8R(op, -16); \
	lastop X14, X0, X0; \
	lastop X14, X1, X1; \
	lastop X14, X2, X2; \
	lastop X14, X3, X3; \
	lastop X14, X4, X4; \
	lastop X14, X5, X5; \
	lastop X14, X6, X6; \
	lastop X14, X7, X7; \
	VPXOR 0(R9), X0, X0; \
	VPXOR 16(R9), X1, X1; \
	VPXOR 32(R9), X2, X2; \
	VPXOR 48(R9), X3, X3; \
	VPXOR 64(R9), X4, X4; \
	VPXOR 80(R9), X5, X5; \
	VPXOR 96(R9), X6, X6; \
	VPXOR 112(R9), X7, X7; \
	VMOVDQU X0, 0(DI); \
	VMOVDQU X1, 16(DI); \
	VMOVDQU X2, 32(DI); \
	VMOVDQU X3, 48(DI); \
	VMOVDQU X4, 64(DI); \
	VMOVDQU X5, 80(DI); \
	VMOVDQU X6, 96(DI); \
	VMOVDQU X7, 112(DI); \
	MOVQ R9, R13; \
	MOVQ R10, R9; \
	MOVQ R8, R10; \
	MOVQ R13, R8; \
	ADDQ $128, SI; \
	ADDQ $128, DI; \
	SUBQ $8, DX; \
	CMPQ DX, $8; \
	JAE  loop8; \
	MOVQ 0(R9), R11; \
	MOVQ 8(R9), R12; \
	VPXOR   X0, X0, X0; \
	VMOVDQU X0, 0(SP); \
	VMOVDQU X0, 16(SP); \
	VMOVDQU X0, 32(SP); \
	VMOVDQU X0, 48(SP); \
	VMOVDQU X0, 64(SP); \
	VMOVDQU X0, 80(SP); \
	VMOVDQU X0, 96(SP); \
	VMOVDQU X0, 112(SP); \
	VMOVDQU X0, 128(SP); \
	VMOVDQU X0, 144(SP); \
	VMOVDQU X0, 160(SP); \
	VMOVDQU X0, 176(SP); \
	VMOVDQU X0, 192(SP); \
	VMOVDQU X0, 208(SP); \
	VMOVDQU X0, 224(SP); \
	VMOVDQU X0, 240(SP); \
	VMOVDQU X0, 256(SP); \
	VMOVDQU X0, 272(SP); \
	VMOVDQU X0, 288(SP); \
	VMOVDQU X0, 304(SP); \
	VMOVDQU X0, 320(SP); \
	VMOVDQU X0, 336(SP); \
	VMOVDQU X0, 352(SP); \
	VMOVDQU X0, 368(SP); \
	MOVQ tw+40(FP), R8; \
tail: \
	TESTQ DX, DX; \
	JZ    done; \
loop1: \
	VMOVQ R11, X1; \
	VPINSRQ $1, R12, X1, X1; \
	VPXOR (SI), X1, X0; \
	VPXOR X12, X0, X0; \
	RUN1(op, lastop, X0, loop1_10, loop1_12); \
	VPXOR X1, X0, X0; \
	VMOVDQU X0, (DI); \
	XTS_DOUBLE_GPR; \
	ADDQ $16, SI; \
	ADDQ $16, DI; \
	DECQ DX; \
	JNZ  loop1; \
done: \
	MOVQ R11, 0(R8); \
	MOVQ R12, 8(R8)

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
TEXT ·xtsEncAESNI(SB), NOSPLIT, $384-48
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
TEXT ·xtsDecAESNI(SB), NOSPLIT, $384-48
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
