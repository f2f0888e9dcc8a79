// Package luks opens and formats dm-crypt volumes the way cryptsetup does:
// LUKS2 (binary headers, JSON metadata, keyslots with pbkdf2 or argon2,
// anti-forensic stripes, digest), LUKS1, and plain mode. It returns the
// volume key and the geometry of the encrypted payload; cipher/sector
// encrypts the sectors. It knows nothing of FUSE.
//
// # Unlocking
//
// A LUKS volume never encrypts data with the passphrase. A random volume key
// encrypts the payload; each keyslot stores that key encrypted under a key
// derived from one passphrase (PBKDF2 or Argon2), spread by the
// anti-forensic splitter over 4000 stripes. Open tries the keyslots, and a
// digest of the volume key (PBKDF2 of it) tells the right candidate from the
// wrong ones: that is the only way to know a passphrase is wrong.
//
// LUKS2 keeps two copies of its metadata, each a 4096-byte binary header
// with a checksum followed by a JSON area. Open reads both, as cryptsetup
// does: a damaged copy (bad magic, checksum or JSON) is ignored, and of two
// good ones the one with the higher sequence id wins. Open never writes:
// unlike cryptsetup it does not repair the damaged copy.
//
// # Geometry and IVs
//
// The payload starts at Volume.Offset and is encrypted in Volume.SectorSize
// units with Volume.Cipher. The IV (XTS tweak) of the unit at payload byte
// offset o is
//
//	Volume.IVOffset + (o / 512) >> Volume.IVShift
//
// dm-crypt counts IVs in 512-byte sectors whatever the encryption sector
// size, unless the table line carries iv_large_sectors. cryptsetup never sets
// that flag for LUKS2 (only for plain mode with --iv-large-sectors, and for
// BitLocker), so a LUKS2 volume with 4096-byte sectors uses IVs 0, 8, 16, ...
// for its sectors 0, 1, 2: IVShift is 0. The interop test proves it against
// data that cryptsetup itself encrypted (reencrypt --encrypt, offline).
//
// # Plain mode and Format
//
// OpenPlain has no header to read: it hashes the passphrase as `cryptsetup
// open --type plain` does, with cryptsetup 2.6.1's compiled-in defaults
// (aes-cbc-essiv:sha256, 256-bit key, ripemd160). Format writes what
// `cryptsetup luksFormat --type luks2` writes by default (16 KiB metadata
// copies, keyslots area up to 16 MiB, payload at 16 MiB, 4000 stripes, a
// pbkdf2 digest), with lighter KDF costs; cryptsetup dumps, opens and adds
// keyslots to the result.
//
// # Trust
//
// Every header value that sizes an allocation or a computation is checked
// first: hdr_size at most 4 MiB, key sizes at most 128 bytes, at most 4000
// stripes, keyslot areas inside the keyslots area, Argon2 memory at most 4
// GiB (cryptsetup's limits). A header that breaks one is ErrCorruptHeader.
// The KDF cost is still the header's choice: a header within cryptsetup's
// limits can ask for minutes of work, as it can of cryptsetup.
package luks

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Sentinel errors the CLI maps to messages and exit codes.
var (
	ErrWrongPassphrase = errors.New("luks: no keyslot opens with this passphrase")
	ErrNotLUKS         = errors.New("luks: not a LUKS volume")
	ErrCorruptHeader   = errors.New("luks: corrupt header")
	ErrUnsupported     = errors.New("luks: unsupported")
)

// Volume is an unlocked volume: what dm-crypt's table line holds.
type Volume struct {
	Version int    // 1 or 2; 0 for plain mode
	UUID    string // empty for plain mode
	// Cipher is the dm-crypt specification, e.g. "aes-xts-plain64" or
	// "aes-cbc-essiv:sha256" (sector.New accepts it).
	Cipher string
	Key    []byte // the volume key
	// SectorSize is the encryption sector size in bytes (512 .. 4096).
	SectorSize int
	// IVShift is log2 of the IV unit divided by 512: the IV of the sector
	// at payload byte offset o is IVOffset + (o>>9)>>IVShift. 0 (512-byte IV
	// units) is dm-crypt's default and what every LUKS1 and LUKS2 volume
	// uses, whatever its sector size: cryptsetup does not set
	// iv_large_sectors for LUKS2. Only plain mode with
	// PlainOptions.IVLargeSectors counts IVs in whole sectors (IVShift =
	// log2(SectorSize/512)).
	IVShift uint
	// IVOffset is added to every IV, in IV units: dm-crypt's iv_offset
	// (plain mode's --skip, LUKS2's iv_tweak).
	IVOffset uint64
	// Offset is the byte offset of the payload in the image.
	Offset int64
	// Size is the payload size in bytes; -1 means "to the end of the image"
	// (LUKS2 "dynamic").
	Size int64
}

// Open unlocks the LUKS1 or LUKS2 volume read from r with passphrase.
//
// Errors: ErrNotLUKS when no LUKS header is found; ErrCorruptHeader when one
// is but no usable copy remains; ErrUnsupported (naming the cipher, hash,
// KDF or feature) for a valid volume this package cannot decrypt;
// ErrWrongPassphrase when no keyslot accepts passphrase. Other errors come
// from r. Test with errors.Is.
func Open(r io.ReaderAt, passphrase []byte) (*Volume, error) {
	return open(r, passphrase, defaultLimits)
}

func open(r io.ReaderAt, passphrase []byte, lim limits) (*Volume, error) {
	// A LUKS1 header and a primary LUKS2 header start alike; the version
	// field tells them apart (cryptsetup's LUKS2_hdr_version_unlocked).
	phdr, err := readFull(r, 0, phdrLen)
	if err != nil && !isShort(err) {
		return nil, err
	}
	if err == nil && bytes.Equal(phdr[:6], magic1) && binary.BigEndian.Uint16(phdr[phdrVersion:]) == 1 {
		v, err := openLUKS1(r, phdr, passphrase, lim)
		if err != nil {
			return nil, fmt.Errorf("LUKS1: %w", err)
		}
		return v, nil
	}
	v, err := openLUKS2(r, passphrase, lim)
	if err != nil {
		if errors.Is(err, ErrNotLUKS) {
			return nil, err
		}
		return nil, fmt.Errorf("LUKS2: %w", err)
	}
	return v, nil
}

// PlainOptions are cryptsetup's --type plain parameters.
type PlainOptions struct {
	Cipher     string // default "aes-cbc-essiv:sha256"
	KeyBytes   int    // default 32
	Hash       string // default "ripemd160" ("plain" = passphrase used as is)
	Offset     int64  // payload offset in 512-byte sectors
	Skip       int64  // IV offset in 512-byte sectors
	SectorSize int    // default 512
	// IVLargeSectors is --iv-large-sectors: count IVs in SectorSize units
	// instead of 512-byte sectors. Skip must then be a whole number of
	// sectors.
	IVLargeSectors bool
}

// FormatOptions choose what Format writes.
type FormatOptions struct {
	Cipher     string // default "aes-xts-plain64"
	KeyBytes   int    // default 64
	SectorSize int    // default 512
	PBKDF      string // "argon2id" (default), "argon2i" or "pbkdf2"
	// Cost: pbkdf2 iterations, argon2 time/memory KiB/threads; zero = cheap
	// but safe defaults.
	Iterations int
	Time       uint32
	MemoryKiB  uint32
	Threads    uint32
	Label      string
	// Hash is the pbkdf2 hash of the keyslot and the anti-forensic
	// splitter's hash; default "sha256" (cryptsetup's --hash default).
	Hash string
}
