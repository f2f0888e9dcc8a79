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
	"hash"
	"sync"
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
	out := make([]byte, length)
	DeriveTo(out, master, purpose, salt)
	return out
}

// DeriveTo is Derive into out (len(out) bytes), without allocating: the
// daemon derives a key per file at the first I/O of every open.
func DeriveTo(out, master []byte, purpose string, salt []byte) {
	if len(out) == 0 || len(out) > maxDerive {
		panic("keys: Derive length out of range")
	}
	if len(master) == 0 {
		panic("keys: Derive with empty master key")
	}
	s := hkdfPool.Get().(*hkdfState)
	defer func() {
		s.wipe()
		hkdfPool.Put(s)
	}()
	// Extract (RFC 5869 section 2.2): PRK = HMAC(salt, master). A
	// missing salt is HashLen zeros, which pad to the same HMAC key as
	// no key at all.
	s.setKey(salt)
	s.inner.Write(master)
	prk := s.finish(s.prk[:0])
	// Expand (section 2.3): T(i) = HMAC(PRK, T(i-1) | info | i).
	s.setKey(prk)
	s.info = append(append(s.info[:0], InfoPrefix...), purpose...)
	var t []byte
	for i := byte(1); len(out) > 0; i++ {
		if i > 1 {
			s.restart()
		}
		s.inner.Write(t)
		s.inner.Write(s.info)
		s.ctr[0] = i
		s.inner.Write(s.ctr[:])
		t = s.finish(s.t[:0])
		out = out[copy(out, t):]
	}
}

// hkdfState is DeriveTo's HMAC-SHA256, kept in a pool: hmac.New and
// hkdf.New allocate two hashes, the padded keys and the output on every
// call, which cost the daemon more than the hashing itself.
type hkdfState struct {
	inner, outer hash.Hash
	ipad, opad   [sha256.BlockSize]byte
	prk, t, sum  [sha256.Size]byte
	ctr          [1]byte
	info         []byte
}

var hkdfPool = sync.Pool{New: func() any {
	return &hkdfState{inner: sha256.New(), outer: sha256.New()}
}}

// setKey starts an HMAC with key (RFC 2104: a key longer than the block
// is hashed first, a shorter one zero-padded).
func (s *hkdfState) setKey(key []byte) {
	if len(key) > sha256.BlockSize {
		s.outer.Reset()
		s.outer.Write(key)
		key = s.outer.Sum(s.sum[:0])
	}
	clear(s.ipad[:])
	copy(s.ipad[:], key)
	for i, b := range s.ipad {
		s.ipad[i] = b ^ 0x36
		s.opad[i] = b ^ 0x5c
	}
	s.restart()
}

// restart begins another message under the current key.
func (s *hkdfState) restart() {
	s.inner.Reset()
	s.inner.Write(s.ipad[:])
}

// finish appends the HMAC of the message written to dst.
func (s *hkdfState) finish(dst []byte) []byte {
	ih := s.inner.Sum(s.sum[:0])
	s.outer.Reset()
	s.outer.Write(s.opad[:])
	s.outer.Write(ih)
	return s.outer.Sum(dst)
}

// wipe clears every key-derived byte the state holds.
func (s *hkdfState) wipe() {
	s.inner.Reset()
	s.outer.Reset()
	clear(s.ipad[:])
	clear(s.opad[:])
	clear(s.prk[:])
	clear(s.t[:])
	clear(s.sum[:])
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
