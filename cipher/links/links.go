// Package links is the format of symlink targets on an encrypted volume
// (FORMAT.md, section 5).
//
// A target is sealed with AES-256-GCM and stored base64url in the lower
// symlink itself. Linux takes targets of up to 4095 bytes, so a sealed
// target fits only up to 3043 plaintext bytes (28 bytes of nonce and tag,
// 4/3 for base64). A longer target is a long link: the lower symlink holds
// a marker, and the sealed target lives in a sidecar file named by the
// marker's random id in the directory StoreDir at the root of LOWER. One
// flat store at the root, rather than sidecars next to the links, means a
// rename or hard link of the symlink to another directory needs no
// bookkeeping: the marker moves with the inode.
//
// Marker. ".twincrypt.link." ‖ the plaintext length as four decimal
// digits ‖ "." ‖ 32 lowercase hex digits (16 random bytes): always
// MarkerLen (53) bytes. A '.' is not in the base64url alphabet, so no
// sealed target starts like a marker; and 53 ≡ 1 (mod 4), a length that no
// unpadded base64 string has, so the lower size alone tells that a symlink
// may be a long link (lstat must not read the link: that would change its
// atime). The plaintext length in the marker gives lstat its st_size.
//
// Sidecar. StoreDir/<id> holds Seal(target) with additional data
// "symlink " ‖ marker: the sidecar is bound to the marker that names it
// and to the length that marker claims, so a sidecar swapped for another
// one, or a marker edited to name another sidecar or claim another length,
// does not open.
package links

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/twincrypt/twincrypt/cipher/keys"
)

const (
	// MaxTarget is the longest symlink target Linux takes: PATH_MAX - 1,
	// 4095 bytes.
	MaxTarget = 4095
	// MaxLower is the longest lower symlink target written: 4095 bytes,
	// the limit of Linux filesystems.
	MaxLower = 4095
	// StoreDir is the directory in the root of LOWER that holds the
	// sidecars of long links. Its '.' keeps it apart from encrypted names;
	// with plaintext names it is reserved like the config.
	StoreDir = "twincrypt.links"
	// markerPrefix starts every marker (16 bytes).
	markerPrefix = ".twincrypt.link."
	// IDLen is the length of a sidecar's name: 32 lowercase hex digits.
	IDLen = 32
	// MarkerLen is the length of every marker: prefix (16), length (4),
	// '.' (1), id (32) = 53 bytes.
	MarkerLen = len(markerPrefix) + 4 + 1 + IDLen
	// MaxSidecar is the size of the largest valid sidecar: a sealed
	// MaxTarget, 4123 bytes.
	MaxSidecar = MaxTarget + keys.Overhead
)

// ErrOpen is a sealed target or sidecar that does not authenticate;
// ErrEncoding a lower target that is not even base64url.
var (
	ErrOpen     = errors.New("links: symlink target does not open")
	ErrEncoding = errors.New("links: lower target is not base64url, so not a sealed target")
)

// Seal returns the lower target that holds target inline, or ok false
// when it does not fit in MaxLower bytes (a long link, see NewMarker).
func Seal(s *keys.Sealer, target []byte) (lower string, ok bool) {
	if base64.RawURLEncoding.EncodedLen(len(target)+keys.Overhead) > MaxLower {
		return "", false
	}
	return base64.RawURLEncoding.EncodeToString(s.Seal(target, []byte("symlink"))), true
}

// Open reverses Seal.
func Open(s *keys.Sealer, lower []byte) ([]byte, error) {
	// The decoder is not strict (trailing bits are ignored), as since
	// format version 1.
	raw, err := base64.RawURLEncoding.DecodeString(string(lower))
	if err != nil {
		return nil, ErrEncoding
	}
	plain, err := s.Open(raw, []byte("symlink"))
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// PlainLen is the length of the plaintext target of a lower symlink whose
// target is lowerSize bytes long; -1 when the size is MarkerLen, where only
// the marker itself tells (see MarkerLen).
func PlainLen(lowerSize int64) int64 {
	if lowerSize == int64(MarkerLen) {
		return -1
	}
	return max(0, int64(base64.RawURLEncoding.DecodedLen(int(lowerSize)))-keys.Overhead)
}

// NewMarker returns a fresh marker, with a random id, for a long link of
// targetLen bytes (at most MaxTarget).
func NewMarker(targetLen int) string {
	var id [IDLen / 2]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic("links: reading random id: " + err.Error())
	}
	return fmt.Sprintf("%s%04d.%s", markerPrefix, targetLen, hex.EncodeToString(id[:]))
}

// ParseMarker returns the target length and sidecar id of a marker; ok is
// false for anything else, including every inline sealed target. The
// parse is strict: an id is always IDLen lowercase hex digits, so the
// sidecar path built from it cannot leave StoreDir.
func ParseMarker(lower string) (targetLen int, id string, ok bool) {
	rest, found := strings.CutPrefix(lower, markerPrefix)
	if !found || len(lower) != MarkerLen || rest[4] != '.' {
		return 0, "", false
	}
	for _, c := range []byte(rest[:4]) {
		if c < '0' || c > '9' {
			return 0, "", false
		}
	}
	n, _ := strconv.Atoi(rest[:4])
	id = rest[5:]
	if n < 1 || n > MaxTarget || !IsID(id) {
		return 0, "", false
	}
	return n, id, true
}

// IsID reports whether name is a sidecar id: IDLen lowercase hex digits.
func IsID(name string) bool {
	if len(name) != IDLen {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Sidecar is the path of id's sidecar relative to LOWER.
func Sidecar(id string) string { return StoreDir + "/" + id }

// SealLong returns the sidecar content of the long link marker.
func SealLong(s *keys.Sealer, marker string, target []byte) []byte {
	return s.Seal(target, []byte("symlink "+marker))
}

// OpenLong reverses SealLong, checking that the target has the length the
// marker claims.
func OpenLong(s *keys.Sealer, marker string, sidecar []byte) ([]byte, error) {
	n, _, ok := ParseMarker(marker)
	if !ok {
		return nil, fmt.Errorf("%w: not a marker", ErrOpen)
	}
	if len(sidecar) > MaxSidecar {
		return nil, fmt.Errorf("%w: sidecar of %d bytes, at most %d are valid", ErrOpen, len(sidecar), MaxSidecar)
	}
	plain, err := s.Open(sidecar, []byte("symlink "+marker))
	if err != nil {
		return nil, ErrOpen
	}
	if len(plain) != n {
		// Unreachable without the key: the length is in the additional data.
		return nil, fmt.Errorf("%w: target of %d bytes, the marker says %d", ErrOpen, len(plain), n)
	}
	return plain, nil
}
