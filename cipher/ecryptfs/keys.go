// Package ecryptfs reads the on-disk format of the Linux kernel's eCryptfs
// (fs/ecryptfs) without the kernel module: passphrase-derived keys and
// their signatures, the wrapped-passphrase file of ecryptfs-utils, file
// headers (in the file or in the user.ecryptfs xattr), CBC content
// extents and FNEK-encrypted file names. It only reads; FORMAT.md lists
// what it implements and what it refuses. The encrypting half
// (writer.go) exists to build test trees and mirrors the kernel's writer.
package ecryptfs

import (
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
)

// SaltSize is ECRYPTFS_SALT_SIZE: 8 bytes of salt for the passphrase KDF.
const SaltSize = 8

// SigSize is ECRYPTFS_SIG_SIZE: a key signature is 8 bytes, shown as 16
// hex digits (Private.sig, ecryptfs_sig=, ecryptfs_fnek_sig=).
const SigSize = 8

// FEKEKSize is ECRYPTFS_MAX_KEY_BYTES: the KDF keeps 64 bytes; a cipher
// uses its first key-size bytes.
const FEKEKSize = 64

// maxPassphrase is ECRYPTFS_MAX_PASSPHRASE_BYTES: ecryptfs-utils refuses
// longer passphrases, so no key in the wild comes from one.
const maxPassphrase = 64

// hashIterations is ECRYPTFS_DEFAULT_NUM_HASH_ITERATIONS: SHA-512 applied
// this many times in all (the first over salt||passphrase).
const hashIterations = 65536

// DefaultSalt is ECRYPTFS_DEFAULT_SALT (hex 0011223344556677, decoded):
// the salt of mount passphrases unless ~/.ecryptfsrc names another.
var DefaultSalt = []byte{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}

// FNEKSalt is the salt ecryptfs-utils uses for the filename key of
// encrypted homes (ecryptfs-add-passphrase --fnek, mount.ecryptfs_private).
// ECRYPTFS_DEFAULT_SALT_FNEK_HEX is "9988776655443322", but it is passed
// where raw salt bytes are expected, so the salt really used is the first
// eight ASCII characters "99887766", not the decoded hex.
var FNEKSalt = []byte("99887766")

// ErrWrongPassphrase: no key derived from the given passphrase(s) has the
// signature a header, a name or a wrapped-passphrase file asks for.
var ErrWrongPassphrase = errors.New("ecryptfs: wrong passphrase (no key with the signature the data asks for)")

// Key is a passphrase-derived key (an "auth tok" in the kernel's words):
// the 64-byte FEKEK and its signature.
type Key struct {
	FEKEK [FEKEKSize]byte
	Sig   [SigSize]byte
}

// SigHex is the signature as users see it (16 lower-case hex digits).
func (k *Key) SigHex() string { return hex.EncodeToString(k.Sig[:]) }

// DeriveKey computes the key ecryptfs-utils' generate_passphrase_sig makes
// from a passphrase and an 8-byte salt: H = SHA-512(salt || passphrase),
// then H = SHA-512(H) 65535 more times; the FEKEK is H, its signature the
// first 8 bytes of SHA-512(H).
func DeriveKey(passphrase string, salt []byte) (*Key, error) {
	if len(salt) != SaltSize {
		return nil, fmt.Errorf("ecryptfs: salt must be %d bytes, not %d", SaltSize, len(salt))
	}
	if len(passphrase) > maxPassphrase {
		return nil, fmt.Errorf("ecryptfs: passphrase longer than %d bytes", maxPassphrase)
	}
	buf := make([]byte, 0, SaltSize+len(passphrase))
	buf = append(append(buf, salt...), passphrase...)
	h := sha512.Sum512(buf)
	for i := 1; i < hashIterations; i++ {
		h = sha512.Sum512(h[:])
	}
	k := &Key{FEKEK: h}
	s := sha512.Sum512(h[:])
	copy(k.Sig[:], s[:SigSize])
	return k, nil
}

// Keyring holds the keys a reader may use, found by signature as the
// kernel finds auth toks in the user's keyring.
type Keyring struct {
	keys map[[SigSize]byte]*Key
}

// NewKeyring returns an empty keyring.
func NewKeyring() *Keyring { return &Keyring{keys: map[[SigSize]byte]*Key{}} }

// Add puts k in the keyring.
func (r *Keyring) Add(k *Key) { r.keys[k.Sig] = k }

// AddPassphrase derives the keys a passphrase can stand for — with each
// given salt, or with DefaultSalt and FNEKSalt when none is given — and
// adds them all: which one a file or name needs is told by its signature.
func (r *Keyring) AddPassphrase(passphrase string, salts ...[]byte) error {
	if len(salts) == 0 {
		salts = [][]byte{DefaultSalt, FNEKSalt}
	}
	for _, s := range salts {
		k, err := DeriveKey(passphrase, s)
		if err != nil {
			return err
		}
		r.Add(k)
	}
	return nil
}

// Lookup returns the key with signature sig, or nil.
func (r *Keyring) Lookup(sig [SigSize]byte) *Key { return r.keys[sig] }

// Sigs lists the signatures of the keys held (for messages).
func (r *Keyring) Sigs() []string {
	var out []string
	for s := range r.keys {
		out = append(out, hex.EncodeToString(s[:]))
	}
	return out
}
