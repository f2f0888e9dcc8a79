package luks

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
)

// Defaults of `cryptsetup open --type plain`, as compiled into cryptsetup
// 2.6.1 (Debian 12; `cryptsetup --help` prints them under "Default
// compiled-in device cipher parameters"): "plain: aes-cbc-essiv:sha256, Key:
// 256 bits, Password hashing: ripemd160", 512-byte sectors.
const (
	plainDefaultCipher = "aes-cbc-essiv:sha256"
	plainDefaultKey    = 32
	plainDefaultHash   = "ripemd160"
)

// errShortPlain is cryptsetup's "Too short plain passphrase" (hash
// "plain:N" with fewer than N passphrase bytes).
var errShortPlain = errors.New("luks: plain: passphrase shorter than the key")

// OpenPlain derives the key as `cryptsetup open --type plain` does.
//
// The passphrase is hashed as cryptsetup's crypt_plain_hash does for a
// passphrase typed in or piped to stdin (after cryptsetup has cut it at the
// first newline, which the caller must do too). With --key-file naming a
// real file cryptsetup ignores --hash and uses the file's first KeyBytes
// bytes as the key: pass those bytes with Hash "plain" to get the same.
//
// Hash is a hash name ("ripemd160", "sha1", "sha256", "sha512", ...), or
// "plain" for no hashing (the passphrase truncated or zero-padded to the key
// size), optionally followed by ":N" to take only N bytes from it and
// zero-fill the rest of the key ("plain:N" then needs N passphrase bytes). A hash shorter than the key is
// run again with one, two, ... 'A' bytes before the passphrase and the
// outputs are concatenated (a hack inherited from hashalot to avoid zero
// bytes in the key).
func OpenPlain(passphrase []byte, o PlainOptions) (*Volume, error) {
	if o.Cipher == "" {
		o.Cipher = plainDefaultCipher
	}
	if o.KeyBytes == 0 {
		o.KeyBytes = plainDefaultKey
	}
	if o.Hash == "" {
		o.Hash = plainDefaultHash
	}
	if o.SectorSize == 0 {
		o.SectorSize = sectorSize
	}
	if o.KeyBytes < 0 || o.KeyBytes > maxKeySize {
		return nil, fmt.Errorf("luks: plain: key size of %d bytes", o.KeyBytes)
	}
	if o.SectorSize < 512 || o.SectorSize > 4096 || o.SectorSize&(o.SectorSize-1) != 0 {
		return nil, fmt.Errorf("luks: plain: sector size %d", o.SectorSize)
	}
	if o.Offset < 0 || o.Offset > maxOffset/sectorSize || o.Skip < 0 {
		return nil, fmt.Errorf("luks: plain: offset %d, skip %d", o.Offset, o.Skip)
	}
	if err := checkCipher(o.Cipher, o.KeyBytes); err != nil {
		return nil, err
	}
	key, err := plainHash(o.Hash, passphrase, o.KeyBytes)
	if err != nil {
		return nil, err
	}
	v := &Volume{
		Cipher:     o.Cipher,
		Key:        key,
		SectorSize: o.SectorSize,
		IVOffset:   uint64(o.Skip),
		Offset:     o.Offset * sectorSize,
		Size:       -1,
	}
	if o.IVLargeSectors && o.SectorSize > sectorSize {
		v.IVShift = uint(bits.TrailingZeros(uint(o.SectorSize / sectorSize)))
		// dm-crypt: "The <iv_offset> must be multiple of <sector_size> (in
		// 512 bytes units) if this flag is specified."
		if uint64(o.Skip)&(1<<v.IVShift-1) != 0 {
			return nil, fmt.Errorf("luks: plain: skip %d is not a whole number of %d-byte sectors", o.Skip, o.SectorSize)
		}
		v.IVOffset = uint64(o.Skip) >> v.IVShift
	}
	return v, nil
}

// plainHash is cryptsetup's passphrase processing for plain mode: "plain"
// alone means no hash at all (the passphrase, truncated or zero-padded to
// the key size: lib/setup.c process_key with no hash), anything else is
// lib/crypt_plain.c crypt_plain_hash, where "plain:N" insists on N bytes.
func plainHash(spec string, passphrase []byte, keyLen int) ([]byte, error) {
	key := make([]byte, keyLen) // bytes past what is filled stay zero
	if spec == "plain" {
		copy(key, passphrase)
		return key, nil
	}
	name, hashLen := spec, keyLen
	if i := strings.IndexByte(spec, ':'); i >= 0 {
		name = spec[:i]
		n, err := parseDecimal(spec[i+1:])
		if err != nil || n > uint64(keyLen) {
			return nil, fmt.Errorf("luks: plain: hash length in %q", spec)
		}
		hashLen = int(n)
	}
	if name == "plain" {
		if len(passphrase) < hashLen {
			return nil, errShortPlain
		}
		copy(key, passphrase[:hashLen])
		return key, nil
	}
	newHash, err := hashByName(name)
	if err != nil {
		return nil, err
	}
	out := key[:hashLen]
	for round := 0; len(out) > 0; round++ {
		h := newHash()
		for range round {
			h.Write([]byte{'A'})
		}
		h.Write(passphrase)
		out = out[copy(out, h.Sum(nil)):]
	}
	return key, nil
}
