package ecryptfs

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"errors"
	"fmt"
)

// The wrapped-passphrase file (~/.ecryptfs/wrapped-passphrase) holds the
// mount passphrase of an encrypted home, encrypted with a key derived from
// the login passphrase (ecryptfs-utils key_management.c):
//
//	version 1: sig(16 hex) || AES-128-ECB(passphrase padded with zeros to 16)
//	version 2: ':' 0x02 || salt(8) || sig(16 hex) || AES-128-ECB(...)
//
// The wrapping key is DeriveKey(login passphrase, salt) with the salt from
// the file (v2) or the configured/default salt (v1); AES uses its first 16
// bytes; sig is the wrapping key's signature, which lets a wrong login
// passphrase be told from a damaged file.

// wrappedV2Magic opens a version-2 file: ':' then the version byte 2.
var wrappedV2Magic = []byte{':', 0x02}

// ErrCorruptWrapped: the wrapped-passphrase file cannot be what
// ecryptfs-utils writes.
var ErrCorruptWrapped = errors.New("ecryptfs: corrupt wrapped-passphrase file")

// UnwrapPassphrase returns the mount passphrase held in a
// wrapped-passphrase file's contents. v1Salt is the salt for version-1
// files (nil: DefaultSalt); version-2 files carry their own.
func UnwrapPassphrase(data []byte, loginPassphrase string, v1Salt []byte) (string, error) {
	salt := v1Salt
	if salt == nil {
		salt = DefaultSalt
	}
	body := data
	if bytes.HasPrefix(data, wrappedV2Magic) {
		if len(data) < 2+SaltSize+2*SigSize {
			return "", fmt.Errorf("%w: %d bytes is too short for version 2", ErrCorruptWrapped, len(data))
		}
		salt = data[2 : 2+SaltSize]
		body = data[2+SaltSize:]
	}
	if len(body) < 2*SigSize+aes.BlockSize {
		return "", fmt.Errorf("%w: %d bytes is too short", ErrCorruptWrapped, len(data))
	}
	var wantSig [SigSize]byte
	if _, err := hex.Decode(wantSig[:], body[:2*SigSize]); err != nil {
		return "", fmt.Errorf("%w: signature is not hex", ErrCorruptWrapped)
	}
	enc := body[2*SigSize:]
	if len(enc)%aes.BlockSize != 0 || len(enc) > maxPassphrase {
		return "", fmt.Errorf("%w: encrypted passphrase of %d bytes", ErrCorruptWrapped, len(enc))
	}
	k, err := DeriveKey(loginPassphrase, salt)
	if err != nil {
		return "", err
	}
	if k.Sig != wantSig {
		return "", fmt.Errorf("%w: the login passphrase does not unwrap this file (wrapping key %x, file wants %x)",
			ErrWrongPassphrase, k.Sig, wantSig)
	}
	b, _ := aes.NewCipher(k.FEKEK[:16])
	plain := make([]byte, len(enc))
	for i := 0; i < len(enc); i += aes.BlockSize {
		b.Decrypt(plain[i:i+aes.BlockSize], enc[i:i+aes.BlockSize])
	}
	if n := bytes.IndexByte(plain, 0); n >= 0 {
		plain = plain[:n]
	}
	if len(plain) == 0 {
		return "", fmt.Errorf("%w: empty passphrase", ErrCorruptWrapped)
	}
	return string(plain), nil
}

// WrapPassphrase makes a version-2 wrapped-passphrase file as
// ecryptfs-wrap-passphrase does (for tests and fixtures).
func WrapPassphrase(passphrase, loginPassphrase string, salt []byte) ([]byte, error) {
	if len(passphrase) == 0 || len(passphrase) > maxPassphrase || bytes.IndexByte([]byte(passphrase), 0) >= 0 {
		return nil, errors.New("ecryptfs: passphrase must be 1-64 bytes without NUL")
	}
	k, err := DeriveKey(loginPassphrase, salt)
	if err != nil {
		return nil, err
	}
	n := (len(passphrase) + aes.BlockSize - 1) / aes.BlockSize * aes.BlockSize
	plain := make([]byte, n)
	copy(plain, passphrase)
	b, _ := aes.NewCipher(k.FEKEK[:16])
	out := append(append([]byte{}, wrappedV2Magic...), salt...)
	out = append(out, k.SigHex()...)
	enc := make([]byte, n)
	for i := 0; i < n; i += aes.BlockSize {
		b.Encrypt(enc[i:i+aes.BlockSize], plain[i:i+aes.BlockSize])
	}
	return append(out, enc...), nil
}
