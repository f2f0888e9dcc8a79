package ecryptfs

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
)

// WriteOptions chooses how EncryptFile lays a file out.
type WriteOptions struct {
	KeySize int  // FEK bytes: 16, 24 or 32 (ecryptfs_key_bytes)
	InXattr bool // header in the user.ecryptfs xattr (ecryptfs_xattr_metadata)
	Flags   uint32
}

// EncryptFile encrypts plain as the kernel lays out a lower file for a
// passphrase mount with key k: it returns the lower file's bytes and, with
// InXattr, the header that belongs in the user.ecryptfs xattr. It exists
// for tests and fixtures; the kernel-written trees are the reference.
func EncryptFile(plain []byte, k *Key, salt []byte, o WriteOptions) (lower, xattr []byte, err error) {
	if o.KeySize == 0 {
		o.KeySize = 16
	}
	if o.KeySize != 16 && o.KeySize != 24 && o.KeySize != 32 {
		return nil, nil, fmt.Errorf("ecryptfs: AES key size %d", o.KeySize)
	}
	fek := make([]byte, o.KeySize)
	if _, err := rand.Read(fek); err != nil {
		return nil, nil, err
	}
	// AES-192's FEK is stored padded to 32 bytes (write_tag_3_packet).
	padded := make([]byte, (o.KeySize+15)/16*16)
	copy(padded, fek)
	kb, _ := aes.NewCipher(k.FEKEK[:o.KeySize])
	encFEK := make([]byte, len(padded))
	for i := 0; i < len(padded); i += aes.BlockSize {
		kb.Encrypt(encFEK[i:i+aes.BlockSize], padded[i:i+aes.BlockSize])
	}

	hdr := make([]byte, 26, minHeaderSize)
	binary.BigEndian.PutUint64(hdr[0:], uint64(len(plain)))
	var m1 [4]byte
	if _, err := rand.Read(m1[:]); err != nil {
		return nil, nil, err
	}
	v := binary.BigEndian.Uint32(m1[:])
	binary.BigEndian.PutUint32(hdr[8:], v)
	binary.BigEndian.PutUint32(hdr[12:], v^magicMarker)
	flags := o.Flags | FlagEncrypted
	if o.InXattr {
		flags |= FlagMetaInXattr
	}
	binary.BigEndian.PutUint32(hdr[16:], flags|supportedVersion<<24)
	binary.BigEndian.PutUint32(hdr[20:], ExtentSize)
	binary.BigEndian.PutUint16(hdr[24:], minHeaderSize/ExtentSize)
	hdr = appendTag3And11(hdr, aesCode(o.KeySize), salt, encFEK, k.Sig)
	hdr = append(hdr, make([]byte, minHeaderSize-len(hdr))...)

	b, _ := aes.NewCipher(fek)
	root := rootIV(fek)
	n := (len(plain) + ExtentSize - 1) / ExtentSize
	body := make([]byte, n*ExtentSize)
	copy(body, plain)
	for e := 0; e < n; e++ {
		iv := extentIV(&root, int64(e))
		ext := body[e*ExtentSize : (e+1)*ExtentSize]
		cipher.NewCBCEncrypter(b, iv[:]).CryptBlocks(ext, ext)
	}
	if o.InXattr {
		return body, hdr, nil
	}
	return append(hdr, body...), nil, nil
}
