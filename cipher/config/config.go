// Package config reads and writes twincrypt.conf, the per-volume JSON file
// that holds the cipher choice and the master key wrapped under a
// passphrase-derived key.
package config

import (
	"errors"

	"github.com/twincrypt/twincrypt/cipher/kdf"
)

// FileName is the config's name in the root of the lower directory.
const FileName = "twincrypt.conf"

// Version is the config format version this code writes.
const Version = 1

// Sentinel errors the CLI maps to exit codes.
var (
	ErrMissing            = errors.New("config: no twincrypt.conf in this directory")
	ErrCorrupt            = errors.New("config: corrupt or unreadable config")
	ErrWrongPassphrase    = errors.New("config: wrong passphrase")
	ErrUnknownCipher      = errors.New("config: unknown cipher")
	ErrUnsupportedVersion = errors.New("config: unsupported config version")
	ErrExists             = errors.New("config: a config already exists")
	ErrNotEmpty           = errors.New("config: directory is not empty")
)

// Config is the content of twincrypt.conf.
type Config struct {
	Creator        string     `json:"creator"`
	Version        int        `json:"version"`
	Cipher         string     `json:"cipher"`    // "aes-xts" or "aes-cbc"
	KeyBytes       int        `json:"key_bytes"` // xts: 32|64, cbc: 16|32
	PlaintextNames bool       `json:"plaintext_names"`
	KDF            kdf.Params `json:"kdf"`
	WrappedKey     []byte     `json:"wrapped_key"` // AES-256-GCM nonce||ct||tag of the master key
}

// Options choose what Create writes.
type Options struct {
	Cipher         string // default "aes-xts"
	KeyBytes       int    // default 64 for xts, 32 for cbc
	PlaintextNames bool
	KDF            kdf.Params // zero value: kdf.Default("argon2id")
	Creator        string
}

// Create refuses a non-empty dir (ErrNotEmpty) or an existing config
// (ErrExists), generates a random master key, wraps it under passphrase and
// writes the config with mode 0600. It returns the config and the master key.
func Create(dir string, passphrase []byte, opts Options) (*Config, []byte, error) { panic("TODO") }

// Load reads and validates dir's config without unlocking it.
func Load(dir string) (*Config, error) { panic("TODO") }

// Unlock returns the master key, or ErrWrongPassphrase.
func (c *Config) Unlock(passphrase []byte) ([]byte, error) { panic("TODO") }

// ContentSpec returns the sector cipher specification for file content,
// e.g. "aes-xts-plain64" or "aes-cbc-essiv:sha256".
func (c *Config) ContentSpec() string { panic("TODO") }
