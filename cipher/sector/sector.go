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
package sector

import "errors"

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

// New returns the cipher for a dm-crypt specification such as
// "aes-xts-plain64", "aes-xts-plain", "aes-cbc-essiv:sha256" or
// "aes-cbc-plain64", with key. XTS takes 32 or 64 byte keys (AES-128/256),
// CBC 16, 24 or 32.
func New(spec string, key []byte) (Cipher, error) {
	panic("TODO: implemented by the sector work")
}
