//go:build amd64 && !purego

#include "textflag.h"
#include "aes_amd64.h"

// CBC on whole blocks. Encryption within one unit is a chain (each block
// needs the previous ciphertext), so it runs at the AES latency; throughput
// comes from encrypting several units side by side (cbcEnc8AESNI,
// cbcEnc16VAES512). Decryption of every block is independent and runs 8 or 16
// blocks at a time. In place (dst == src) a block's chaining value, the
// ciphertext block before it, must be read before it is overwritten:
// cbcDecVAES512 goes from the last group to the first, cbcDecAESNI from the
// first up and carries each group's last ciphertext block in a register.

// func cbcEncAESNI(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)
// CBC-encrypts n >= 1 blocks with the chaining value *iv; the chain is in X0
// and the round keys in X1 (round 0) and X2-X15 (X15-k = round nr-k).
// Requires AES-NI and AVX.
TEXT ·cbcEncAESNI(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ iv+40(FP), R8
	SCHEDULE_END
	VMOVDQU (R8), X0
	VMOVDQU -144(AX), X6
	VMOVDQU -128(AX), X7
	VMOVDQU -112(AX), X8
	VMOVDQU -96(AX), X9
	VMOVDQU -80(AX), X10
	VMOVDQU -64(AX), X11
	VMOVDQU -48(AX), X12
	VMOVDQU -32(AX), X13
	VMOVDQU -16(AX), X14
	VMOVDQU 0(AX), X15
	CMPQ    CX, $12
	JB      loop10
	VMOVDQU -176(AX), X4
	VMOVDQU -160(AX), X5
	JEQ     loop12

loop14:
	// The plaintext and round key 0 are combined off the chain.
	VMOVDQU     (SI), X1
	VPXOR       (BX), X1, X1
	VPXOR       X1, X0, X0
	VAESENC     -208(AX), X0, X0
	VAESENC     -192(AX), X0, X0
	VAESENC     X4, X0, X0
	VAESENC     X5, X0, X0
	VAESENC     X6, X0, X0
	VAESENC     X7, X0, X0
	VAESENC     X8, X0, X0
	VAESENC     X9, X0, X0
	VAESENC     X10, X0, X0
	VAESENC     X11, X0, X0
	VAESENC     X12, X0, X0
	VAESENC     X13, X0, X0
	VAESENC     X14, X0, X0
	VAESENCLAST X15, X0, X0
	VMOVDQU     X0, (DI)
	ADDQ        $16, SI
	ADDQ        $16, DI
	DECQ        DX
	JNZ         loop14
	VMOVDQU     X0, (R8)
	RET

loop12:
	VMOVDQU     (SI), X1
	VPXOR       (BX), X1, X1
	VPXOR       X1, X0, X0
	VAESENC     X4, X0, X0
	VAESENC     X5, X0, X0
	VAESENC     X6, X0, X0
	VAESENC     X7, X0, X0
	VAESENC     X8, X0, X0
	VAESENC     X9, X0, X0
	VAESENC     X10, X0, X0
	VAESENC     X11, X0, X0
	VAESENC     X12, X0, X0
	VAESENC     X13, X0, X0
	VAESENC     X14, X0, X0
	VAESENCLAST X15, X0, X0
	VMOVDQU     X0, (DI)
	ADDQ        $16, SI
	ADDQ        $16, DI
	DECQ        DX
	JNZ         loop12
	VMOVDQU     X0, (R8)
	RET

loop10:
	VMOVDQU     (SI), X1
	VPXOR       (BX), X1, X1
	VPXOR       X1, X0, X0
	VAESENC     X6, X0, X0
	VAESENC     X7, X0, X0
	VAESENC     X8, X0, X0
	VAESENC     X9, X0, X0
	VAESENC     X10, X0, X0
	VAESENC     X11, X0, X0
	VAESENC     X12, X0, X0
	VAESENC     X13, X0, X0
	VAESENC     X14, X0, X0
	VAESENCLAST X15, X0, X0
	VMOVDQU     X0, (DI)
	ADDQ        $16, SI
	ADDQ        $16, DI
	DECQ        DX
	JNZ         loop10
	VMOVDQU     X0, (R8)
	RET

// func cbcEnc8AESNI(rk *byte, nr int, dst, src *byte, stride, n int, ivs *[16*16]byte)
// CBC-encrypts n >= 1 blocks of each of 8 units side by side: unit u starts
// at src+u*stride (dst+u*stride) and chains from the IV at ivs[16u:]. The 8
// chains live in X0-X7; R9 = stride, R10 = 3*stride, R11/R12 = src/dst +
// 4*stride. With 4 KiB units the 8 cache lines of one step share an L1 set,
// which has 8 to 12 ways on current cores; cbcEnc16VAES512 explains why 16
// lines do not fit.
// Requires AES-NI and AVX.
TEXT ·cbcEnc8AESNI(SB), NOSPLIT, $0-56
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ stride+32(FP), R9
	MOVQ n+40(FP), DX
	MOVQ ivs+48(FP), R8
	SCHEDULE_END
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	LEAQ (DI)(R9*4), R12
	VMOVDQU 0(R8), X0
	VMOVDQU 16(R8), X1
	VMOVDQU 32(R8), X2
	VMOVDQU 48(R8), X3
	VMOVDQU 64(R8), X4
	VMOVDQU 80(R8), X5
	VMOVDQU 96(R8), X6
	VMOVDQU 112(R8), X7

loop:
	VPXOR (SI), X0, X0
	VPXOR (SI)(R9*1), X1, X1
	VPXOR (SI)(R9*2), X2, X2
	VPXOR (SI)(R10*1), X3, X3
	VPXOR (R11), X4, X4
	VPXOR (R11)(R9*1), X5, X5
	VPXOR (R11)(R9*2), X6, X6
	VPXOR (R11)(R10*1), X7, X7
	WHITEN8
	RUN8(VAESENC, VAESENCLAST, loop_10, loop_12)
	VMOVDQU X0, (DI)
	VMOVDQU X1, (DI)(R9*1)
	VMOVDQU X2, (DI)(R9*2)
	VMOVDQU X3, (DI)(R10*1)
	VMOVDQU X4, (R12)
	VMOVDQU X5, (R12)(R9*1)
	VMOVDQU X6, (R12)(R9*2)
	VMOVDQU X7, (R12)(R10*1)
	ADDQ    $16, SI
	ADDQ    $16, DI
	ADDQ    $16, R11
	ADDQ    $16, R12
	DECQ    DX
	JNZ     loop
	RET

// TRANSPOSE4 transposes the 4x4 matrix of 128-bit lanes in a, b, c, d (row
// i in register i) in place, through t0-t3: afterwards lane j of a is lane 0
// of input row j, and so on. VSHUFI64X2 takes lanes 0-1 of its result from
// its second source (a, c, t0, t1 here) and lanes 2-3 from its first.
#define TRANSPOSE4(a, b, c, d, t0, t1, t2, t3) \
	VSHUFI64X2 $0x88, b, a, t0; \
	VSHUFI64X2 $0xdd, b, a, t1; \
	VSHUFI64X2 $0x88, d, c, t2; \
	VSHUFI64X2 $0xdd, d, c, t3; \
	VSHUFI64X2 $0x88, t2, t0, a; \
	VSHUFI64X2 $0x88, t3, t1, b; \
	VSHUFI64X2 $0xdd, t2, t0, c; \
	VSHUFI64X2 $0xdd, t3, t1, d

// STAGE_IN copies the next 64 bytes (K1 masks them to the phase's blocks) of
// units base, base+stride, base+2*stride, base+3*stride into the staging
// area, transposed: block g of the four units goes to the 64 bytes at
// og(SP), og = 256g + 64k for the units' group k.
#define STAGE_IN(base, o0, o1, o2, o3) \
	VMOVDQU64.Z (base), K1, Z4; \
	VMOVDQU64.Z (base)(R9*1), K1, Z5; \
	VMOVDQU64.Z (base)(R9*2), K1, Z6; \
	VMOVDQU64.Z (base)(R10*1), K1, Z7; \
	TRANSPOSE4(Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11); \
	VMOVDQU64 Z4, o0(SP); \
	VMOVDQU64 Z5, o1(SP); \
	VMOVDQU64 Z6, o2(SP); \
	VMOVDQU64 Z7, o3(SP)

// STAGE_OUT is the inverse of STAGE_IN, to the units at base+DI (DI holds
// dst-src).
#define STAGE_OUT(base, o0, o1, o2, o3) \
	VMOVDQU64 o0(SP), Z4; \
	VMOVDQU64 o1(SP), Z5; \
	VMOVDQU64 o2(SP), Z6; \
	VMOVDQU64 o3(SP), Z7; \
	TRANSPOSE4(Z4, Z5, Z6, Z7, Z8, Z9, Z10, Z11); \
	LEAQ      (base)(DI*1), AX; \
	VMOVDQU64 Z4, K1, (AX); \
	VMOVDQU64 Z5, K1, (AX)(R9*1); \
	VMOVDQU64 Z6, K1, (AX)(R9*2); \
	VMOVDQU64 Z7, K1, (AX)(R10*1)

// func cbcEnc16VAES512(rk *byte, nr int, dst, src *byte, stride, n int, ivs *[16*16]byte)
// cbcEnc8AESNI for 16 units, four chains per register in Z0-Z3 (units 4g ..
// 4g+3 in Zg).
//
// The units do not go to the AES registers straight from memory: with 4 KiB
// units the same block of 16 units lies in 16 cache lines that all map to
// one L1 set, more than its ways, and loading them step by step thrashed the
// set (4 GB/s instead of 18). Instead the work is done in phases of four
// blocks (one cache line per unit): each unit's line is loaded once,
// transposed into a 1 KiB staging area on the stack (one 64-byte row per
// step and register), the four steps run on the staging area, and the
// lines are transposed back and stored once. The last phase may be shorter,
// with masked loads and stores. src groups at SI, R11, R12, R13; DI = dst -
// src; BX = blocks in this phase.
// Requires AVX-512 F/VL, VAES and BMI2.
TEXT ·cbcEnc16VAES512(SB), 0, $1024-56
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ stride+32(FP), R9
	MOVQ n+40(FP), DX
	MOVQ ivs+48(FP), R8
	SCHEDULE_END
	LOADKEYS_Z(keys10)
	VMOVDQU64 0(R8), Z0
	VMOVDQU64 64(R8), Z1
	VMOVDQU64 128(R8), Z2
	VMOVDQU64 192(R8), Z3
	SUBQ SI, DI
	LEAQ (R9)(R9*2), R10
	LEAQ (SI)(R9*4), R11
	LEAQ (R11)(R9*4), R12
	LEAQ (R12)(R9*4), R13
	MOVQ $-1, R14

phase:
	MOVQ    $4, BX
	CMPQ    DX, BX
	CMOVQLT DX, BX
	LEAQ    (BX)(BX*1), R15
	BZHIQ   R15, R14, R15
	KMOVW   R15, K1
	STAGE_IN(SI, 0, 256, 512, 768)
	STAGE_IN(R11, 64, 320, 576, 832)
	STAGE_IN(R12, 128, 384, 640, 896)
	STAGE_IN(R13, 192, 448, 704, 960)
	MOVQ SP, AX
	MOVQ BX, R15

step:
	VPTERNLOGD $0x96, 0(AX), Z16, Z0
	VPTERNLOGD $0x96, 64(AX), Z16, Z1
	VPTERNLOGD $0x96, 128(AX), Z16, Z2
	VPTERNLOGD $0x96, 192(AX), Z16, Z3
	RUNZ4(VAESENC, VAESENCLAST, step_10, step_12)
	VMOVDQU64 Z0, 0(AX)
	VMOVDQU64 Z1, 64(AX)
	VMOVDQU64 Z2, 128(AX)
	VMOVDQU64 Z3, 192(AX)
	ADDQ $256, AX
	DECQ R15
	JNZ  step
	STAGE_OUT(SI, 0, 256, 512, 768)
	STAGE_OUT(R11, 64, 320, 576, 832)
	STAGE_OUT(R12, 128, 384, 640, 896)
	STAGE_OUT(R13, 192, 448, 704, 960)
	ADDQ $64, SI
	ADDQ $64, R11
	ADDQ $64, R12
	ADDQ $64, R13
	SUBQ BX, DX
	JNZ  phase

	// Leave no plaintext in the staging area.
	VPXORQ    Z4, Z4, Z4
	MOVQ      SP, AX
	MOVQ      $16, BX

clear:
	VMOVDQU64 Z4, (AX)
	ADDQ      $64, AX
	DECQ      BX
	JNZ       clear
	VZEROUPPER
	RET

// func cbcDecAESNI(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)
// CBC-decrypts n >= 1 blocks chained from *iv: groups of 8 from block 0
// up while 8 remain, then single blocks.
//
// Eight blocks in flight are just enough to keep two AES units of latency
// four busy, so nothing else may sit on the chains: round keys are loaded
// into a register once per round (ROUND8R, not a memory operand per block),
// and the chaining XOR is folded into the last round. AESDECLAST ends with
// an XOR of its round key, so AESDECLAST(x, k) ^ C = AESDECLAST(x, k ^ C):
// the last key XOR the previous ciphertext block is computed off the
// chain, from loads alone, and the result is the plaintext.
//
// The blocks go upwards, as the hardware prefetchers expect (downwards,
// 4 KiB units out of L2 decrypted 5-10 % slower). In place (dst == src) a
// group's stores overwrite the ciphertext the next group chains from, so
// the last ciphertext block of each group is carried in X15, which starts
// as *iv. X8 holds round key 0, X9 the last.
// Requires AES-NI and AVX; rk is the decryption schedule.
TEXT ·cbcDecAESNI(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ iv+40(FP), R8
	SCHEDULE_END
	VMOVDQU (BX), X8
	VMOVDQU (AX), X9
	VMOVDQU (R8), X15

loop8:
	CMPQ  DX, $8
	JB    tail
	VPXOR 0(SI), X8, X0
	VPXOR 16(SI), X8, X1
	VPXOR 32(SI), X8, X2
	VPXOR 48(SI), X8, X3
	VPXOR 64(SI), X8, X4
	VPXOR 80(SI), X8, X5
	VPXOR 96(SI), X8, X6
	VPXOR 112(SI), X8, X7
	CMPQ  CX, $12
	JB    loop8_10
	JEQ   loop8_12
	ROUND8R(VAESDEC, -208)
	ROUND8R(VAESDEC, -192)

loop8_12:
	ROUND8R(VAESDEC, -176)
	ROUND8R(VAESDEC, -160)

loop8_10:
	ROUND8R(VAESDEC, -144)
	ROUND8R(VAESDEC, -128)
	ROUND8R(VAESDEC, -112)
	ROUND8R(VAESDEC, -96)
	ROUND8R(VAESDEC, -80)
	ROUND8R(VAESDEC, -64)
	ROUND8R(VAESDEC, -48)
	ROUND8R(VAESDEC, -32)
	ROUND8R(VAESDEC, -16)
	VPXOR       X15, X9, X10
	VPXOR       0(SI), X9, X11
	VPXOR       16(SI), X9, X12
	VPXOR       32(SI), X9, X14
	VAESDECLAST X10, X0, X0
	VAESDECLAST X11, X1, X1
	VAESDECLAST X12, X2, X2
	VAESDECLAST X14, X3, X3
	VPXOR       48(SI), X9, X10
	VPXOR       64(SI), X9, X11
	VPXOR       80(SI), X9, X12
	VPXOR       96(SI), X9, X14
	VMOVDQU     112(SI), X15
	VAESDECLAST X10, X4, X4
	VAESDECLAST X11, X5, X5
	VAESDECLAST X12, X6, X6
	VAESDECLAST X14, X7, X7
	VMOVDQU     X0, 0(DI)
	VMOVDQU     X1, 16(DI)
	VMOVDQU     X2, 32(DI)
	VMOVDQU     X3, 48(DI)
	VMOVDQU     X4, 64(DI)
	VMOVDQU     X5, 80(DI)
	VMOVDQU     X6, 96(DI)
	VMOVDQU     X7, 112(DI)
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $8, DX
	JMP         loop8

tail:
	// Fewer than 8 blocks left: one at a time, upwards.
	TESTQ DX, DX
	JZ    done
	VMOVDQU (SI), X1
	VPXOR   X1, X8, X0
	VPXOR   X15, X9, X10
	VMOVDQA X1, X15
	CMPQ    CX, $12
	JB      tail_10
	JEQ     tail_12
	VAESDEC -208(AX), X0, X0
	VAESDEC -192(AX), X0, X0

tail_12:
	VAESDEC -176(AX), X0, X0
	VAESDEC -160(AX), X0, X0

tail_10:
	VAESDEC     -144(AX), X0, X0
	VAESDEC     -128(AX), X0, X0
	VAESDEC     -112(AX), X0, X0
	VAESDEC     -96(AX), X0, X0
	VAESDEC     -80(AX), X0, X0
	VAESDEC     -64(AX), X0, X0
	VAESDEC     -48(AX), X0, X0
	VAESDEC     -32(AX), X0, X0
	VAESDEC     -16(AX), X0, X0
	VAESDECLAST X10, X0, X0
	VMOVDQU     X0, (DI)
	ADDQ        $16, SI
	ADDQ        $16, DI
	DECQ        DX
	JMP         tail

done:
	RET

// func cbcDecVAES512(rk *byte, nr int, dst, src *byte, n int, iv *[16]byte)
// cbcDecAESNI with groups of up to 16 blocks in Z0-Z3 (the lowest group,
// above block 0, masked to its size), round keys in Z16-Z30.
// Requires AVX-512 F/BW/VL, VAES and BMI2; rk is the decryption schedule.
TEXT ·cbcDecVAES512(SB), NOSPLIT, $0-48
	MOVQ rk+0(FP), BX
	MOVQ nr+8(FP), CX
	MOVQ dst+16(FP), DI
	MOVQ src+24(FP), SI
	MOVQ n+32(FP), DX
	MOVQ iv+40(FP), R8
	SCHEDULE_END
	LOADKEYS_Z(keys10)
	MOVQ $-1, R11
	MOVQ $16, R12

loop:
	// c = min(16, DX-1) blocks [DX-c, DX), all above block 0.
	MOVQ    DX, R10
	DECQ    R10
	JZ      block0
	CMPQ    R10, R12
	CMOVQGT R12, R10
	SUBQ    R10, DX
	MASKS4
	MOVQ    DX, R9
	SHLQ    $4, R9
	LEAQ    (SI)(R9*1), R13
	LEAQ    (DI)(R9*1), R14
	VMOVDQU64.Z 0(R13), K1, Z0
	VMOVDQU64.Z 64(R13), K2, Z1
	VMOVDQU64.Z 128(R13), K3, Z2
	VMOVDQU64.Z 192(R13), K4, Z3
	VPXORQ Z16, Z0, Z0
	VPXORQ Z16, Z1, Z1
	VPXORQ Z16, Z2, Z2
	VPXORQ Z16, Z3, Z3
	RUNZ4(VAESDEC, VAESDECLAST, loop_10, loop_12)
	VMOVDQU64.Z -16(R13), K1, Z4
	VMOVDQU64.Z 48(R13), K2, Z5
	VMOVDQU64.Z 112(R13), K3, Z6
	VMOVDQU64.Z 176(R13), K4, Z7
	VPXORQ Z4, Z0, Z0
	VPXORQ Z5, Z1, Z1
	VPXORQ Z6, Z2, Z2
	VPXORQ Z7, Z3, Z3
	VMOVDQU64 Z0, K1, 0(R14)
	VMOVDQU64 Z1, K2, 64(R14)
	VMOVDQU64 Z2, K3, 128(R14)
	VMOVDQU64 Z3, K4, 192(R14)
	JMP     loop

block0:
	VMOVDQU (SI), X0
	VPXOR   (BX), X0, X0
	RUN1(VAESDEC, VAESDECLAST, X0, b0_10, b0_12)
	VPXOR   (R8), X0, X0
	VMOVDQU X0, (DI)
	VZEROUPPER
	RET
