package ecryptfs

import (
	"bytes"
	"crypto/aes"
	"crypto/md5"
	"fmt"
	"strings"
)

// Encrypted names (keystore.c write_tag_70_packet, crypto.c
// ecryptfs_encode_for_filename): the lower name is
//
//	"ECRYPTFS_FNEK_ENCRYPTED." || encode(tag 70 packet)
//
// tag 70 = 0x46, length, FNEK signature(8), cipher code(1),
// ECB(FNEK, prefix || 0x00 || name) with the prefix at least 16 bytes
// long and sized so the whole is block-aligned. keystore.c passes an IV
// and says "the characters in the first block do the job of the IV", but
// the key cipher eCryptfs allocates is "ecb(aes)"
// (ecryptfs_process_key_cipher), so each block is encrypted on its own;
// the prefix, MD5 chained over the FNEK, is the same for every name. encode is a base64
// over the alphabet "-.0-9A-Za-z" with the standard bit order, zero-padded
// to whole 3-byte groups. Names without the prefix are plain (mounts
// without ecryptfs_fnek_sig).

// FNEKPrefix is ECRYPTFS_FNEK_ENCRYPTED_FILENAME_PREFIX.
const FNEKPrefix = "ECRYPTFS_FNEK_ENCRYPTED."

// FEKPrefix is ECRYPTFS_FEK_ENCRYPTED_FILENAME_PREFIX: names encrypted
// with a file's own key, declared by the kernel but never written by it
// (ecryptfs_encrypt_and_encode_filename returns EOPNOTSUPP).
const FEKPrefix = "ECRYPTFS_FEK_ENCRYPTED."

// minRandomPrepend is ECRYPTFS_FILENAME_MIN_RANDOM_PREPEND_BYTES.
const minRandomPrepend = 16

// nonNull is ECRYPTFS_NON_NULL: a prefix byte that came out 0 is replaced
// by it, so the first 0 is the separator.
const nonNull = 0x42

const portableChars = "-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

var revPortable = func() (m [256]int16) {
	for i := range m {
		m[i] = -1
	}
	for i := 0; i < len(portableChars); i++ {
		m[portableChars[i]] = int16(i)
	}
	return
}()

// encodeName is ecryptfs_encode_for_filename.
func encodeName(src []byte) string {
	var sb strings.Builder
	for i := 0; i < len(src); i += 3 {
		var blk [3]byte
		copy(blk[:], src[i:])
		sb.WriteByte(portableChars[blk[0]>>2])
		sb.WriteByte(portableChars[(blk[0]<<4&0x30)|(blk[1]>>4)])
		sb.WriteByte(portableChars[(blk[1]<<2&0x3C)|(blk[2]>>6)])
		sb.WriteByte(portableChars[blk[2]&0x3F])
	}
	return sb.String()
}

// decodeName is ecryptfs_decode_from_filename, refusing characters
// outside the alphabet (the kernel maps them to 0).
func decodeName(s string) ([]byte, error) {
	out := make([]byte, 0, len(s)*3/4+1)
	var cur byte
	bit := 0
	for i := 0; i < len(s); i++ {
		v := revPortable[s[i]]
		if v < 0 {
			return nil, fmt.Errorf("%w: character %q in an encrypted name", ErrCorrupt, s[i])
		}
		b := byte(v)
		switch bit {
		case 0:
			cur = b << 2
			bit = 6
		case 6:
			out = append(out, cur|b>>4)
			cur = b << 4
			bit = 4
		case 4:
			out = append(out, cur|b>>2)
			cur = b << 6
			bit = 2
		case 2:
			out = append(out, cur|b)
			bit = 0
		}
	}
	return out, nil
}

// IsEncryptedName reports whether a lower name carries an encrypted name.
func IsEncryptedName(lower string) bool {
	return strings.HasPrefix(lower, FNEKPrefix) || strings.HasPrefix(lower, FEKPrefix)
}

// DecryptName returns the plaintext of a lower name (also used for
// symlink targets, which the kernel encrypts the same way). Names without
// a prefix are returned as they are.
func DecryptName(lower string, kr *Keyring) (string, error) {
	if strings.HasPrefix(lower, FEKPrefix) {
		return "", fmt.Errorf("%w: FEK-encrypted name %q (the kernel never writes these)", ErrUnsupported, lower)
	}
	if !strings.HasPrefix(lower, FNEKPrefix) {
		return lower, nil
	}
	pkt, err := decodeName(lower[len(FNEKPrefix):])
	if err != nil {
		return "", err
	}
	if len(pkt) < 2 || pkt[0] != tag70Filename {
		return "", fmt.Errorf("%w: encrypted name without a tag 70 packet", ErrCorrupt)
	}
	body, ll, err := parseLength(pkt[1:])
	if err != nil {
		return "", err
	}
	if body < SigSize+1+aes.BlockSize || 1+ll+body > len(pkt) {
		return "", fmt.Errorf("%w: tag 70 packet body of %d bytes in %d", ErrCorrupt, body, len(pkt))
	}
	p := pkt[1+ll : 1+ll+body]
	var sig [SigSize]byte
	copy(sig[:], p)
	keySize, err := aesKeySize(p[SigSize])
	if err != nil {
		return "", err
	}
	enc := p[SigSize+1:]
	if len(enc)%aes.BlockSize != 0 {
		return "", fmt.Errorf("%w: encrypted name of %d bytes is not block-aligned", ErrCorrupt, len(enc))
	}
	k := kr.Lookup(sig)
	if k == nil {
		return "", fmt.Errorf("%w: name needs filename key %x, the passphrase gives %v", ErrWrongPassphrase, sig, kr.Sigs())
	}
	b, _ := aes.NewCipher(k.FEKEK[:keySize])
	plain := make([]byte, len(enc))
	for i := 0; i < len(enc); i += aes.BlockSize {
		b.Decrypt(plain[i:i+aes.BlockSize], enc[i:i+aes.BlockSize])
	}
	i := bytes.IndexByte(plain, 0)
	if i < 0 || i == len(plain)-1 {
		return "", fmt.Errorf("%w: encrypted name without separator or with an empty name", ErrCorrupt)
	}
	return string(plain[i+1:]), nil
}

// EncryptName makes the lower name the kernel makes for name with the
// filename key fnek (AES with keySize bytes of it).
func EncryptName(name string, fnek *Key, keySize int) string {
	numRand := minRandomPrepend + 1
	if r := (numRand + len(name)) % aes.BlockSize; r != 0 {
		numRand += aes.BlockSize - r
	}
	plain := make([]byte, numRand+len(name))
	// The "random" prefix is MD5 chained over the FNEK (write_tag_70_packet).
	h := md5.Sum(fnek.FEKEK[:])
	for j := 0; j < numRand-1; j++ {
		plain[j] = h[j%md5.Size]
		if j%md5.Size == md5.Size-1 {
			h = md5.Sum(h[:])
		}
		if plain[j] == 0 {
			plain[j] = nonNull
		}
	}
	copy(plain[numRand:], name)
	b, _ := aes.NewCipher(fnek.FEKEK[:keySize])
	enc := make([]byte, len(plain))
	for i := 0; i < len(plain); i += aes.BlockSize {
		b.Encrypt(enc[i:i+aes.BlockSize], plain[i:i+aes.BlockSize])
	}
	pkt := []byte{tag70Filename}
	pkt = appendLength(pkt, SigSize+1+len(enc))
	pkt = append(pkt, fnek.Sig[:]...)
	pkt = append(pkt, aesCode(keySize))
	pkt = append(pkt, enc...)
	return FNEKPrefix + encodeName(pkt)
}
