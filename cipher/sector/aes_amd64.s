//go:build amd64 && !purego

#include "textflag.h"

// Single AES blocks, for the XTS tweak, the ESSIV IV and ciphertext stealing:
// the few blocks around the bulk work; and the two steps of the key
// expansion that need the S-box or InvMixColumns. Plain AES-NI (no AVX).

// func subWordAsm(w uint32) uint32
// SubWord by AESENCLAST with a zero round key: with w in all four columns,
// ShiftRows moves nothing, so column 0 of the result is SubBytes(w).
TEXT ·subWordAsm(SB), NOSPLIT, $0-12
	MOVL       w+0(FP), AX
	MOVQ       AX, X0
	PSHUFD     $0, X0, X0
	PXOR       X1, X1
	AESENCLAST X1, X0
	MOVQ       X0, AX
	MOVL       AX, ret+8(FP)
	RET

// func invMixColumnsAsm(dst, src *byte)
// One round key through AESIMC (InvMixColumns), for the decryption schedule.
TEXT ·invMixColumnsAsm(SB), NOSPLIT, $0-16
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVUPS (SI), X0
	AESIMC X0, X0
	MOVUPS X0, (DI)
	RET

// func encryptBlockAsm(rk *byte, nr int, dst, src *byte)
// One AES block (AES-NI only). dst may equal src.
TEXT ·encryptBlockAsm(SB), NOSPLIT, $0-32
	MOVQ   rk+0(FP), AX
	MOVQ   nr+8(FP), CX
	MOVQ   dst+16(FP), DI
	MOVQ   src+24(FP), SI
	MOVUPS (SI), X0
	MOVUPS (AX), X1
	PXOR   X1, X0
	ADDQ   $16, AX
	DECQ   CX

enc_loop:
	MOVUPS (AX), X1
	AESENC X1, X0
	ADDQ   $16, AX
	DECQ   CX
	JNZ    enc_loop
	MOVUPS     (AX), X1
	AESENCLAST X1, X0
	MOVUPS     X0, (DI)
	RET

// func decryptBlockAsm(rk *byte, nr int, dst, src *byte)
// One AES block with the decryption schedule (AES-NI only).
TEXT ·decryptBlockAsm(SB), NOSPLIT, $0-32
	MOVQ   rk+0(FP), AX
	MOVQ   nr+8(FP), CX
	MOVQ   dst+16(FP), DI
	MOVQ   src+24(FP), SI
	MOVUPS (SI), X0
	MOVUPS (AX), X1
	PXOR   X1, X0
	ADDQ   $16, AX
	DECQ   CX

dec_loop:
	MOVUPS (AX), X1
	AESDEC X1, X0
	ADDQ   $16, AX
	DECQ   CX
	JNZ    dec_loop
	MOVUPS     (AX), X1
	AESDECLAST X1, X0
	MOVUPS     X0, (DI)
	RET
