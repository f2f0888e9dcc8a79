package ecryptfs

import (
	"crypto/aes"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"strconv"
)

// File header (fs/ecryptfs/crypto.c, ecryptfs_write_headers_virt), at the
// front of the lower file or as the value of the user.ecryptfs xattr:
//
//	0   8  plaintext size, big-endian
//	8   8  marker: m1(4) || m1 XOR 0x3c81b7f5 (4), big-endian
//	16  4  flags; the top byte is the file format version (3)
//	20  4  header extent size (file version >= 1)
//	24  2  number of header extents at the front
//	26  .. packet set (tag 3 + tag 11 per key), ended by a byte that
//	       starts no packet
//
// Content starts after num*extentSize bytes (8192 as the kernel writes
// it), or at 0 when the header lives in the xattr.

// magicMarker is MAGIC_ECRYPTFS_MARKER.
const magicMarker = 0x3c81b7f5

// XattrName is ECRYPTFS_XATTR_NAME, where ecryptfs_xattr_metadata mounts
// keep the header.
const XattrName = "user.ecryptfs"

// ExtentSize is ECRYPTFS_DEFAULT_EXTENT_SIZE: content is encrypted in
// 4096-byte extents; the kernel never takes this from the header.
const ExtentSize = 4096

// minHeaderSize is ECRYPTFS_MINIMUM_HEADER_EXTENT_SIZE: the smallest
// header a file may declare (and the size the kernel writes on x86).
const minHeaderSize = 8192

// supportedVersion is ECRYPTFS_SUPPORTED_FILE_VERSION.
const supportedVersion = 3

// Header flag bits (ecryptfs_flag_map, the on-disk values).
const (
	FlagHMAC          = 0x01 // ECRYPTFS_ENABLE_HMAC: never implemented by the kernel
	FlagEncrypted     = 0x02 // ECRYPTFS_ENCRYPTED
	FlagMetaInXattr   = 0x04 // ECRYPTFS_METADATA_IN_XATTR
	FlagEncryptedName = 0x08 // ECRYPTFS_ENCRYPT_FILENAMES
)

// Header is a parsed file header.
type Header struct {
	PlainSize  int64
	Flags      uint32 // low 24 bits
	Version    int
	HeaderSize int64 // bytes before the first content extent when in the file
	keys       []sessionKey
}

// HasMarker reports whether b starts like an eCryptfs header (a valid
// marker at offset 8); files without one are not eCryptfs files.
func HasMarker(b []byte) bool {
	if len(b) < 16 {
		return false
	}
	m1 := binary.BigEndian.Uint32(b[8:12])
	m2 := binary.BigEndian.Uint32(b[12:16])
	return m1^m2 == magicMarker
}

// ParseHeader parses a header from the first bytes of a lower file or
// from the user.ecryptfs xattr (inXattr: the header size is then not
// checked, as the kernel does not check it).
func ParseHeader(b []byte, inXattr bool) (*Header, error) {
	if len(b) < 26 {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, len(b))
	}
	if !HasMarker(b) {
		return nil, fmt.Errorf("%w: no eCryptfs marker (not an eCryptfs file, or its header is damaged)", ErrCorrupt)
	}
	h := &Header{PlainSize: int64(binary.BigEndian.Uint64(b[0:8]))}
	fl := binary.BigEndian.Uint32(b[16:20])
	h.Version = int(fl >> 24)
	h.Flags = fl & 0xFFFFFF
	if h.Version > supportedVersion {
		return nil, fmt.Errorf("%w: file format version %d (the kernel reads up to %d)", ErrUnsupported, h.Version, supportedVersion)
	}
	if h.PlainSize < 0 {
		return nil, fmt.Errorf("%w: plaintext size %d", ErrCorrupt, h.PlainSize)
	}
	off := 20
	h.HeaderSize = minHeaderSize // set_default_header_data, version 0
	if h.Version >= 1 {
		extent := int64(binary.BigEndian.Uint32(b[20:24]))
		num := int64(binary.BigEndian.Uint16(b[24:26]))
		h.HeaderSize = extent * num
		off = 26
		if !inXattr && h.HeaderSize < minHeaderSize {
			return nil, fmt.Errorf("%w: header size %d below the minimum %d", ErrCorrupt, h.HeaderSize, minHeaderSize)
		}
	}
	if h.Flags&FlagHMAC != 0 {
		return nil, fmt.Errorf("%w: HMAC flag (not implemented by the kernel either)", ErrUnsupported)
	}
	keys, err := parsePacketSet(b[off:])
	if err != nil {
		return nil, err
	}
	h.keys = keys
	return h, nil
}

// Sigs lists the signatures of the keys that can open the file, in the
// order of the header.
func (h *Header) Sigs() []string {
	var out []string
	for _, k := range h.keys {
		out = append(out, fmt.Sprintf("%x", k.sig))
	}
	return out
}

// fileKey decrypts the file's FEK with the first key of the keyring that
// one of the header's packets names (decrypt_passphrase_encrypted_session_key:
// ECB with the FEKEK's first key-size bytes).
func (h *Header) fileKey(kr *Keyring) ([]byte, error) {
	for _, sk := range h.keys {
		k := kr.Lookup(sk.sig)
		if k == nil {
			continue
		}
		b, err := aes.NewCipher(k.FEKEK[:sk.keySize])
		if err != nil {
			return nil, err
		}
		plain := make([]byte, len(sk.encrypted))
		for i := 0; i < len(plain); i += aes.BlockSize {
			b.Decrypt(plain[i:i+aes.BlockSize], sk.encrypted[i:i+aes.BlockSize])
		}
		return plain[:sk.keySize], nil
	}
	return nil, fmt.Errorf("%w: the file needs key %v, the passphrase gives %v", ErrWrongPassphrase, h.Sigs(), kr.Sigs())
}

// rootIV is ecryptfs_compute_root_iv: MD5 of the FEK (the IV size of AES
// is the whole digest).
func rootIV(fek []byte) [md5.Size]byte { return md5.Sum(fek) }

// extentIV is ecryptfs_derive_iv: MD5(rootIV || decimal extent number
// NUL-padded to 16 bytes).
func extentIV(root *[md5.Size]byte, extentNo int64) [md5.Size]byte {
	var src [md5.Size + 16]byte
	copy(src[:], root[:])
	// snprintf(..., 16, "%lld", ...) keeps at most 15 digits.
	var num [20]byte
	copy(src[md5.Size:md5.Size+15], strconv.AppendInt(num[:0], extentNo, 10))
	return md5.Sum(src[:])
}
