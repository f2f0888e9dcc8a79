// Package luks opens and formats dm-crypt volumes the way cryptsetup does:
// LUKS2 (binary headers, JSON metadata, keyslots with pbkdf2 or argon2,
// anti-forensic stripes, digest), LUKS1, and plain mode. It returns the
// volume key and the geometry of the encrypted payload; cipher/sector
// encrypts the sectors. It knows nothing of FUSE.
package luks

import (
	"errors"
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
	// IVShift is log2 of the IV unit divided by 512: the IV of the
	// sector at payload byte offset o is o>>9>>IVShift. 0 means 512-byte IV
	// units (dm-crypt's default); with iv_large_sectors (LUKS2 with
	// sector_size > 512) the IV counts whole sectors: IVShift =
	// log2(SectorSize/512).
	IVShift uint
	// IVOffset is added to every IV (plain mode's --skip, in IV units).
	IVOffset uint64
	// Offset is the byte offset of the payload in the image.
	Offset int64
	// Size is the payload size in bytes; -1 means "to the end of the image"
	// (LUKS2 "dynamic").
	Size int64
}

// Open unlocks the LUKS1 or LUKS2 volume read from r with passphrase.
func Open(r io.ReaderAt, passphrase []byte) (*Volume, error) { panic("TODO") }

// PlainOptions are cryptsetup's --type plain parameters.
type PlainOptions struct {
	Cipher     string // default "aes-cbc-essiv:sha256"
	KeyBytes   int    // default 32
	Hash       string // default "ripemd160" ("plain" = passphrase used as is)
	Offset     int64  // payload offset in 512-byte sectors
	Skip       int64  // IV offset in 512-byte sectors
	SectorSize int    // default 512
}

// OpenPlain derives the key as `cryptsetup open --type plain` does.
func OpenPlain(passphrase []byte, o PlainOptions) (*Volume, error) { panic("TODO") }

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
}

// Format writes a new LUKS2 header (both copies) and one keyslot for
// passphrase into w, whose payload starts at 16 MiB as cryptsetup's
// default; it returns the unlocked volume.
func Format(w io.WriterAt, size int64, passphrase []byte, o FormatOptions) (*Volume, error) {
	panic("TODO")
}
