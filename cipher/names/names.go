// Package names encrypts file names deterministically per directory with
// EME (AES-256) and encodes them URL-safe; names whose encrypted form is too
// long for the lower filesystem are stored under a hash (long-name scheme).
//
// Format. A plaintext name is padded with PKCS#7 to a multiple of 16 bytes
// (always at least one byte of padding, so the padding is unambiguous),
// enciphered with EME-AES-256 under the directory's 16-byte IV as tweak, and
// encoded with unpadded base64url (RFC 4648 section 5). This is the scheme
// of gocryptfs, with twincrypt's own key derivation.
//
// Why EME. Lookups need a deterministic encryption: the same name in the
// same directory must always give the same lower name. EME is a wide-block
// tweakable cipher: every ciphertext byte depends on every plaintext byte,
// so two names that share a prefix (report-2023.txt, report-2024.txt) give
// unrelated ciphertexts, which CBC or CTR with a fixed IV would not. The
// per-directory IV as tweak means equal names in different directories are
// not recognisable either. What remains visible is equality of names within
// one directory (unavoidable for a deterministic scheme) and the length of
// a name rounded up to 16 bytes.
//
// Names are not authenticated: a modified lower name decrypts to a garbage
// name or fails the padding check. Decrypt rejects anything that could not
// have come from Encrypt, and the encoding is checked strictly, so every
// plaintext name has exactly one lower name. That matters: if two lower
// names could decrypt to the same plaintext, a directory listing would show
// duplicates that lookups cannot tell apart.
//
// Long names. The base64url alphabet has no '.', so an encrypted name can
// never collide with DirIVFile, the config file, or a long-name entry, all of
// which contain a dot. An encrypted name longer than MaxLowerName (a
// plaintext of 176 bytes or more) is stored as LongPrefix + base64url of its
// SHA-256, and the full encrypted name goes in a sidecar file with the same
// name plus LongSuffix. A 255-byte plaintext name encrypts to 256 bytes,
// 342 base64 characters, so without this scheme names near NAME_MAX could
// not be stored at all.
package names

import (
	"crypto/aes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/rfjakob/eme"
)

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
	// TmpPrefix starts the name of a metadata file being written (the
	// directory IV, a sidecar): written under TmpPrefix + 16 hex digits,
	// then renamed over its real name. No encrypted name starts with '.'.
	TmpPrefix = ".twincrypt.tmp."
	// MaxLowerName is the longest encrypted name stored as is.
	MaxLowerName = 255
	// MaxPlainName is the longest plaintext name accepted (NAME_MAX).
	MaxPlainName = 255
)

// KeySize is the length of the name key (AES-256).
const KeySize = 32

// blockSize is the AES block size and the padding granularity.
const blockSize = 16

// maxCipherLen is the longest ciphertext Encrypt produces: 255 bytes of
// name plus one byte of padding.
const maxCipherLen = (MaxPlainName/blockSize + 1) * blockSize

// MaxEncryptedName is the longest encrypted name Encrypt produces (342).
var MaxEncryptedName = base64.RawURLEncoding.EncodedLen(maxCipherLen)

// hashLen is the length of base64url(sha256(...)).
var hashLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// ErrBadName is returned for a lower name that does not decrypt.
var ErrBadName = errors.New("names: name does not decrypt")

// ErrNameTooLong is returned for a plaintext name longer than MaxPlainName.
var ErrNameTooLong = errors.New("names: name too long")

// ErrInvalidName is returned by Encrypt for a plaintext name that cannot be
// a directory entry: "", ".", "..", or one containing '/' or NUL.
var ErrInvalidName = errors.New("names: invalid file name")

// ErrDirIV is returned for a directory IV that is not DirIVSize bytes.
var ErrDirIV = errors.New("names: directory IV must be 16 bytes")

// Cipher encrypts and decrypts names. Safe for concurrent use.
type Cipher struct {
	// eme holds only the AES block cipher, which is safe for concurrent
	// use; EME itself keeps no state between calls.
	eme *eme.EMECipher
}

// New returns a name cipher for a 32-byte key.
func New(key []byte) (*Cipher, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("names: key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &Cipher{eme: eme.New(block)}, nil
}

// NewDirIV returns a fresh random directory IV.
func NewDirIV() ([]byte, error) {
	iv := make([]byte, DirIVSize)
	if _, err := rand.Read(iv); err != nil {
		return nil, fmt.Errorf("names: reading random directory IV: %w", err)
	}
	return iv, nil
}

// CheckPlain reports whether name may be a plaintext directory entry:
// ErrInvalidName for "", ".", ".." and names with '/' or NUL,
// ErrNameTooLong beyond MaxPlainName bytes, nil otherwise.
func CheckPlain(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return ErrInvalidName
	case strings.ContainsAny(name, "/\x00"):
		return ErrInvalidName
	case len(name) > MaxPlainName:
		return ErrNameTooLong
	}
	return nil
}

// Encrypt returns the encrypted, base64url-encoded form of plain in the
// directory whose IV is dirIV. The result may be longer than MaxLowerName;
// use Lower to obtain the name to store.
func (c *Cipher) Encrypt(plain string, dirIV []byte) (string, error) {
	if err := CheckPlain(plain); err != nil {
		return "", fmt.Errorf("%w: %q", err, truncate(plain))
	}
	if len(dirIV) != DirIVSize {
		return "", ErrDirIV
	}
	padded := pad([]byte(plain))
	return base64.RawURLEncoding.EncodeToString(c.eme.Encrypt(dirIV, padded)), nil
}

// Decrypt reverses Encrypt.
//
// It accepts exactly the strings Encrypt can produce and returns
// ErrBadName for everything else. cName must be the full encrypted name:
// for a long-name entry, read it from the sidecar first.
func (c *Cipher) Decrypt(cName string, dirIV []byte) (string, error) {
	if len(dirIV) != DirIVSize {
		return "", ErrDirIV
	}
	// Bound the work before decoding: nothing longer can have come
	// from Encrypt, and EME itself panics beyond 2048 bytes.
	if len(cName) == 0 || len(cName) > MaxEncryptedName {
		return "", ErrBadName
	}
	// The decoder skips '\r' and '\n' even in strict mode; without this
	// check "ab\ncd" would decrypt to the same name as "abcd". Every other
	// byte outside the alphabet fails the decoder. (IndexByte rather than
	// a loop over the name: a listing decrypts every name it reads.)
	if strings.IndexByte(cName, '\n') >= 0 || strings.IndexByte(cName, '\r') >= 0 {
		return "", ErrBadName
	}
	// Strict rejects non-zero trailing bits, so each ciphertext has a
	// single encoding.
	ct, err := base64.RawURLEncoding.Strict().DecodeString(cName)
	if err != nil || len(ct) == 0 || len(ct)%blockSize != 0 {
		return "", ErrBadName
	}
	plain, ok := unpad(c.eme.Decrypt(dirIV, ct))
	if !ok {
		return "", ErrBadName
	}
	name := string(plain)
	if CheckPlain(name) != nil {
		return "", ErrBadName
	}
	return name, nil
}

// pad appends PKCS#7 padding: 1 to 16 bytes, each holding the pad length.
func pad(b []byte) []byte {
	n := blockSize - len(b)%blockSize
	out := make([]byte, len(b)+n)
	copy(out, b)
	for i := len(b); i < len(out); i++ {
		out[i] = byte(n)
	}
	return out
}

// unpad checks and removes PKCS#7 padding. Timing does not matter here:
// EME has no padding-oracle structure to exploit (any change to the
// ciphertext randomises the whole plaintext), and names are not secret
// from someone who can ask the filesystem to decrypt them.
func unpad(b []byte) ([]byte, bool) {
	if len(b) == 0 || len(b)%blockSize != 0 {
		return nil, false
	}
	n := int(b[len(b)-1])
	if n == 0 || n > blockSize {
		return nil, false
	}
	for _, c := range b[len(b)-n:] {
		if int(c) != n {
			return nil, false
		}
	}
	return b[:len(b)-n], true
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// truncate shortens a name for an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Lower returns the name under which cName is stored in the lower directory:
// cName itself, or LongPrefix+hash when len(cName) > MaxLowerName (long is
// then true and the caller stores cName in Lower(...)+LongSuffix).
func Lower(cName string) (lower string, long bool) {
	if len(cName) <= MaxLowerName {
		return cName, false
	}
	sum := sha256.Sum256([]byte(cName))
	return LongPrefix + base64.RawURLEncoding.EncodeToString(sum[:]), true
}

// Sidecar returns the name of the file that stores the full encrypted name
// of the long-name entry lower.
func Sidecar(lower string) string { return lower + LongSuffix }

// IsLong reports whether a lower name is a long-name entry (not its sidecar).
//
// It accepts exactly the names Lower produces: the prefix followed by 43
// base64url characters.
func IsLong(lower string) bool {
	rest, ok := strings.CutPrefix(lower, LongPrefix)
	if !ok || len(rest) != hashLen {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if !isBase64URL(rest[i]) {
			return false
		}
	}
	// 43 characters carry 258 bits; the last two must be zero.
	_, err := base64.RawURLEncoding.Strict().DecodeString(rest)
	return err == nil
}

// MaxSidecarSize bounds what a reader of a long-name sidecar needs to read:
// the longest encrypted name, plus room to notice a longer file.
var MaxSidecarSize = MaxEncryptedName + 1

// ErrBadSidecar is returned by LongName for a sidecar that does not belong
// to its entry.
var ErrBadSidecar = errors.New("names: long-name sidecar does not match its entry")

// LongName returns the full encrypted name of the long-name entry lower
// from the content of its sidecar. It accepts the sidecar only if it is
// exactly what Lower hashed into lower: a swapped, edited or truncated
// sidecar cannot give an entry another name. The result still has to go
// through Decrypt.
func LongName(lower string, sidecar []byte) (string, error) {
	if !IsLong(lower) {
		return "", fmt.Errorf("%w: %q is not a long-name entry", ErrBadSidecar, truncate(lower))
	}
	if len(sidecar) <= MaxLowerName || len(sidecar) > MaxEncryptedName {
		return "", fmt.Errorf("%w: %d bytes", ErrBadSidecar, len(sidecar))
	}
	cName := string(sidecar)
	if l, long := Lower(cName); !long || l != lower {
		return "", ErrBadSidecar
	}
	return cName, nil
}

// IsTmp reports whether a lower name is a metadata file being written
// (or left behind by an interrupted write).
func IsTmp(lower string) bool { return strings.HasPrefix(lower, TmpPrefix) }

// IsSidecar reports whether a lower name is a long-name sidecar file.
func IsSidecar(lower string) bool {
	entry, ok := strings.CutSuffix(lower, LongSuffix)
	return ok && IsLong(entry)
}
