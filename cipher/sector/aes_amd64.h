// Macros shared by the amd64 assembly (xts_amd64.s, cbc_amd64.s).
//
// Round-key addressing. Every function sets BX to round key 0 and AX to the
// last round key (rk + 16*nr). Round nr-k is then at -16k(AX) whatever the
// key size, so the nine rounds before the last are always at -144(AX) ..
// -16(AX), and AES-192 and AES-256 add two or four rounds in front of them
// (-176, -160 and -208, -192). The functions compare CX (nr) with 12 once and
// jump over the rounds the key size does not have. The AES instructions do
// not touch the flags, so one CMPQ serves both jumps.
//
// Operand order is Go's: source(s) first, destination last.

// SCHEDULE_END sets AX = BX + 16*CX, the address of the last round key.
#define SCHEDULE_END \
	MOVQ CX, AX; \
	SHLQ $4, AX; \
	ADDQ BX, AX

// XTS_DOUBLE sets u = t * alpha in GF(2^128) (IEEE 1619 section 5.2) on one
// 128-bit register, using tmp: both 64-bit halves are shifted left by one
// (VPADDQ), and the two bits shifted out are put back from sign masks:
// bit 63 as bit 64 (the 1 in the high half of xtsMask), bit 127 as the
// reduction 0x87 in the low half. VPSHUFD $0x13 places dword 3 (holding bit
// 127) in dword 0 and dword 1 (bit 63) in dword 2 for the arithmetic shift.
// u may be t.
#define XTS_DOUBLE(t, u, tmp) \
	VPSHUFD $0x13, t, tmp; \
	VPSRAD  $31, tmp, tmp; \
	VPAND   xtsMask<>(SB), tmp, tmp; \
	VPADDQ  t, t, u; \
	VPXOR   tmp, u, u

// XTS_DOUBLE_GPR multiplies the tweak in R12:R11 (high:low) by alpha, as
// mulAlpha in xts.go: a 128-bit shift left by one through the carry flag,
// and 0x87 into the low byte when bit 127 falls off (branch-free). R13 is
// clobbered.
#define XTS_DOUBLE_GPR \
	MOVQ R12, R13; \
	SARQ $63, R13; \
	ANDQ $0x87, R13; \
	ADDQ R11, R11; \
	ADCQ R12, R12; \
	XORQ R13, R11

// ---- 128-bit registers, round keys read from memory -------------------

// ROUND8R applies op with the round key at off(AX) to X0-X7, loading the
// key into X13 once.
#define ROUND8R(op, off) \
	VMOVDQU off(AX), X13; \
	op X13, X0, X0; \
	op X13, X1, X1; \
	op X13, X2, X2; \
	op X13, X3, X3; \
	op X13, X4, X4; \
	op X13, X5, X5; \
	op X13, X6, X6; \
	op X13, X7, X7

// ROUND8 applies op (VAESENC, VAESENCLAST, VAESDEC, VAESDECLAST) with the
// round key at off(AX) to X0-X7.
#define ROUND8(op, off) \
	op off(AX), X0, X0; \
	op off(AX), X1, X1; \
	op off(AX), X2, X2; \
	op off(AX), X3, X3; \
	op off(AX), X4, X4; \
	op off(AX), X5, X5; \
	op off(AX), X6, X6; \
	op off(AX), X7, X7

// WHITEN8 XORs round key 0 into X0-X7.
#define WHITEN8 \
	VPXOR (BX), X0, X0; \
	VPXOR (BX), X1, X1; \
	VPXOR (BX), X2, X2; \
	VPXOR (BX), X3, X3; \
	VPXOR (BX), X4, X4; \
	VPXOR (BX), X5, X5; \
	VPXOR (BX), X6, X6; \
	VPXOR (BX), X7, X7

// RUN8 runs all rounds after the whitening on X0-X7 (op for the middle
// rounds, lastop for the last), jumping over the rounds the key size does not
// have; l10 and l12 are labels unique to the call site.
#define RUN8(op, lastop, l10, l12) \
	CMPQ CX, $12; \
	JB   l10; \
	JEQ  l12; \
	ROUND8(op, -208); \
	ROUND8(op, -192); \
l12: \
	ROUND8(op, -176); \
	ROUND8(op, -160); \
l10: \
	ROUND8(op, -144); \
	ROUND8(op, -128); \
	ROUND8(op, -112); \
	ROUND8(op, -96); \
	ROUND8(op, -80); \
	ROUND8(op, -64); \
	ROUND8(op, -48); \
	ROUND8(op, -32); \
	ROUND8(op, -16); \
	ROUND8(lastop, 0)

// RUN1 is RUN8 for the one block in x.
#define RUN1(op, lastop, x, l10, l12) \
	CMPQ CX, $12; \
	JB   l10; \
	JEQ  l12; \
	op -208(AX), x, x; \
	op -192(AX), x, x; \
l12: \
	op -176(AX), x, x; \
	op -160(AX), x, x; \
l10: \
	op -144(AX), x, x; \
	op -128(AX), x, x; \
	op -112(AX), x, x; \
	op -96(AX), x, x; \
	op -80(AX), x, x; \
	op -64(AX), x, x; \
	op -48(AX), x, x; \
	op -32(AX), x, x; \
	op -16(AX), x, x; \
	lastop 0(AX), x, x

// ---- 512-bit registers, round keys in Z16-Z30 --------------------------
//
// Z16 holds round key 0 and Z30-k round key nr-k, each broadcast to the
// four 128-bit lanes: AES-128 uses Z16 and Z21-Z30, AES-192 Z16 and Z19-Z30,
// AES-256 Z16-Z30.

// LOADKEYS_Z broadcasts the round keys into Z16-Z30 (see above). It
// compares CX with 12 and leaves the flags set for the rounds that follow.
#define LOADKEYS_Z(l10) \
	VBROADCASTI32X4 (BX), Z16; \
	VBROADCASTI32X4 -144(AX), Z21; \
	VBROADCASTI32X4 -128(AX), Z22; \
	VBROADCASTI32X4 -112(AX), Z23; \
	VBROADCASTI32X4 -96(AX), Z24; \
	VBROADCASTI32X4 -80(AX), Z25; \
	VBROADCASTI32X4 -64(AX), Z26; \
	VBROADCASTI32X4 -48(AX), Z27; \
	VBROADCASTI32X4 -32(AX), Z28; \
	VBROADCASTI32X4 -16(AX), Z29; \
	VBROADCASTI32X4 0(AX), Z30; \
	CMPQ CX, $12; \
	JB   l10; \
	VBROADCASTI32X4 -176(AX), Z19; \
	VBROADCASTI32X4 -160(AX), Z20; \
	JEQ  l10; \
	VBROADCASTI32X4 -208(AX), Z17; \
	VBROADCASTI32X4 -192(AX), Z18; \
l10:

// ROUNDZ4 applies op with the round key in k to Z0-Z3.
#define ROUNDZ4(op, k) \
	op k, Z0, Z0; \
	op k, Z1, Z1; \
	op k, Z2, Z2; \
	op k, Z3, Z3

// RUNZ4 runs all rounds after the whitening on Z0-Z3 (op for the middle
// rounds, lastop for the last), jumping over the rounds the key size does not
// have; l10 and l12 are labels unique to the call site.
#define RUNZ4(op, lastop, l10, l12) \
	CMPQ CX, $12; \
	JB   l10; \
	JEQ  l12; \
	ROUNDZ4(op, Z17); \
	ROUNDZ4(op, Z18); \
l12: \
	ROUNDZ4(op, Z19); \
	ROUNDZ4(op, Z20); \
l10: \
	ROUNDZ4(op, Z21); \
	ROUNDZ4(op, Z22); \
	ROUNDZ4(op, Z23); \
	ROUNDZ4(op, Z24); \
	ROUNDZ4(op, Z25); \
	ROUNDZ4(op, Z26); \
	ROUNDZ4(op, Z27); \
	ROUNDZ4(op, Z28); \
	ROUNDZ4(op, Z29); \
	ROUNDZ4(lastop, Z30)

// MASKS4 loads K1-K4 with the 64-bit-element masks for the first c blocks
// of a 16-block group held in Z0-Z3 (two mask bits per block, eight per
// register), c in 1..16 in R10. R11 must be all ones; R9 is clobbered.
#define MASKS4 \
	LEAQ  (R10)(R10*1), R9; \
	BZHIQ R9, R11, R9; \
	KMOVW R9, K1; \
	SHRQ  $8, R9; \
	KMOVW R9, K2; \
	SHRQ  $8, R9; \
	KMOVW R9, K3; \
	SHRQ  $8, R9; \
	KMOVW R9, K4
