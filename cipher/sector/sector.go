// Package sector implements length-preserving sector ciphers in the way
// dm-crypt names them ("aes-xts-plain64", "aes-cbc-essiv:sha256", ...).
//
// A Cipher encrypts one data unit (a disk sector, or one extent of a file)
// at a time; the unit number selects the tweak (XTS) or the IV (CBC). The same
// code serves twincrypt's per-file content encryption (cipher/content) and the
// userspace dm-crypt path, so both must stay byte-compatible with dm-crypt for
// lengths that are a multiple of 16. Lengths of 16 bytes or more that are not
// a multiple of 16 use ciphertext stealing (IEEE 1619 for XTS, CBC-CS2 for
// CBC); dm-crypt never produces those.
//
// # Supported specifications
//
//	aes-xts-plain64       IEEE Std 1619-2007 XTS-AES, tweak = LE64(unit) || 0^64
//	aes-xts-plain         as above, tweak = LE32(unit mod 2^32) || 0^96
//	aes-cbc-essiv:sha256  CBC, IV = AES-256_{SHA256(key)}(LE64(unit) || 0^64)
//	aes-cbc-plain64       CBC, IV = LE64(unit) || 0^64
//	aes-cbc-plain         CBC, IV = LE32(unit mod 2^32) || 0^96
//
// These are exactly dm-crypt's IV generators (drivers/md/dm-crypt.c:
// crypt_iv_plain_gen, crypt_iv_plain64_gen, and the essiv template). XTS keys
// are 32 or 64 bytes (XTS-AES-128 or XTS-AES-256); as in dm-crypt and IEEE
// 1619 section 5.1 the first half is the data key (Key1) and the second half
// the tweak key (Key2). CBC keys are 16, 24 or 32 bytes; ESSIV always uses
// AES-256 for the IV because SHA-256 yields 32 bytes, as dm-crypt does.
//
// The unit number is the value fed to the IV generator, nothing more. dm-crypt
// counts it in 512-byte sectors even when its sector_size is larger, unless the
// iv_large_sectors option is set; a caller emulating dm-crypt must pass the
// same number dm-crypt would.
//
// # Lengths
//
// A data unit must be at least 16 bytes (one AES block). When its length is a
// multiple of 16 the output is plain XTS / plain CBC and byte-identical to
// dm-crypt. Otherwise:
//
//   - XTS uses ciphertext stealing as specified in IEEE 1619-2007 sections
//     5.3.2 (encryption) and 5.4.2 (decryption).
//   - CBC uses CBC-CS2 from the NIST SP 800-38A Addendum (2010). Of the three
//     variants, CS1 and CS2 are plain CBC (and so dm-crypt) when the length is
//     a multiple of 16, which rules out CS3, which always swaps the last two
//     blocks. For other lengths CS2 equals CS3, the layout deployed by
//     Kerberos (RFC 3962, whose vectors therefore apply): the last two
//     ciphertext blocks swapped, so that the truncated one comes last (CS1
//     would leave it second to last).
//
// IEEE 1619 limits an XTS data unit to 2^20 AES blocks (16 MiB); this package
// does not enforce that but callers should stay below it.
//
// # Concurrency and allocation
//
// A Cipher is immutable after New and safe for concurrent use. Encrypt,
// Decrypt and the MultiCipher methods do not allocate: the key schedules are
// expanded once in New, the XTS tweak is kept in two uint64 halves, the one
// 16-byte scratch buffer the block cipher interface needs (to encrypt the
// tweak or the ESSIV IV) is the first block of dst, saved and restored around
// the use, and the assembly keeps its scratch on the stack.
//
// Like crypto/cipher's modes, Encrypt and Decrypt use dst as working space:
// while a call runs, dst holds intermediate values (P xor T for XTS, the
// encrypted tweak or ESSIV IV in its first block). Only the final contents are
// defined, so dst should not be memory that others read concurrently, such as
// a MAP_SHARED mapping of the ciphertext file.
//
// # Speed
//
// On amd64 CPUs with AES-NI and AVX the bulk of the work is done by assembly
// that keeps 8 blocks in flight (16, four per instruction, with AVX-512 VAES);
// elsewhere by portable Go around crypto/aes. Both produce the same bytes; the
// choice is made once, at start-up (Implementation names it). The AES-NI XTS
// code computes the tweaks on the integer units, ahead of the blocks that
// need them, and takes a whole run of units (EncryptSectors, or one unit that
// is a multiple of 128 bytes) in one call, tweak encryption included. CBC
// encryption is serial within a unit, so a single CBC Encrypt runs at the
// latency of AES; MultiCipher's EncryptSectors encrypts several units side
// by side to get past that. The build tag purego forces the portable code;
// at run time GODEBUG=cpu.avx512f=off forces the AES-NI path (the one CPUs
// without AVX-512 run) and GODEBUG=cpu.aes=off the portable code.
package sector

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrKeySize is returned for a key whose length the mode does not accept.
var ErrKeySize = errors.New("sector: invalid key size")

// ErrUnsupported is returned by New for a cipher specification it does not know.
var ErrUnsupported = errors.New("sector: unsupported cipher specification")

// Cipher encrypts and decrypts data units in place or from src to dst.
// len(src) must be >= 16 and len(dst) >= len(src); dst and src may be the
// same slice but must not otherwise overlap. Safe for concurrent use.
type Cipher interface {
	// Encrypt encrypts src into dst as data unit number unit.
	Encrypt(dst, src []byte, unit uint64)
	// Decrypt decrypts src into dst as data unit number unit.
	Decrypt(dst, src []byte, unit uint64)
	// Spec returns the dm-crypt style name, e.g. "aes-xts-plain64".
	Spec() string
	// KeySize returns the key length in bytes.
	KeySize() int
}

// MultiCipher is implemented by the ciphers New returns: it encrypts or
// decrypts a run of consecutive data units of one size in one call, which
// lets an implementation work on several units at once (CBC encryption, being
// serial within a unit, is several times faster that way).
//
// EncryptSectors(dst, src, sectorSize, firstUnit) is equivalent to calling
// Encrypt(dst[i*sectorSize:(i+1)*sectorSize], src[i*sectorSize:(i+1)*sectorSize],
// firstUnit+uint64(i)) for every i, and DecryptSectors likewise; the unit
// number wraps around at 2^64. sectorSize must be at least 16 (units that
// are not a multiple of 16 use ciphertext stealing, as with Encrypt), len(src)
// a multiple of sectorSize (zero is allowed) and len(dst) >= len(src); dst and
// src may be the same slice but must not otherwise overlap. Violations panic.
//
// The unit numbers of consecutive sectors differ by one. A caller emulating
// dm-crypt with sectors larger than 512 bytes and without iv_large_sectors
// (where the IV counts 512-byte sectors) must call Encrypt per sector.
type MultiCipher interface {
	Cipher
	// EncryptSectors encrypts len(src)/sectorSize consecutive units.
	EncryptSectors(dst, src []byte, sectorSize int, firstUnit uint64)
	// DecryptSectors decrypts len(src)/sectorSize consecutive units.
	DecryptSectors(dst, src []byte, sectorSize int, firstUnit uint64)
}

var (
	_ MultiCipher = (*xtsCipher)(nil)
	_ MultiCipher = (*cbcCipher)(nil)
)

// maxLanes is the most units the assembly CBC encryption handles side by
// side.
const maxLanes = 16

// blockSize is the AES block size. Every mode here works on 16-byte blocks.
const blockSize = 16

// ivMode selects how the unit number becomes the XTS tweak or the CBC IV.
type ivMode uint8

const (
	ivPlain   ivMode = iota // LE32(unit mod 2^32), zero padded (dm-crypt "plain")
	ivPlain64               // LE64(unit), zero padded (dm-crypt "plain64")
	ivESSIV                 // AES-256 under SHA-256(key) of the plain64 block
)

// New returns the cipher for a dm-crypt specification such as
// "aes-xts-plain64", "aes-xts-plain", "aes-cbc-essiv:sha256" or
// "aes-cbc-plain64", with key. XTS takes 32 or 64 byte keys (AES-128/256),
// CBC 16, 24 or 32.
//
// Errors wrap ErrUnsupported or ErrKeySize (test with errors.Is). New does not
// keep a reference to key.
//
// Every cipher New returns also implements MultiCipher.
func New(spec string, key []byte) (Cipher, error) {
	return newCipher(spec, key, bestImpl)
}

// newCipher is New with the implementation chosen by the caller (the tests
// run every impl the CPU supports).
func newCipher(spec string, key []byte, im impl) (Cipher, error) {
	switch spec {
	case "aes-xts-plain64":
		return newXTS(spec, key, ivPlain64, im)
	case "aes-xts-plain":
		return newXTS(spec, key, ivPlain, im)
	case "aes-cbc-essiv:sha256":
		return newCBC(spec, key, ivESSIV, im)
	case "aes-cbc-plain64":
		return newCBC(spec, key, ivPlain64, im)
	case "aes-cbc-plain":
		return newCBC(spec, key, ivPlain, im)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnsupported, spec)
}

// ivWords returns the unencrypted IV / tweak block for unit as its two
// little-endian 64-bit halves. Only the low half can be non-zero: dm-crypt's
// plain and plain64 generators zero-pad a 32- or 64-bit sector number.
func ivWords(mode ivMode, unit uint64) (lo, hi uint64) {
	if mode == ivPlain {
		return unit & 0xffffffff, 0
	}
	return unit, 0
}

// checkLengths enforces the Cipher contract and returns len(src). Violations
// are programmer errors (a caller passing a wrong buffer), not data errors, so
// they panic, as crypto/cipher does.
func checkLengths(op string, dst, src []byte) int {
	n := len(src)
	if n < blockSize {
		panic(fmt.Sprintf("sector: %s: data unit of %d bytes is shorter than one 16-byte block", op, n))
	}
	if len(dst) < n {
		panic(fmt.Sprintf("sector: %s: dst (%d bytes) is shorter than src (%d bytes)", op, len(dst), n))
	}
	if inexactOverlap(dst[:n], src) {
		panic("sector: " + op + ": dst and src overlap but are not the same slice")
	}
	return n
}

// checkSectors enforces the MultiCipher contract and returns len(src).
func checkSectors(op string, dst, src []byte, sectorSize int) int {
	n := len(src)
	if sectorSize < blockSize {
		panic(fmt.Sprintf("sector: %s: sector size %d is shorter than one 16-byte block", op, sectorSize))
	}
	if n%sectorSize != 0 {
		panic(fmt.Sprintf("sector: %s: %d bytes are not a whole number of %d-byte sectors", op, n, sectorSize))
	}
	if len(dst) < n {
		panic(fmt.Sprintf("sector: %s: dst (%d bytes) is shorter than src (%d bytes)", op, len(dst), n))
	}
	if inexactOverlap(dst[:n], src) {
		panic("sector: " + op + ": dst and src overlap but are not the same slice")
	}
	return n
}

// inexactOverlap reports whether x and y share memory at different offsets
// (the same check as crypto/internal/alias). Writing block i of dst would then
// destroy a block of src not yet read. It only compares addresses.
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs := uintptr(unsafe.Pointer(&x[0]))
	ys := uintptr(unsafe.Pointer(&y[0]))
	return xs <= ys+uintptr(len(y)-1) && ys <= xs+uintptr(len(x)-1)
}
