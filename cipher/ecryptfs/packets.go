package ecryptfs

import (
	"errors"
	"fmt"
)

// The key material of a file header and of an encrypted name travels in
// packets shaped after OpenPGP (RFC 2440), as fs/ecryptfs/keystore.c
// writes them.

// Packet tags (one byte each, keystore.c / ecryptfs_kernel.h).
const (
	tag1PubKey     = 0x01 // ECRYPTFS_TAG_1_PACKET_TYPE: FEK encrypted to a public key
	tag3Passphrase = 0x8C // ECRYPTFS_TAG_3_PACKET_TYPE: FEK encrypted with a passphrase key
	tag11Literal   = 0xED // ECRYPTFS_TAG_11_PACKET_TYPE: literal data, carries the key signature
	tag70Filename  = 0x46 // ECRYPTFS_TAG_70_PACKET_TYPE: file name encrypted with the FNEK ('F')
)

// RFC 2440 cipher codes as eCryptfs writes them (ecryptfs_kernel.h).
const (
	cipherDES3     = 0x02
	cipherCAST5    = 0x03
	cipherBlowfish = 0x04
	cipherAES128   = 0x07
	cipherAES192   = 0x08
	cipherAES256   = 0x09
	cipherTwofish  = 0x0A
	cipherCAST6    = 0x0B
)

// ErrUnsupported: the data is valid eCryptfs but uses a feature this
// reader refuses (the message names it).
var ErrUnsupported = errors.New("ecryptfs: not supported")

// ErrCorrupt: the data cannot be what eCryptfs writes.
var ErrCorrupt = errors.New("ecryptfs: corrupt data")

// aesKeySize maps a cipher code to an AES key size, refusing the other
// ciphers eCryptfs knows by name.
func aesKeySize(code byte) (int, error) {
	switch code {
	case cipherAES128:
		return 16, nil
	case cipherAES192:
		return 24, nil
	case cipherAES256:
		return 32, nil
	}
	name := map[byte]string{cipherDES3: "des3_ede", cipherCAST5: "cast5", cipherBlowfish: "blowfish",
		cipherTwofish: "twofish", cipherCAST6: "cast6"}[code]
	if name == "" {
		return 0, fmt.Errorf("%w: unknown cipher code 0x%02x", ErrCorrupt, code)
	}
	return 0, fmt.Errorf("%w: cipher %s (only aes is read)", ErrUnsupported, name)
}

// aesCode is the cipher code for an AES key size.
func aesCode(keySize int) byte {
	switch keySize {
	case 24:
		return cipherAES192
	case 32:
		return cipherAES256
	}
	return cipherAES128
}

// parseLength decodes a packet body length (ecryptfs_parse_packet_length):
// one byte below 192, or two bytes for 192..8383; longer forms are
// refused as the kernel refuses them. It returns the length and the bytes
// the length took.
func parseLength(b []byte) (int, int, error) {
	if len(b) < 1 {
		return 0, 0, fmt.Errorf("%w: packet length missing", ErrCorrupt)
	}
	switch {
	case b[0] < 192:
		return int(b[0]), 1, nil
	case b[0] < 224:
		if len(b) < 2 {
			return 0, 0, fmt.Errorf("%w: packet length cut short", ErrCorrupt)
		}
		return (int(b[0])-192)*256 + int(b[1]) + 192, 2, nil
	}
	return 0, 0, fmt.Errorf("%w: packet length form 0x%02x", ErrCorrupt, b[0])
}

// appendLength encodes n as ecryptfs_write_packet_length does.
func appendLength(dst []byte, n int) []byte {
	if n < 192 {
		return append(dst, byte(n))
	}
	n -= 192
	return append(dst, byte(n/256+192), byte(n%256))
}

// sessionKey is one parsed tag 3 + tag 11 pair: the file's FEK encrypted
// with the key whose signature is sig.
type sessionKey struct {
	cipherCode byte
	keySize    int // FEK bytes (24 for AES-192 even though 32 are stored)
	salt       [SaltSize]byte
	encrypted  []byte
	sig        [SigSize]byte
}

// parsePacketSet reads the packets of a header (ecryptfs_parse_packet_set):
// tag 3 each followed by a tag 11 with the key signature, until a byte
// that starts no packet. Tag 1 (public key) is refused.
func parsePacketSet(b []byte) ([]sessionKey, error) {
	var keys []sessionKey
	i := 0
	for i < len(b) {
		switch b[i] {
		case tag3Passphrase:
			sk, n, err := parseTag3(b[i:])
			if err != nil {
				return nil, err
			}
			i += n
			sig, n, err := parseTag11(b[i:])
			if err != nil {
				return nil, fmt.Errorf("tag 3 packet without its signature: %w", err)
			}
			i += n
			sk.sig = sig
			keys = append(keys, sk)
			continue
		case tag1PubKey:
			return nil, fmt.Errorf("%w: the file key is encrypted to a public key (tag 1, key module such as openssl or tspi); only passphrase mounts are read", ErrUnsupported)
		case tag11Literal:
			return nil, fmt.Errorf("%w: tag 11 packet without a tag 3 before it", ErrCorrupt)
		}
		break
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: header holds no passphrase-encrypted file key", ErrCorrupt)
	}
	return keys, nil
}

// parseTag3 reads a passphrase-encrypted session key packet:
//
//	0x8C, length, version 0x04, cipher code, S2K 0x03, hash 0x01 (MD5),
//	salt(8), hash-iteration count(1), encrypted FEK
//
// The S2K fields are informational: the kernel never uses them, the key
// comes from userspace's own KDF (DeriveKey).
func parseTag3(b []byte) (sessionKey, int, error) {
	var sk sessionKey
	body, ll, err := parseLength(b[1:])
	if err != nil {
		return sk, 0, err
	}
	if body < SaltSize+5 || 1+ll+body > len(b) {
		return sk, 0, fmt.Errorf("%w: tag 3 packet body of %d bytes", ErrCorrupt, body)
	}
	p := b[1+ll : 1+ll+body]
	if p[0] != 0x04 {
		return sk, 0, fmt.Errorf("%w: tag 3 packet version %d", ErrCorrupt, p[0])
	}
	sk.cipherCode = p[1]
	if p[2] != 0x03 {
		return sk, 0, fmt.Errorf("%w: S2K specifier %d (only 3 exists)", ErrUnsupported, p[2])
	}
	if p[3] != 0x01 {
		return sk, 0, fmt.Errorf("%w: S2K hash %d (only MD5, 1, exists)", ErrUnsupported, p[3])
	}
	copy(sk.salt[:], p[4:4+SaltSize])
	sk.encrypted = append([]byte(nil), p[5+SaltSize:]...)
	size, err := aesKeySize(sk.cipherCode)
	if err != nil {
		return sk, 0, err
	}
	// The kernel takes the FEK size from the encrypted size, except for
	// AES-192 whose 24-byte key is stored padded to 32 (write_tag_3_packet).
	sk.keySize = size
	if len(sk.encrypted) != size && !(size == 24 && len(sk.encrypted) == 32) {
		return sk, 0, fmt.Errorf("%w: encrypted file key of %d bytes for a %d-byte cipher key", ErrCorrupt, len(sk.encrypted), size)
	}
	return sk, 1 + ll + body, nil
}

// parseTag11 reads the literal packet holding a key signature:
//
//	0xED, length, format 'b' (0x62), name length 8, "_CONSOLE", date(4), sig(8)
func parseTag11(b []byte) ([SigSize]byte, int, error) {
	var sig [SigSize]byte
	if len(b) < 1 || b[0] != tag11Literal {
		return sig, 0, fmt.Errorf("%w: tag 11 packet expected", ErrCorrupt)
	}
	body, ll, err := parseLength(b[1:])
	if err != nil {
		return sig, 0, err
	}
	if body != 14+SigSize || 1+ll+body > len(b) {
		return sig, 0, fmt.Errorf("%w: tag 11 packet body of %d bytes", ErrCorrupt, body)
	}
	p := b[1+ll : 1+ll+body]
	if p[0] != 0x62 || p[1] != 0x08 {
		return sig, 0, fmt.Errorf("%w: tag 11 packet format", ErrCorrupt)
	}
	copy(sig[:], p[14:])
	return sig, 1 + ll + body, nil
}

// appendTag3And11 writes what write_tag_3_packet and write_tag_11_packet
// write for one passphrase key.
func appendTag3And11(dst []byte, code byte, salt []byte, encFEK []byte, sig [SigSize]byte) []byte {
	dst = append(dst, tag3Passphrase)
	dst = appendLength(dst, SaltSize+5+len(encFEK))
	dst = append(dst, 0x04, code, 0x03, 0x01)
	dst = append(dst, salt...)
	dst = append(dst, 0x60) // 65536 iterations in RFC 2440's count byte
	dst = append(dst, encFEK...)
	dst = append(dst, tag11Literal)
	dst = appendLength(dst, 14+SigSize)
	dst = append(dst, 0x62, 0x08)
	dst = append(dst, "_CONSOLE"...)
	dst = append(dst, 0, 0, 0, 0)
	return append(dst, sig[:]...)
}
