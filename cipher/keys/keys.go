// Package keys derives the purpose-specific keys from the master key and
// seals small secrets (symlink targets, xattr values) with AES-256-GCM.
package keys

import "errors"

// MasterKeySize is the length of the random master key in bytes.
const MasterKeySize = 64

// ErrOpen is returned when a sealed value does not authenticate.
var ErrOpen = errors.New("keys: sealed value does not authenticate")

// Derive returns length bytes for purpose (e.g. "content aes-xts", "names",
// "seal") derived from master with HKDF-SHA256; salt may be nil or a file id.
func Derive(master []byte, purpose string, salt []byte, length int) []byte { panic("TODO") }

// Sealer encrypts small values with AES-256-GCM and a random nonce.
type Sealer struct{}

// NewSealer returns a Sealer keyed from the master key.
func NewSealer(master []byte) *Sealer { panic("TODO") }

// Seal returns nonce||ciphertext||tag for plain, bound to ad.
func (s *Sealer) Seal(plain, ad []byte) []byte { panic("TODO") }

// Open reverses Seal; ErrOpen if the value was not sealed with this key and ad.
func (s *Sealer) Open(sealed, ad []byte) ([]byte, error) { panic("TODO") }

// Overhead is the number of bytes Seal adds.
const Overhead = 12 + 16

// Wipe overwrites b with zeros.
func Wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
