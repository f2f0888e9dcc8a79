package luks

import (
	"fmt"
	"math"

	"golang.org/x/crypto/argon2"
)

// kdf is a keyslot's passphrase-based key derivation as LUKS2 stores it in
// the keyslot's "kdf" object (LUKS1 keyslots are always pbkdf2).
type kdf struct {
	typ        string // "pbkdf2", "argon2i" or "argon2id"
	hash       string // pbkdf2 only
	iterations uint32 // pbkdf2 iterations, or argon2 passes ("time")
	memoryKiB  uint32 // argon2 only
	threads    uint32 // argon2 only ("cpus")
	salt       []byte
}

// limits bound the cost a header may ask of Open. Exceeding one makes the
// header copy corrupt. The defaults are cryptsetup's own hard limits
// (lib/utils_pbkdf.c crypt_pbkdf_get_limits): no header cryptsetup can write
// is refused. Tests and fuzzing use tighter ones.
type limits struct {
	maxPBKDF2Iterations uint32
	maxArgon2Time       uint32
	maxArgon2MemoryKiB  uint32
}

var defaultLimits = limits{
	maxPBKDF2Iterations: math.MaxUint32,
	maxArgon2Time:       math.MaxUint32,
	maxArgon2MemoryKiB:  4 << 20, // 4 GiB, cryptsetup's maximum
}

// saltSize is the keyslot salt length: 32 bytes in LUKS1 and LUKS2
// (cryptsetup refuses other lengths).
const saltSize = 32

// check validates the parameters against lim before anything is allocated.
// Errors wrap ErrCorruptHeader, or ErrUnsupported for a well-formed
// derivation this package cannot compute.
func (k *kdf) check(lim limits) error {
	if len(k.salt) != saltSize {
		return fmt.Errorf("%w: kdf salt of %d bytes", ErrCorruptHeader, len(k.salt))
	}
	switch k.typ {
	case "pbkdf2":
		if _, err := hashByName(k.hash); err != nil {
			return err
		}
		if k.iterations < 1 || k.iterations > lim.maxPBKDF2Iterations {
			return fmt.Errorf("%w: pbkdf2 iterations %d", ErrCorruptHeader, k.iterations)
		}
	case "argon2i", "argon2id":
		if k.iterations < 1 || k.iterations > lim.maxArgon2Time {
			return fmt.Errorf("%w: argon2 time %d", ErrCorruptHeader, k.iterations)
		}
		if k.threads < 1 {
			return fmt.Errorf("%w: argon2 cpus %d", ErrCorruptHeader, k.threads)
		}
		if k.threads > math.MaxUint8 {
			// RFC 9106 allows 2^24-1 lanes; x/crypto/argon2 takes a uint8.
			return fmt.Errorf("%w: argon2 with %d lanes", ErrUnsupported, k.threads)
		}
		// libargon2 refuses less than 8 KiB per lane; x/crypto/argon2
		// would silently round up instead and derive a different key.
		if k.memoryKiB < 8*k.threads || k.memoryKiB > lim.maxArgon2MemoryKiB {
			return fmt.Errorf("%w: argon2 memory %d KiB for %d cpus", ErrCorruptHeader, k.memoryKiB, k.threads)
		}
	default:
		return fmt.Errorf("%w: kdf %q", ErrUnsupported, k.typ)
	}
	return nil
}

// derive runs the KDF over passphrase for keyLen bytes. check must have
// passed.
func (k *kdf) derive(passphrase []byte, keyLen int) ([]byte, error) {
	switch k.typ {
	case "pbkdf2":
		return pbkdf2Key(k.hash, passphrase, k.salt, k.iterations, keyLen)
	case "argon2i":
		// Argon2 version 0x13, as libargon2 in cryptsetup.
		return argon2.Key(passphrase, k.salt, k.iterations, k.memoryKiB, uint8(k.threads), uint32(keyLen)), nil
	case "argon2id":
		return argon2.IDKey(passphrase, k.salt, k.iterations, k.memoryKiB, uint8(k.threads), uint32(keyLen)), nil
	}
	return nil, fmt.Errorf("%w: kdf %q", ErrUnsupported, k.typ)
}
