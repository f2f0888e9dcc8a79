//go:build amd64 && !purego

#include "textflag.h"
#include "aes_amd64.h"

// XTS-AES over a run of whole data units (EncryptSectors, DecryptSectors
// and Encrypt/Decrypt of a unit that is a multiple of 128 bytes) in one
// call: the assembly also encrypts each unit's tweak E_K2(unit) itself, one
// unit ahead, and runs the block pipeline of XTS_AESNI (xts_amd64.s)
// straight across unit boundaries, so that it does not drain and refill
// at every 4096-byte extent.
//
// Registers as in XTS_AESNI: BX round keys of K1 (encryption or
// decryption), AX its last round key, CX nr, DI dst, SI src, DX blocks left,
// X0-X7 the blocks, X12/X14 the first and last round keys, X13 the current
// one, R11:R12 the tweak being generated (R13 scratch), R9, R10, R8 the
// three 128-byte tweak buffers (current group, next group, being filled).
// X15 computes the next unit's first tweak. Stack: 0-383 the buffers,
// 384-399 the first tweak of the next unit, 400 the groups left in the
// generator's unit, 408 the number of the next unit; all cleared before
// returning.

// XTS_TWEAK0 encrypts the unit number in 408(SP) (masked by the mask
// argument: dm-crypt plain keeps 32 bits) with K2 into 384(SP). Clobbers
// R13, X15 and the flags; l10, l12, lend are labels unique to the call site.
#define XTS_TWEAK0(l10, l12, lend) \
	MOVQ 408(SP), R13; \
	ANDQ mask+64(FP), R13; \
	VMOVQ R13, X15; \
	MOVQ rk2+8(FP), R13; \
	VPXOR (R13), X15, X15; \
	VAESENC 16(R13), X15, X15; \
	VAESENC 32(R13), X15, X15; \
	VAESENC 48(R13), X15, X15; \
	VAESENC 64(R13), X15, X15; \
	VAESENC 80(R13), X15, X15; \
	VAESENC 96(R13), X15, X15; \
	VAESENC 112(R13), X15, X15; \
	VAESENC 128(R13), X15, X15; \
	VAESENC 144(R13), X15, X15; \
	CMPQ CX, $12; \
	JB   l10; \
	VAESENC 160(R13), X15, X15; \
	VAESENC 176(R13), X15, X15; \
	JEQ  l12; \
	VAESENC 192(R13), X15, X15; \
	VAESENC 208(R13), X15, X15; \
	VAESENCLAST 224(R13), X15, X15; \
	JMP  lend; \
l12: \
	VAESENCLAST 192(R13), X15, X15; \
	JMP  lend; \
l10: \
	VAESENCLAST 160(R13), X15, X15; \
lend: \
	VMOVDQU X15, 384(SP)

// XTS_GEN_FIRST puts the first tweak of the next group into 0(buf): the
// doubled tweak, or, when the generator's unit is done, the next unit's
// first tweak (and starts encrypting the one after). Labels as XTS_TWEAK0.
#define XTS_GEN_FIRST(buf, lnew, ldone, l10, l12, lend) \
	DECQ 400(SP); \
	JZ   lnew; \
	XTS_DOUBLE_GPR; \
	JMP  ldone; \
lnew: \
	MOVQ 384(SP), R11; \
	MOVQ 392(SP), R12; \
	MOVQ groups+48(FP), R13; \
	MOVQ R13, 400(SP); \
	INCQ 408(SP); \
	XTS_TWEAK0(l10, l12, lend); \
ldone: \
	MOVQ R11, 0(buf); \
	MOVQ R12, 8(buf)

// XTS_GEN_REST puts tweaks 1-7 of the next group into buf.
#define XTS_GEN_REST(buf) \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 16(buf); \
	MOVQ R12, 24(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 32(buf); \
	MOVQ R12, 40(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 48(buf); \
	MOVQ R12, 56(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 64(buf); \
	MOVQ R12, 72(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 80(buf); \
	MOVQ R12, 88(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 96(buf); \
	MOVQ R12, 104(buf); \
	XTS_DOUBLE_GPR; \
	MOVQ R11, 112(buf); \
	MOVQ R12, 120(buf)

// XTS_AESNI_UNITS is the body of xtsUnitsEncAESNI and xtsUnitsDecAESNI.
// The tweak generator runs two groups ahead as in XTS_AESNI; the first
// tweak of every group is XTS_GEN_FIRST's, so it switches units on a group
// boundary (a unit holds a whole number of groups).
#define XTS_AESNI_UNITS(op, lastop) \
	SCHEDULE_END; \
	VMOVDQU (BX), X12; \
	VMOVDQU (AX), X14; \
	MOVQ unit+56(FP), R13; \
	MOVQ R13, 408(SP); \
	XTS_TWEAK0(t0_10, t0_12, t0_end); \
	MOVQ $1, 400(SP); \
	LEAQ 0(SP), R9; \
	LEAQ 128(SP), R10; \
	LEAQ 256(SP), R8; \
	XTS_GEN_FIRST(R9, g1_new, g1_done, g1_10, g1_12, g1_end); \
	XTS_GEN_REST(R9); \
	XTS_GEN_FIRST(R10, g2_new, g2_done, g2_10, g2_12, g2_end); \
	XTS_GEN_REST(R10); \
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
	XTS_GEN_FIRST(R8, g3_new, g3_done, g3_10, g3_12, g3_end); \
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
	JNZ  loop8; \
	VPXOR X0, X0, X0; \
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
	VMOVDQU X0, 384(SP); \
	VMOVDQU X0, 400(SP)

// func xtsUnitsEncAESNI(rk1, rk2 *byte, nr int, dst, src *byte, units, groups int, unit, mask uint64)
// XTS-encrypts units consecutive data units of groups*128 bytes from src to
// dst, numbered from unit on (mod 2^64; the tweak input is the number AND
// mask). rk1 is K1's encryption schedule, rk2 K2's encryption schedule, both
// of nr rounds. units and groups are at least 1. Requires AES-NI and AVX.
TEXT ·xtsUnitsEncAESNI(SB), NOSPLIT, $416-72
	MOVQ rk1+0(FP), BX
	MOVQ nr+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ units+40(FP), DX
	IMULQ groups+48(FP), DX
	SHLQ $3, DX
	XTS_AESNI_UNITS(VAESENC, VAESENCLAST)
	RET

// func xtsUnitsDecAESNI(rk1, rk2 *byte, nr int, dst, src *byte, units, groups int, unit, mask uint64)
// XTS-decrypts units consecutive data units of groups*128 bytes from src to
// dst, numbered from unit on (mod 2^64; the tweak input is the number AND
// mask). rk1 is K1's decryption schedule, rk2 K2's encryption schedule, both
// of nr rounds. units and groups are at least 1. Requires AES-NI and AVX.
TEXT ·xtsUnitsDecAESNI(SB), NOSPLIT, $416-72
	MOVQ rk1+0(FP), BX
	MOVQ nr+16(FP), CX
	MOVQ dst+24(FP), DI
	MOVQ src+32(FP), SI
	MOVQ units+40(FP), DX
	IMULQ groups+48(FP), DX
	SHLQ $3, DX
	XTS_AESNI_UNITS(VAESDEC, VAESDECLAST)
	RET
