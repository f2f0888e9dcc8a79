// Package keys derives the purpose-specific keys from the master key and
// seals small secrets (symlink targets, xattr values) with AES-256-GCM.
//
// Key separation. The 64-byte master key is never used directly by a
// cipher. Every use gets its own key from HKDF-SHA256 (RFC 5869) with the
// info string "twincrypt v1 " + purpose, so a weakness or a misuse in one
// construction (say, the name cipher) cannot leak the key of another
// (content, sealing). The "v1" ties the derivation to this format: a later
// format that changes a construction changes the label rather than reusing
// a key in a new way. The master key is uniformly random, so HKDF's extract
// step needs no salt; the salt argument exists for per-file keys, where a
// file id as salt gives each file an independent key.
//
// Sealing. Sealer uses AES-256-GCM with a 96-bit random nonce per Seal.
// Random nonces are safe for up to about 2^32 seals under one key (NIST SP
// 800-38D section 8.3); symlink targets and xattr values of one volume stay
// many orders of magnitude below that. A sealed value is bound to exactly
// the caller's additional data and to nothing else. Format version 1 passes
// "xattr "+name for an xattr value, "symlink" for a target sealed into a
// link and "symlink "+marker for a long link's sidecar: a value cannot be
// moved to another attribute name, nor between a link and an attribute,
// unnoticed; but no file id is in it, so whoever can write LOWER can copy
// (swap, replay) a sealed value between files of the same volume, and it
// opens there (cipher/FORMAT.md section 5).
package keys

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"

	"golang.org/x/crypto/hkdf"
)

// MasterKeySize is the length of the random master key in bytes.
const MasterKeySize = 64

// ErrOpen is returned when a sealed value does not authenticate.
var ErrOpen = errors.New("keys: sealed value does not authenticate")

// InfoPrefix starts the HKDF info string of every derived key.
const InfoPrefix = "twincrypt v1 "

// Purposes used inside this module. They are part of the on-disk format:
// changing one changes every key derived for it.
const (
	PurposeSeal = "seal"
)

// SealKeySize is the AES-256 key length used by Sealer.
const SealKeySize = 32

// maxDerive is HKDF-SHA256's output limit, 255 hash lengths.
const maxDerive = 255 * sha256.Size

// Derive returns length bytes for purpose (e.g. "content aes-xts", "names",
// "seal") derived from master with HKDF-SHA256; salt may be nil or a file id.
//
// Derive panics if length is not in [1, 8160] or master is empty: both are
// programming errors, not conditions of the data.
func Derive(master []byte, purpose string, salt []byte, length int) []byte {
	if length <= 0 || length > maxDerive {
		panic("keys: Derive length out of range")
	}
	if len(master) == 0 {
		panic("keys: Derive with empty master key")
	}
	out := make([]byte, length)
	r := hkdf.New(sha256.New, master, salt, []byte(InfoPrefix+purpose))
	if _, err := io.ReadFull(r, out); err != nil {
		// Unreachable: the length is within HKDF's limit.
		panic("keys: hkdf: " + err.Error())
	}
	return out
}

// Sealer encrypts small values with AES-256-GCM and a random nonce.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer returns a Sealer keyed from the master key.
func NewSealer(master []byte) *Sealer {
	key := Derive(master, PurposeSeal, nil, SealKeySize)
	defer Wipe(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		panic("keys: " + err.Error()) // unreachable: 32-byte key
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic("keys: " + err.Error()) // unreachable: standard GCM
	}
	return &Sealer{aead: aead}
}

// Seal returns nonce||ciphertext||tag for plain, bound to ad.
func (s *Sealer) Seal(plain, ad []byte) []byte {
	n := s.aead.NonceSize()
	out := make([]byte, n, n+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		// crypto/rand does not fail on supported platforms; sealing
		// with a predictable nonce would be far worse than stopping.
		panic("keys: reading random nonce: " + err.Error())
	}
	return s.aead.Seal(out, out, plain, ad)
}

// Open reverses Seal; ErrOpen if the value was not sealed with this key and ad.
func (s *Sealer) Open(sealed, ad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n+s.aead.Overhead() {
		return nil, ErrOpen
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], ad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// Overhead is the number of bytes Seal adds.
const Overhead = 12 + 16

// Wipe overwrites b with zeros.
//
// Go gives no guarantee that no other copy of a key exists (the runtime
// copies growing stacks, crypto/aes keeps its own expanded key); Wipe only
// shortens the time the copies we hold lie around in memory.
func Wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
