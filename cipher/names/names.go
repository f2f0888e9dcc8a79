// Package names encrypts file names deterministically per directory with
// EME (AES-256) and encodes them URL-safe; names whose encrypted form is too
// long for the lower filesystem are stored under a hash (long-name scheme).
package names

import "errors"

const (
	// DirIVFile holds the 16-byte random IV of its directory.
	DirIVFile = ".twincrypt.diriv"
	// DirIVSize is the size of a directory IV in bytes.
	DirIVSize = 16
	// LongPrefix starts the lower name of an entry whose encrypted name is
	// longer than MaxLowerName: LongPrefix + base64url(sha256(cName)).
	LongPrefix = "twincrypt.long."
	// LongSuffix marks the sidecar file that stores the full encrypted name.
	LongSuffix = ".name"
	// MaxLowerName is the longest encrypted name stored as is.
	MaxLowerName = 255
	// MaxPlainName is the longest plaintext name accepted (NAME_MAX).
	MaxPlainName = 255
)

// ErrBadName is returned for a lower name that does not decrypt.
var ErrBadName = errors.New("names: name does not decrypt")

// ErrNameTooLong is returned for a plaintext name longer than MaxPlainName.
var ErrNameTooLong = errors.New("names: name too long")

// Cipher encrypts and decrypts names. Safe for concurrent use.
type Cipher struct{}

// New returns a name cipher for a 32-byte key.
func New(key []byte) (*Cipher, error) { panic("TODO") }

// Encrypt returns the encrypted, base64url-encoded form of plain in the
// directory whose IV is dirIV. The result may be longer than MaxLowerName;
// use Lower to obtain the name to store.
func (c *Cipher) Encrypt(plain string, dirIV []byte) (string, error) { panic("TODO") }

// Decrypt reverses Encrypt.
func (c *Cipher) Decrypt(cName string, dirIV []byte) (string, error) { panic("TODO") }

// Lower returns the name under which cName is stored in the lower directory:
// cName itself, or LongPrefix+hash when len(cName) > MaxLowerName (long is
// then true and the caller stores cName in Lower(...)+LongSuffix).
func Lower(cName string) (lower string, long bool) { panic("TODO") }

// IsLong reports whether a lower name is a long-name entry (not its sidecar).
func IsLong(lower string) bool { panic("TODO") }

// IsSidecar reports whether a lower name is a long-name sidecar file.
func IsSidecar(lower string) bool { panic("TODO") }
