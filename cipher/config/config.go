// Package config reads and writes twincrypt.conf, the per-volume JSON file
// that holds the cipher choice and the master key wrapped under a
// passphrase-derived key.
//
// Format. twincrypt.conf is pretty-printed JSON (see Config) so that a user
// can read what protects a volume. The master key is 64 random bytes. It is
// wrapped as AES-256-GCM(KEK, random 96-bit nonce), stored as
// nonce||ciphertext||tag (92 bytes, base64 in JSON), where KEK is 32 bytes
// from the KDF described by the "kdf" object.
//
// What the passphrase protects, and what it does not. Without the
// passphrase the file reveals only the cipher choice and the KDF costs. The
// file is not signed, but every field that changes how the master key is
// used (version, cipher, key_bytes, plaintext_names) is bound to the wrapped
// key as GCM additional data: someone who edits, say, "aes-xts" into
// "aes-cbc" to have the volume read or written with a weaker mode gets
// ErrWrongPassphrase at unlock instead of a silently reinterpreted volume.
// The KDF parameters need no binding: changed parameters give a different
// KEK, which fails to unwrap just the same. Only "creator" is free text and
// unauthenticated.
//
// What the master key protects. Recovery (mount, passwd and init with the
// master key instead of the passphrase) cannot open the wrapped key, so
// the additional data above vouches for nothing there. Version 3 adds
// "sealed_settings": the settings above and the KDF, sealed with
// AES-256-GCM under a key derived from the master key (CheckSealed). A
// LOWER writer who sets plaintext_names or a one-iteration KDF in the
// config is then caught by recovery too, which says what was changed.
// Versions 1 and 2 have no seal; the CLI checks their settings against the
// data instead.
//
// Robustness. Load runs before anything is authenticated, on a file that
// anyone with write access to the lower directory can replace, so it reads
// at most MaxFileSize bytes, refuses anything but a regular file (a FIFO
// would block, a device would never end), parses strictly, and validates
// the KDF costs before Unlock can spend them. Writes are atomic: a
// temporary file in the same directory is written, fsynced and renamed into
// place, and the directory is fsynced, so a crash leaves either the old or
// the new config, never a torn one.
package config

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/lowerfd"
)

// FileName is the config's name in the root of the lower directory.
const FileName = "twincrypt.conf"

// Version is the newest config format version this code reads and
// writes. Version 2 differs from version 1 in one thing: "aes-cbc" content
// is CBC over each 512-byte sector of an extent instead of over the whole
// 4096-byte extent (FORMAT.md §3.2). Version 3 is version 2 plus the
// sealed_settings field. New volumes get version 3; Rewrap raises a
// version 1 aes-xts or version 2 config to 3 (their content is the same);
// a version 1 aes-cbc volume keeps version 1, whose extent-long CBC no
// later version describes.
const Version = 3

// SealedVersion is the first version with sealed_settings.
const SealedVersion = 3

// MinVersion is the oldest config format version this code reads.
const MinVersion = 1

// BackupName holds the previous config while Save replaces it.
const BackupName = FileName + ".bak"

// tempPrefix starts the names of the temporary files of atomic writes
// ("twincrypt.conf.tmp-<random>"); the filesystem layer hides them.
const tempPrefix = FileName + ".tmp-"

// MaxFileSize is the largest config Load reads. A real one is under 1 KiB.
const MaxFileSize = 64 << 10

// kekSize is the length of the key-encryption key (AES-256).
const kekSize = 32

// wrappedSize is the length of WrappedKey: nonce, master key, GCM tag.
const wrappedSize = 12 + keys.MasterKeySize + 16

// settingsPurpose names the HKDF subkey of the master key that seals the
// settings (FORMAT.md §2); maxSealedSize bounds sealed_settings, nonce (12)
// and tag (16) included, far above a real one (about 250 bytes).
const (
	settingsPurpose = "config settings"
	maxSealedSize   = 4096
)

// Sentinel errors the CLI maps to exit codes.
var (
	ErrMissing            = errors.New("config: no twincrypt.conf in this directory")
	ErrCorrupt            = errors.New("config: corrupt or unreadable config")
	ErrWrongPassphrase    = errors.New("config: wrong passphrase")
	ErrUnknownCipher      = errors.New("config: unknown cipher")
	ErrUnsupportedVersion = errors.New("config: unsupported config version")
	ErrExists             = errors.New("config: a config already exists")
	ErrNotEmpty           = errors.New("config: directory is not empty")
	// ErrEmptyPassphrase is returned by Create and Rewrap for an empty
	// passphrase.
	ErrEmptyPassphrase = errors.New("config: empty passphrase")
	// ErrKeyBytes is returned for a key size the cipher does not take.
	ErrKeyBytes = errors.New("config: invalid key size for cipher")
	// ErrAltered: the config's settings differ from the sealed ones, or
	// the seal does not open under a master key the data confirmed.
	ErrAltered = errors.New("config: the config was altered")
	// ErrUnsealed: the config is of a version without sealed settings.
	ErrUnsealed = errors.New("config: no sealed settings (config version 1 or 2)")
	// ErrSealKey: the seal does not open under the given master key, which
	// is wrong or whose config was altered; the caller tells which from
	// the data.
	ErrSealKey = errors.New("config: the sealed settings do not open under this master key")
)

// cipherInfo describes one content cipher a config may name.
type cipherInfo struct {
	keyBytes []int // allowed values of key_bytes
	def      int   // default key_bytes
	spec     string
	spec1    string // the content spec in a version 1 config, if not spec
}

// ciphers are the content ciphers a config may name. XTS takes two AES
// keys, hence 32 (AES-128) or 64 (AES-256) bytes; CBC-ESSIV one.
var ciphers = map[string]cipherInfo{
	"aes-xts": {keyBytes: []int{32, 64}, def: 64, spec: content.SpecXTS},
	"aes-cbc": {keyBytes: []int{16, 32}, def: 32, spec: content.SpecCBC512, spec1: content.SpecCBC},
}

// Config is the content of twincrypt.conf.
type Config struct {
	Creator        string     `json:"creator"`
	Version        int        `json:"version"`
	Cipher         string     `json:"cipher"`    // "aes-xts" or "aes-cbc"
	KeyBytes       int        `json:"key_bytes"` // xts: 32|64, cbc: 16|32
	PlaintextNames bool       `json:"plaintext_names"`
	KDF            kdf.Params `json:"kdf"`
	WrappedKey     []byte     `json:"wrapped_key"` // AES-256-GCM nonce||ct||tag of the master key
	// SealedSettings (version 3) is nonce||AES-256-GCM(settings)||tag
	// under the master key's "config settings" subkey; see CheckSealed.
	SealedSettings []byte `json:"sealed_settings,omitempty"`
}

// Options choose what Create writes.
type Options struct {
	// Version is the config format version to write: 0 means the
	// newest (3). Recreate needs 1 for an aes-cbc volume that an earlier
	// twincrypt made, whose files use extent-long CBC.
	Version        int
	Cipher         string // default "aes-xts"
	KeyBytes       int    // default 64 for xts, 32 for cbc
	PlaintextNames bool
	KDF            kdf.Params // zero value: kdf.Default("argon2id")
	Creator        string
}

// IsReserved reports whether name, in the root of the lower directory,
// belongs to the config machinery: the config, its backup, or a temporary
// file an interrupted write left behind. The filesystem layer must neither
// show nor let users create such names (this matters with plaintext names).
func IsReserved(name string) bool {
	return name == FileName || name == BackupName || strings.HasPrefix(name, tempPrefix)
}

// Create refuses a non-empty dir (ErrNotEmpty) or an existing config
// (ErrExists), generates a random master key, wraps it under passphrase and
// writes the config with mode 0600. It returns the config and the master key.
func Create(dir string, passphrase []byte, opts Options) (*Config, []byte, error) {
	if len(passphrase) == 0 {
		return nil, nil, ErrEmptyPassphrase
	}
	if err := checkEmpty(dir); err != nil {
		return nil, nil, err
	}
	master := make([]byte, keys.MasterKeySize)
	if _, err := rand.Read(master); err != nil {
		return nil, nil, fmt.Errorf("config: reading random master key: %w", err)
	}
	c, err := createWithKey(dir, passphrase, master, opts)
	if err != nil {
		keys.Wipe(master)
		return nil, nil, err
	}
	return c, master, nil
}

// Recreate writes a new config for an existing volume whose config is
// lost, wrapping the given master key (the one init printed) under
// passphrase. Unlike Create it accepts a directory that holds files; it
// still refuses to replace a config (ErrExists). It cannot tell whether
// master is the volume's key: the caller checks that against the data
// first (fsck.VerifyKey).
func Recreate(dir string, passphrase, master []byte, opts Options) (*Config, error) {
	if len(passphrase) == 0 {
		return nil, ErrEmptyPassphrase
	}
	if len(master) != keys.MasterKeySize {
		return nil, fmt.Errorf("config: master key must be %d bytes, got %d", keys.MasterKeySize, len(master))
	}
	return createWithKey(dir, passphrase, master, opts)
}

// createWithKey wraps master under passphrase with the settings of opts and
// writes the config, refusing to replace one.
func createWithKey(dir string, passphrase, master []byte, opts Options) (*Config, error) {
	c := &Config{
		Creator:        opts.Creator,
		Version:        opts.Version,
		Cipher:         opts.Cipher,
		KeyBytes:       opts.KeyBytes,
		PlaintextNames: opts.PlaintextNames,
	}
	if c.Creator == "" {
		c.Creator = "twincrypt"
	}
	if c.Version == 0 {
		c.Version = Version
	}
	if err := checkVersion(c.Version); err != nil {
		return nil, err
	}
	if c.Cipher == "" {
		c.Cipher = "aes-xts"
	}
	if info, ok := ciphers[c.Cipher]; ok && c.KeyBytes == 0 {
		c.KeyBytes = info.def
	}
	if err := c.checkCipher(); err != nil {
		return nil, err
	}
	p, err := completeKDF(opts.KDF)
	if err != nil {
		return nil, err
	}
	c.KDF = p
	if err := c.wrap(passphrase, master); err != nil {
		return nil, err
	}
	if err := c.seal(master); err != nil {
		return nil, err
	}
	data, err := c.marshal()
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(dir, FileName, data, true); err != nil {
		return nil, err
	}
	return c, nil
}

// checkEmpty returns ErrExists if dir has a config (checked first, so that
// re-running init on a volume says what happened), ErrNotEmpty if it has
// anything else. Only one entry is read, however large the directory.
func checkEmpty(dir string) error {
	path := filepath.Join(dir, FileName)
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("config: %w", err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("%w: %s contains %q", ErrNotEmpty, dir, names[0])
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// completeKDF fills in defaults: the zero value means kdf.Default
// ("argon2id"), and a missing salt gets a fresh random one.
func completeKDF(p kdf.Params) (kdf.Params, error) {
	if isZeroParams(p) {
		return kdf.Default(kdf.Argon2id)
	}
	if len(p.Salt) == 0 {
		salt, err := kdf.NewSalt()
		if err != nil {
			return kdf.Params{}, err
		}
		p.Salt = salt
	} else {
		p.Salt = bytes.Clone(p.Salt)
	}
	if err := p.Validate(); err != nil {
		return kdf.Params{}, err
	}
	return p, nil
}

func isZeroParams(p kdf.Params) bool {
	return p.Algorithm == "" && len(p.Salt) == 0 && p.Time == 0 && p.MemoryKiB == 0 &&
		p.Threads == 0 && p.LogN == 0 && p.R == 0 && p.P == 0 && p.Iterations == 0 && p.Hash == ""
}

// checkCipher returns ErrUnknownCipher or ErrKeyBytes.
func (c *Config) checkCipher() error {
	info, ok := ciphers[c.Cipher]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownCipher, c.Cipher)
	}
	for _, n := range info.keyBytes {
		if c.KeyBytes == n {
			return nil
		}
	}
	return fmt.Errorf("%w: %s takes key_bytes %v, not %d", ErrKeyBytes, c.Cipher, info.keyBytes, c.KeyBytes)
}

// validate checks everything Load checks after parsing.
func (c *Config) validate() error {
	if err := checkVersion(c.Version); err != nil {
		return err
	}
	if err := c.checkCipher(); err != nil {
		if errors.Is(err, ErrKeyBytes) {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return err
	}
	if err := c.KDF.Validate(); err != nil {
		return fmt.Errorf("%w: kdf: %w", ErrCorrupt, err)
	}
	if len(c.WrappedKey) != wrappedSize {
		return fmt.Errorf("%w: wrapped_key is %d bytes, want %d", ErrCorrupt, len(c.WrappedKey), wrappedSize)
	}
	switch n := len(c.SealedSettings); {
	case c.Version < SealedVersion && c.SealedSettings != nil:
		return fmt.Errorf("%w: sealed_settings in a version %d config (it came with version %d)", ErrCorrupt, c.Version, SealedVersion)
	case c.Version >= SealedVersion && (n < 12+16 || n > maxSealedSize):
		return fmt.Errorf("%w: sealed_settings is %d bytes", ErrCorrupt, n)
	}
	return nil
}

// upgradeVersion is the version Rewrap gives c: the newest, unless c is a
// version 1 aes-cbc config, whose extent-long CBC only version 1 describes.
func (c *Config) upgradeVersion() int {
	if c.Version == 1 && ciphers[c.Cipher].spec1 != "" {
		return 1
	}
	return Version
}

// checkVersion returns ErrUnsupportedVersion for a version this code
// neither reads nor writes.
func checkVersion(v int) error {
	if v < MinVersion || v > Version {
		return fmt.Errorf("%w: %d (this twincrypt reads versions %d to %d)", ErrUnsupportedVersion, v, MinVersion, Version)
	}
	return nil
}

// additionalData is the GCM additional data of the wrapped key. It binds
// every field that decides how the master key is used, so that a tampered
// field makes Unlock fail instead of being used silently. The cipher name
// is validated (a fixed ASCII set) before this is built, so the encoding is
// unambiguous.
func (c *Config) additionalData() []byte {
	return fmt.Appendf(nil, "twincrypt.conf\x00version=%d\x00cipher=%s\x00key_bytes=%d\x00plaintext_names=%t",
		c.Version, c.Cipher, c.KeyBytes, c.PlaintextNames)
}

func newGCM(kek []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealedSettings is what sealed_settings holds: every field but creator
// and the wrapped key, as JSON.
type sealedSettings struct {
	Version        int        `json:"version"`
	Cipher         string     `json:"cipher"`
	KeyBytes       int        `json:"key_bytes"`
	PlaintextNames bool       `json:"plaintext_names"`
	KDF            kdf.Params `json:"kdf"`
}

func (c *Config) settings() sealedSettings {
	return sealedSettings{c.Version, c.Cipher, c.KeyBytes, c.PlaintextNames, c.KDF}
}

// settingsAD is the GCM additional data of sealed_settings.
var settingsAD = []byte("twincrypt.conf sealed_settings")

func settingsAEAD(master []byte) (cipher.AEAD, error) {
	key := keys.Derive(master, settingsPurpose, nil, kekSize)
	defer keys.Wipe(key)
	return newGCM(key)
}

// seal sets c.SealedSettings from c's fields (version 3 and later).
func (c *Config) seal(master []byte) error {
	if c.Version < SealedVersion {
		c.SealedSettings = nil
		return nil
	}
	plain, err := json.Marshal(c.settings())
	if err != nil {
		return err
	}
	aead, err := settingsAEAD(master)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("config: reading random nonce: %w", err)
	}
	c.SealedSettings = aead.Seal(nonce, nonce, plain, settingsAD)
	return nil
}

// CheckSealed compares c's settings with the sealed ones, for recovery
// with master, which cannot open the wrapped key. It returns ErrUnsealed
// for a version 1 or 2 config; ErrSealKey when the seal does not open (a
// wrong master key, or an altered seal: the data can tell); ErrAltered,
// with a message that names every changed field, when the seal opens and
// the config says otherwise; nil when they agree.
func (c *Config) CheckSealed(master []byte) error {
	if c.Version < SealedVersion {
		return fmt.Errorf("%w: this one is version %d", ErrUnsealed, c.Version)
	}
	aead, err := settingsAEAD(master)
	if err != nil {
		return err
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, c.SealedSettings[:n], c.SealedSettings[n:], settingsAD)
	if err != nil {
		return ErrSealKey
	}
	var s sealedSettings
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// Sealed by someone with the master key: not an attacker's doing.
		return fmt.Errorf("%w: sealed_settings: %w", ErrCorrupt, err)
	}
	var diffs []string
	differ := func(field string, cfg, sealed any) {
		diffs = append(diffs, fmt.Sprintf("config says %s=%v but the sealed settings say %v", field, cfg, sealed))
	}
	cur := c.settings()
	if cur.Version != s.Version {
		differ("version", cur.Version, s.Version)
	}
	if cur.Cipher != s.Cipher {
		differ("cipher", cur.Cipher, s.Cipher)
	}
	if cur.KeyBytes != s.KeyBytes {
		differ("key_bytes", cur.KeyBytes, s.KeyBytes)
	}
	if cur.PlaintextNames != s.PlaintextNames {
		differ("plaintext_names", cur.PlaintextNames, s.PlaintextNames)
	}
	a, _ := json.Marshal(cur.KDF)
	b, _ := json.Marshal(s.KDF)
	switch {
	case bytes.Equal(a, b):
	case cur.KDF.String() == s.KDF.String():
		differ("kdf.salt", base64.StdEncoding.EncodeToString(cur.KDF.Salt), base64.StdEncoding.EncodeToString(s.KDF.Salt))
	default:
		differ("kdf", cur.KDF, s.KDF)
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s; refusing", ErrAltered, strings.Join(diffs, "; "))
	}
	return nil
}

// wrap sets c.WrappedKey to master encrypted under the KEK that c.KDF
// derives from passphrase.
func (c *Config) wrap(passphrase, master []byte) error {
	kek, err := c.KDF.Derive(passphrase, kekSize)
	if err != nil {
		return err
	}
	defer keys.Wipe(kek)
	aead, err := newGCM(kek)
	if err != nil {
		return err
	}
	nonce := make([]byte, aead.NonceSize(), wrappedSize)
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("config: reading random nonce: %w", err)
	}
	c.WrappedKey = aead.Seal(nonce, nonce, master, c.additionalData())
	return nil
}

// Unlock returns the master key, or ErrWrongPassphrase.
//
// A config whose authenticated fields were tampered with also gives
// ErrWrongPassphrase: GCM cannot tell the two apart, and neither should the
// caller trust such a config.
func (c *Config) Unlock(passphrase []byte) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	kek, err := c.KDF.Derive(passphrase, kekSize)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer keys.Wipe(kek)
	aead, err := newGCM(kek)
	if err != nil {
		return nil, err
	}
	n := aead.NonceSize()
	master, err := aead.Open(nil, c.WrappedKey[:n], c.WrappedKey[n:], c.additionalData())
	if err != nil || len(master) != keys.MasterKeySize {
		return nil, ErrWrongPassphrase
	}
	return master, nil
}

// Rewrap wraps master (the key Unlock returned) under newPass with the KDF
// parameters newKDF, in memory; Save writes the result. The zero newKDF
// means kdf.Default("argon2id"), and an empty salt is replaced by a fresh
// random one (a passphrase change should always get a new salt). The
// config is raised to version 3 and its settings sealed, unless it is a
// version 1 aes-cbc config (see Version). On error c is unchanged.
//
// Rewrap cannot check that master is this volume's key; a wrong one would
// make every file unreadable. ChangePassphrase does the check.
//
// Changing the passphrase does not change the master key: whoever kept a
// copy of the old config and knows the old passphrase still has the key.
func (c *Config) Rewrap(newPass, master []byte, newKDF kdf.Params) error {
	if len(newPass) == 0 {
		return ErrEmptyPassphrase
	}
	if len(master) != keys.MasterKeySize {
		return fmt.Errorf("config: master key must be %d bytes, got %d", keys.MasterKeySize, len(master))
	}
	p, err := completeKDF(newKDF)
	if err != nil {
		return err
	}
	n := *c
	n.KDF = p
	n.Version = c.upgradeVersion()
	if err := n.wrap(newPass, master); err != nil {
		return err
	}
	if err := n.seal(master); err != nil {
		return err
	}
	*c = n
	return nil
}

// ChangePassphrase unlocks c with oldPass and rewraps the master key under
// newPass and newKDF (see Rewrap). It does not write the file; call Save.
func (c *Config) ChangePassphrase(oldPass, newPass []byte, newKDF kdf.Params) error {
	master, err := c.Unlock(oldPass)
	if err != nil {
		return err
	}
	defer keys.Wipe(master)
	return c.Rewrap(newPass, master, newKDF)
}

// ContentSpec returns the content specification for content.NewEngine:
// content.SpecXTS, or for "aes-cbc" content.SpecCBC512 (version 2) or
// content.SpecCBC (version 1). It returns "" for a cipher this version
// does not know.
func (c *Config) ContentSpec() string {
	info := ciphers[c.Cipher]
	if c.Version == 1 && info.spec1 != "" {
		return info.spec1
	}
	return info.spec
}

func (c *Config) marshal() ([]byte, error) {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// saveHook lets tests interrupt Save between its steps.
var saveHook = func(step string) error { return nil }

// Save writes c to dir's twincrypt.conf, replacing an existing one.
//
// The previous file is first copied to twincrypt.conf.bak (atomically), then
// the new one is renamed into place, the directory fsynced and the new file
// read back. Only then is the backup removed, so after a crash or an error
// at any point one of twincrypt.conf and twincrypt.conf.bak holds a
// complete config: the old or the new. The backup is removed at the end
// because after a passphrase change it is still unlocked by the old
// passphrase.
func (c *Config) Save(dir string) error {
	if err := c.validate(); err != nil {
		return err
	}
	data, err := c.marshal()
	if err != nil {
		return err
	}
	old, err := readConfigFile(filepath.Join(dir, FileName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	case err != nil:
		return fmt.Errorf("config: reading current config: %w", err)
	}
	if old != nil {
		if err := writeAtomic(dir, BackupName, old, false); err != nil {
			return fmt.Errorf("config: writing backup: %w", err)
		}
	}
	if err := saveHook("backup"); err != nil {
		return err
	}
	if err := writeAtomic(dir, FileName, data, false); err != nil {
		return err
	}
	back, err := readConfigFile(filepath.Join(dir, FileName))
	if err != nil {
		return fmt.Errorf("config: reading back the new config (the old one is in %s): %w", BackupName, err)
	}
	if !bytes.Equal(back, data) {
		return fmt.Errorf("config: the new config reads back differently (the old one is in %s)", BackupName)
	}
	if err := saveHook("written"); err != nil {
		return err
	}
	if old != nil {
		if err := os.Remove(filepath.Join(dir, BackupName)); err != nil {
			return fmt.Errorf("config: removing backup: %w", err)
		}
		return syncDir(dir)
	}
	return nil
}

// writeAtomic writes data to dir/name through a temporary file: write,
// fsync, rename (or, with noReplace, hard-link so that an existing file is
// never replaced), fsync the directory. The file gets mode 0600.
func writeAtomic(dir, name string, data []byte, noReplace bool) (err error) {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// CreateTemp already uses 0600; be explicit, it is the contract.
	if err = f.Chmod(0o600); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	final := filepath.Join(dir, name)
	if noReplace {
		// link(2) fails atomically with EEXIST, which closes the race
		// between Create's emptiness check and this write: two
		// concurrent inits cannot both believe they created the volume.
		err = os.Link(tmp, final)
		switch {
		case err == nil:
			if err = os.Remove(tmp); err != nil {
				return fmt.Errorf("config: %w", err)
			}
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("%w: %s", ErrExists, final)
		default:
			// A filesystem without hard links: check, then rename.
			// The race is back, but only there.
			if _, lerr := os.Lstat(final); lerr == nil {
				err = fmt.Errorf("%w: %s", ErrExists, final)
				return err
			}
			if err = os.Rename(tmp, final); err != nil {
				return fmt.Errorf("config: %w", err)
			}
		}
	} else if err = os.Rename(tmp, final); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a rename in it is durable.
// Filesystems that cannot fsync directories report EINVAL; that is not an
// error worth failing for.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("config: fsync %s: %w", dir, err)
	}
	return nil
}

// readConfigFile reads at most MaxFileSize bytes of a regular file. The
// config lives in LOWER, which may come from anyone: a FIFO planted under
// its name would make an open wait, a device node's open would run its
// driver with the caller's rights (root, for a root mount). So it is
// checked to be a regular file on an O_PATH descriptor and only then
// opened (lowerfd.OpenRegularAt), with O_NONBLOCK against a lease.
func readConfigFile(path string) ([]byte, error) {
	dfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(dfd)
	var ust unix.Stat_t
	fd, err := lowerfd.OpenRegularAt(dfd, filepath.Base(path), unix.O_RDONLY|unix.O_NONBLOCK, &ust, nil)
	var nr *lowerfd.NotRegularError
	switch {
	case errors.Is(err, syscall.ELOOP):
		// A symlink planted as the config is not followed out of LOWER.
		return nil, fmt.Errorf("%s is a symlink; a config is a regular file", path)
	case errors.As(err, &nr):
		return nil, fmt.Errorf("%s is %w", path, err)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileSize {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, st.Size(), MaxFileSize)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s grew beyond %d bytes while being read", path, MaxFileSize)
	}
	return data, nil
}

// Load reads and validates dir's config without unlocking it.
func Load(dir string) (*Config, error) {
	path := filepath.Join(dir, FileName)
	data, err := readConfigFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	c, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Top-level and kdf keys, exactly as written. encoding/json matches keys
// case-insensitively; requiring the exact spelling keeps one reading of a
// file ("Cipher" next to "cipher" would otherwise be resolved silently).
var (
	requiredKeys = []string{"version", "cipher", "key_bytes", "plaintext_names", "kdf", "wrapped_key"}
	knownKeys    = map[string]bool{"creator": true, "version": true, "cipher": true, "key_bytes": true,
		"plaintext_names": true, "kdf": true, "wrapped_key": true, "sealed_settings": true}
	knownKDFKeys = map[string]bool{"algorithm": true, "salt": true, "time": true, "memory_kib": true,
		"threads": true, "log_n": true, "r": true, "p": true, "iterations": true, "hash": true}
)

// parse decodes and validates a config. The version is checked before the
// other fields' contents, so that a newer format is reported as such rather
// than as corrupt (a later version is still expected to have the version 1
// fields).
func parse(data []byte) (*Config, error) {
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrCorrupt, MaxFileSize)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if top == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrCorrupt)
	}
	// A required field that is absent or null is missing: null would
	// otherwise decode silently as the zero value.
	for _, k := range requiredKeys {
		if raw, ok := top[k]; !ok || bytes.Equal(raw, []byte("null")) {
			return nil, fmt.Errorf("%w: missing field %q", ErrCorrupt, k)
		}
	}
	var version int
	if err := json.Unmarshal(top["version"], &version); err != nil {
		return nil, fmt.Errorf("%w: version: %w", ErrCorrupt, err)
	}
	if err := checkVersion(version); err != nil {
		return nil, err
	}
	for k := range top {
		if !knownKeys[k] {
			return nil, fmt.Errorf("%w: unknown field %q", ErrCorrupt, k)
		}
	}
	var kdfKeys map[string]json.RawMessage
	if err := json.Unmarshal(top["kdf"], &kdfKeys); err != nil || kdfKeys == nil {
		return nil, fmt.Errorf("%w: kdf is not a JSON object", ErrCorrupt)
	}
	for k := range kdfKeys {
		if !knownKDFKeys[k] {
			return nil, fmt.Errorf("%w: unknown field \"kdf.%s\"", ErrCorrupt, k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Ciphers returns the content ciphers a config may name, sorted.
func Ciphers() []string {
	names := make([]string, 0, len(ciphers))
	for name := range ciphers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
