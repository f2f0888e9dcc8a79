package luks

import (
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha3"
	"crypto/sha512"
	"fmt"
	"hash"

	//lint:ignore SA1019 LUKS1 headers and cryptsetup's plain mode still name ripemd160; reading them needs it
	"golang.org/x/crypto/ripemd160"
)

// hashes maps cryptsetup's hash names (the strings stored in LUKS headers and
// given to --hash) to constructors. It covers what the common crypto backends
// of cryptsetup offer except whirlpool, sm3 and stribog, which Go lacks.
var hashes = map[string]func() hash.Hash{
	"sha1":      sha1.New,
	"sha224":    sha256.New224,
	"sha256":    sha256.New,
	"sha384":    sha512.New384,
	"sha512":    sha512.New,
	"ripemd160": ripemd160.New,
	"sha3-224":  func() hash.Hash { return sha3.New224() },
	"sha3-256":  func() hash.Hash { return sha3.New256() },
	"sha3-384":  func() hash.Hash { return sha3.New384() },
	"sha3-512":  func() hash.Hash { return sha3.New512() },
}

// hashByName returns the constructor for a cryptsetup hash name; unknown names
// wrap ErrUnsupported.
func hashByName(name string) (func() hash.Hash, error) {
	h, ok := hashes[name]
	if !ok {
		return nil, fmt.Errorf("%w: hash %q", ErrUnsupported, name)
	}
	return h, nil
}

// pbkdf2Key is PBKDF2-HMAC (RFC 8018) with the named hash. It uses the
// standard library, which returns an error where golang.org/x/crypto/pbkdf2
// would panic: the parameters come from disk.
func pbkdf2Key(hashName string, password, salt []byte, iterations uint32, keyLen int) ([]byte, error) {
	h, err := hashByName(hashName)
	if err != nil {
		return nil, err
	}
	if iterations < 1 || keyLen < 1 {
		return nil, fmt.Errorf("%w: pbkdf2 with %d iterations for %d bytes", ErrCorruptHeader, iterations, keyLen)
	}
	return pbkdf2.Key(h, string(password), salt, int(iterations), keyLen)
}
