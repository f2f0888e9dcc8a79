// Package content is the arithmetic and the per-file crypto of twincrypt's
// encrypted file format: where each plaintext byte lives in the lower file,
// how the plaintext size follows from the lower size, the file header, and
// the encryption of one extent. It knows nothing of FUSE; fs drives it.
//
// Layout of a lower file holding plainSize bytes (see FORMAT.md):
//
//	plainSize == 0:  empty lower file (the header is written with the first byte)
//	otherwise:       header | extent 0 | extent 1 | ... | tail unit
//
// Every extent but the last is ExtentSize bytes of ciphertext at
// HeaderSize + extentNo*ExtentSize. The last extent, holding r =
// plainSize%ExtentSize bytes (possibly 0), is stored as a "tail unit" of
// r+TrailerSize bytes: the r plaintext bytes followed by TrailerSize zero
// bytes, encrypted as one unit with ciphertext stealing. The trailer makes
// every unit at least one cipher block long (so a 1-byte file encrypts
// properly) and makes the lower size a one-to-one function of the plaintext
// size: lowerSize = HeaderSize + plainSize + TrailerSize. stat therefore
// needs no read and no decryption.
//
// A unit whose ciphertext is all zero bytes is a hole and reads as zeros
// without any crypto: that is what sparse regions of the lower file look
// like, and a real ciphertext is all zero with probability 2^-128.
package content

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/sector"
)

const (
	// ExtentSize is the plaintext size of one extent, the unit of encryption
	// and of read-modify-write: 4096 bytes, the page size, as eCryptfs.
	ExtentSize = 4096
	// HeaderSize is the size of the file header at offset 0: 32 bytes.
	HeaderSize = 32
	// TrailerSize is the number of zero bytes appended to the last extent's
	// plaintext before encryption: one AES block, 16 bytes.
	TrailerSize = 16
	// FileIDSize is the size of the random per-file id: 16 bytes.
	FileIDSize = 16
	// Version is the header format version this code writes.
	Version = 1
)

// Magic is the first 4 bytes of every encrypted file.
var Magic = [4]byte{'T', 'w', 'C', 'r'}

// Cipher ids stored in the header (1 byte at offset 6).
const (
	CipherXTS = 1 // aes-xts-plain64 over each extent, tweak = extent number
	CipherCBC = 2 // aes-cbc-essiv:sha256 over each extent, IV from extent number (config version 1)
	// CipherCBC512 is aes-cbc-essiv:sha256 over each 512-byte sector of an
	// extent, IV from the sector number (config version 2): eight short
	// chains per extent instead of one long one, so that encryption, which
	// is serial within a CBC chain, runs eight chains side by side.
	CipherCBC512 = 3
)

// CBCSectorSize is the CBC chain length of CipherCBC512: dm-crypt's
// classic 512-byte sector.
const CBCSectorSize = 512

// Content specifications NewEngine takes. The first two are dm-crypt
// specifications over whole extents; SpecCBC512 is the CBC one over
// 512-byte sectors of an extent (as cryptsetup --sector-size 512).
const (
	SpecXTS    = "aes-xts-plain64"
	SpecCBC    = "aes-cbc-essiv:sha256"
	SpecCBC512 = "aes-cbc-essiv:sha256/512"
)

// Errors a caller branches on; all mean "this one file is unreadable".
var (
	ErrNotOurs        = errors.New("content: not a twincrypt file (bad magic)")
	ErrCorruptHeader  = errors.New("content: corrupt file header")
	ErrHeaderMismatch = errors.New("content: file encrypted with another cipher than the volume's")
	ErrCorruptSize    = errors.New("content: lower file size is not a valid encrypted size")
)

// Header is the fixed 32-byte header at the start of every non-empty file.
//
//	offset size field
//	0      4    magic "TwCr"
//	4      2    version, big endian (1)
//	6      1    cipher id (1 = aes-xts, 2 = aes-cbc, 3 = aes-cbc in 512-byte sectors)
//	7      1    key bytes of the per-file key (16, 32 or 64)
//	8      16   file id, random
//	24     8    reserved, zero
type Header struct {
	Version  uint16
	CipherID uint8
	KeyBytes uint8
	FileID   [FileIDSize]byte
}

// Marshal writes the header into b[:HeaderSize].
func (h *Header) Marshal(b []byte) {
	_ = b[HeaderSize-1]
	copy(b[0:4], Magic[:])
	binary.BigEndian.PutUint16(b[4:6], h.Version)
	b[6] = h.CipherID
	b[7] = h.KeyBytes
	copy(b[8:24], h.FileID[:])
	clear(b[24:32])
}

// ParseHeader decodes and checks a header.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, fmt.Errorf("%w: %d bytes, want %d", ErrCorruptHeader, len(b), HeaderSize)
	}
	if [4]byte(b[0:4]) != Magic {
		return h, ErrNotOurs
	}
	h.Version = binary.BigEndian.Uint16(b[4:6])
	if h.Version != Version {
		return h, fmt.Errorf("%w: version %d", ErrCorruptHeader, h.Version)
	}
	h.CipherID, h.KeyBytes = b[6], b[7]
	copy(h.FileID[:], b[8:24])
	for _, c := range b[24:32] {
		if c != 0 {
			return h, fmt.Errorf("%w: reserved bytes set", ErrCorruptHeader)
		}
	}
	return h, nil
}

// PlainSize returns the plaintext size of a lower file of lowerSize bytes.
// Sizes that no valid file has (a torn header, or a header with less than
// a full trailer) give ErrCorruptSize and a plaintext size of 0.
func PlainSize(lowerSize int64) (int64, error) {
	switch {
	case lowerSize == 0:
		return 0, nil
	case lowerSize == HeaderSize:
		// Header written, nothing else: a file truncated to 0 while open
		// or a crash right after the first header write.
		return 0, nil
	case lowerSize < HeaderSize+TrailerSize:
		return 0, ErrCorruptSize
	}
	return lowerSize - HeaderSize - TrailerSize, nil
}

// LowerSize is the inverse of PlainSize.
func LowerSize(plainSize int64) int64 {
	if plainSize == 0 {
		return 0
	}
	return HeaderSize + plainSize + TrailerSize
}

// UnitOffset is the lower offset of extent extentNo.
func UnitOffset(extentNo int64) int64 { return HeaderSize + extentNo*ExtentSize }

// UnitSize is the stored size of extent extentNo in a file of plainSize
// bytes: ExtentSize for every extent but the last, r+TrailerSize for the
// last, 0 beyond it.
func UnitSize(extentNo, plainSize int64) int {
	if plainSize == 0 {
		return 0
	}
	last := plainSize / ExtentSize
	switch {
	case extentNo < last:
		return ExtentSize
	case extentNo == last:
		return int(plainSize%ExtentSize) + TrailerSize
	}
	return 0
}

// Engine creates per-file ciphers from the volume's master key.
type Engine struct {
	sectorSpec string // the dm-crypt specification given to sector.New
	chain      int    // bytes per cipher unit within an extent
	cipherID   uint8
	keyBytes   int
	master     []byte
	// purpose is the HKDF purpose of the per-file keys, "content "+spec.
	purpose string
}

// NewEngine returns an engine for spec (SpecXTS, SpecCBC or SpecCBC512)
// and per-file keys of keyBytes.
func NewEngine(spec string, keyBytes int, master []byte) (*Engine, error) {
	e := &Engine{sectorSpec: spec, chain: ExtentSize, keyBytes: keyBytes, master: master, purpose: "content " + spec}
	switch spec {
	case SpecXTS:
		e.cipherID = CipherXTS
	case SpecCBC:
		e.cipherID = CipherCBC
	case SpecCBC512:
		e.cipherID, e.sectorSpec, e.chain = CipherCBC512, SpecCBC, CBCSectorSize
	default:
		return nil, fmt.Errorf("content: %w: %q", sector.ErrUnsupported, spec)
	}
	// Fail now, not at the first file, on a bad key size.
	if _, err := sector.New(e.sectorSpec, make([]byte, keyBytes)); err != nil {
		return nil, err
	}
	return e, nil
}

// NewHeader returns a header with a fresh random file id.
func (e *Engine) NewHeader() Header {
	h := Header{Version: Version, CipherID: e.cipherID, KeyBytes: uint8(e.keyBytes)}
	if _, err := rand.Read(h.FileID[:]); err != nil {
		panic("content: no randomness: " + err.Error())
	}
	return h
}

// FileCipher returns the cipher for the file with header h. The per-file
// key is HKDF-SHA256(master, salt = file id, info = "twincrypt v1 content
// <spec>"): a fresh key per file, so equal plaintext extents at equal
// offsets in two files never give equal ciphertext, with no wrapped key to
// store (and no per-file key to lose) in the header.
func (e *Engine) FileCipher(h *Header) (*FileCipher, error) {
	if h.CipherID != e.cipherID || int(h.KeyBytes) != e.keyBytes {
		return nil, fmt.Errorf("%w: header cipher %d/%d bytes, volume %d/%d bytes",
			ErrHeaderMismatch, h.CipherID, h.KeyBytes, e.cipherID, e.keyBytes)
	}
	var buf [64]byte // the largest key: AES-256-XTS
	key := buf[:e.keyBytes]
	keys.DeriveTo(key, e.master, e.purpose, h.FileID[:])
	defer keys.Wipe(key)
	c, err := sector.New(e.sectorSpec, key)
	if err != nil {
		return nil, err
	}
	f := &FileCipher{c: c, chain: e.chain, perExtent: uint64(ExtentSize / e.chain)}
	f.m, _ = c.(sector.MultiCipher)
	f.r, _ = c.(sector.RunCipher)
	return f, nil
}

// FileCipher encrypts and decrypts the units of one file.
//
// An extent is encrypted as ExtentSize/chain cipher units of chain bytes
// (one for XTS and extent-long CBC; eight 512-byte sectors for
// CipherCBC512), numbered extentNo*perExtent + i. A tail unit of n bytes
// is cut the same way (sector.RunUnits): n/chain full sectors and a last
// one of the rest; a rest shorter than one AES block (which CBC-CS2 cannot
// encrypt alone) stays with the sector before it, which is then up to
// chain+15 bytes.
type FileCipher struct {
	c         sector.Cipher
	m         sector.MultiCipher // c's MultiCipher side; nil if it has none
	r         sector.RunCipher   // c's RunCipher side; nil if it has none
	chain     int
	perExtent uint64
}

// EncryptUnit encrypts a unit's plaintext (ExtentSize bytes, or a tail unit
// whose last TrailerSize bytes the caller has zeroed) into dst.
func (f *FileCipher) EncryptUnit(dst, src []byte, extentNo int64) {
	first := uint64(extentNo) * f.perExtent
	if f.r != nil {
		f.r.EncryptRun(dst, src, f.chain, first)
		return
	}
	full, _ := sector.RunUnits(len(src), f.chain)
	whole := full * f.chain
	f.encryptSectors(dst[:whole], src[:whole], first)
	if whole < len(src) {
		f.c.Encrypt(dst[whole:len(src)], src[whole:], first+uint64(full))
	}
}

// encryptSectors encrypts src, a multiple of f.chain long, into dst as
// sectors numbered from first on, side by side where the cipher can.
func (f *FileCipher) encryptSectors(dst, src []byte, first uint64) {
	if f.m != nil {
		f.m.EncryptSectors(dst[:len(src)], src, f.chain, first)
		return
	}
	for i := 0; i < len(src); i += f.chain {
		f.c.Encrypt(dst[i:i+f.chain], src[i:i+f.chain], first+uint64(i/f.chain))
	}
}

// decryptSectors is encryptSectors' inverse.
func (f *FileCipher) decryptSectors(dst, src []byte, first uint64) {
	if f.m != nil {
		f.m.DecryptSectors(dst[:len(src)], src, f.chain, first)
		return
	}
	for i := 0; i < len(src); i += f.chain {
		f.c.Decrypt(dst[i:i+f.chain], src[i:i+f.chain], first+uint64(i/f.chain))
	}
}

// EncryptExtents encrypts, in place, the full extents in buf (a multiple
// of ExtentSize long) numbered from extentNo on. Where the cipher can, it
// works on several extents side by side (CBC encryption is serial within
// an extent but extents are independent).
func (f *FileCipher) EncryptExtents(buf []byte, extentNo int64) {
	f.encryptSectors(buf, buf, uint64(extentNo)*f.perExtent)
}

// EncryptExtentsTo encrypts the full extents of src (a multiple of
// ExtentSize long) numbered from extentNo on into dst, which must not
// overlap src unless it is src: a write's plaintext goes straight into the
// buffer for the lower file, with no copy first.
func (f *FileCipher) EncryptExtentsTo(dst, src []byte, extentNo int64) {
	f.encryptSectors(dst, src, uint64(extentNo)*f.perExtent)
}

// DecryptUnit decrypts one stored unit into dst. An all-zero unit is a hole
// and decrypts to zeros without touching the cipher.
func (f *FileCipher) DecryptUnit(dst, src []byte, extentNo int64) {
	if IsZero(src) {
		clear(dst[:len(src)])
		return
	}
	first := uint64(extentNo) * f.perExtent
	if f.r != nil {
		f.r.DecryptRun(dst, src, f.chain, first)
		return
	}
	full, _ := sector.RunUnits(len(src), f.chain)
	whole := full * f.chain
	f.decryptSectors(dst[:whole], src[:whole], first)
	if whole < len(src) {
		f.c.Decrypt(dst[whole:len(src)], src[whole:], first+uint64(full))
	}
}

// DecryptExtents decrypts, in place, the full stored extents in buf (a
// multiple of ExtentSize long) numbered from extentNo on. An all-zero
// extent is a hole and stays zeros, as with DecryptUnit; the runs of
// extents between holes go to the cipher in one call each, which the
// AES-NI assembly runs as one pipeline across the extents.
func (f *FileCipher) DecryptExtents(buf []byte, extentNo int64) {
	run := 0 // start of the current run of non-hole extents
	flush := func(end int) {
		if end == run {
			return
		}
		f.decryptSectors(buf[run:end], buf[run:end], (uint64(extentNo)+uint64(run/ExtentSize))*f.perExtent)
	}
	for i := 0; i < len(buf); i += ExtentSize {
		if IsZero(buf[i : i+ExtentSize]) {
			flush(i)
			run = i + ExtentSize
		}
	}
	flush(len(buf) / ExtentSize * ExtentSize)
}

// IsZero reports whether b is all zero bytes.
func IsZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.NativeEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
