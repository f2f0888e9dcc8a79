// Package kdf derives key-encryption keys from passphrases with argon2id,
// scrypt or PBKDF2, with parameters that are stored in the config file.
package kdf

import "errors"

// ErrParams is returned for parameters that are unknown, malformed or so
// costly that honouring them would be a denial of service.
var ErrParams = errors.New("kdf: invalid parameters")

// Params is the JSON-serialised description of one derivation. Only the
// fields of the chosen algorithm are set.
type Params struct {
	Algorithm string `json:"algorithm"` // "argon2id", "scrypt" or "pbkdf2"
	Salt      []byte `json:"salt"`      // random, 32 bytes at creation
	// argon2id
	Time      uint32 `json:"time,omitempty"`       // passes
	MemoryKiB uint32 `json:"memory_kib,omitempty"` // memory in KiB
	Threads   uint8  `json:"threads,omitempty"`
	// scrypt
	LogN int `json:"log_n,omitempty"` // N = 1<<LogN
	R    int `json:"r,omitempty"`
	P    int `json:"p,omitempty"`
	// pbkdf2
	Iterations int    `json:"iterations,omitempty"`
	Hash       string `json:"hash,omitempty"` // "sha256" or "sha512"
}

// Default returns sane default parameters for algorithm with a fresh random salt.
func Default(algorithm string) (Params, error) { panic("TODO") }

// Validate checks the parameters without deriving anything.
func (p Params) Validate() error { panic("TODO") }

// Derive returns keyLen bytes derived from passphrase.
func (p Params) Derive(passphrase []byte, keyLen int) ([]byte, error) { panic("TODO") }
