package blockdev

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/cipher/sector"
)

// ivUnitShift is log2 of dm-crypt's IV unit, the 512-byte sector
// (SECTOR_SHIFT in the kernel): the IV of a sector counts 512-byte units
// from the start of the payload, whatever the encryption sector size,
// unless iv_large_sectors shifts it further (Volume.IVShift).
const ivUnitShift = 9

// Encryption sector sizes dm-crypt accepts: powers of two from 512 to 4096.
const (
	minSectorSize = 512
	maxSectorSize = 4096
)

// layout maps the plaintext volume onto the image, the arithmetic of one
// dm-crypt table line in one place. Plaintext offsets count from the start
// of the payload; cOff is where the payload starts in the image.
type layout struct {
	sectorSize  int64  // encryption sector, in bytes
	sectorShift uint   // log2(sectorSize)
	ivShift     uint   // the IV counts units of 512<<ivShift bytes
	ivOffset    uint64 // added to every IV (plain mode's --skip)
	cOff        int64  // byte offset of the payload in the image
	size        int64  // plaintext size, a multiple of sectorSize
}

// errGeometry is wrapped by every geometry newLayout refuses.
var errGeometry = errors.New("unusable volume geometry")

// newLayout checks v against an image of imageSize bytes. A dynamic size
// (-1) runs to the end of the image, rounded down to whole sectors; a fixed
// size must be whole sectors and fit in the image, as dm-crypt requires.
func newLayout(v *luks.Volume, imageSize int64) (layout, error) {
	ss := int64(v.SectorSize)
	if ss < minSectorSize || ss > maxSectorSize || ss&(ss-1) != 0 {
		return layout{}, fmt.Errorf("%w: sector size %d is not a power of two from %d to %d",
			errGeometry, v.SectorSize, minSectorSize, maxSectorSize)
	}
	shift := uint(bits.TrailingZeros64(uint64(ss)))
	if v.IVShift > shift-ivUnitShift {
		return layout{}, fmt.Errorf("%w: IV shift %d is larger than the sector (%d bytes)",
			errGeometry, v.IVShift, ss)
	}
	if v.Offset < 0 || v.Offset > imageSize {
		return layout{}, fmt.Errorf("%w: payload offset %d outside the %d-byte image",
			errGeometry, v.Offset, imageSize)
	}
	size := v.Size
	switch {
	case size == -1:
		size = (imageSize - v.Offset) &^ (ss - 1)
	case size <= 0 || size%ss != 0:
		return layout{}, fmt.Errorf("%w: payload size %d is not a positive multiple of the %d-byte sector",
			errGeometry, v.Size, ss)
	case size > imageSize-v.Offset:
		return layout{}, fmt.Errorf("%w: payload of %d bytes at offset %d does not fit in the %d-byte image",
			errGeometry, size, v.Offset, imageSize)
	}
	if size == 0 {
		return layout{}, fmt.Errorf("%w: no whole sector after the payload offset %d in the %d-byte image",
			errGeometry, v.Offset, imageSize)
	}
	return layout{
		sectorSize:  ss,
		sectorShift: shift,
		ivShift:     v.IVShift,
		ivOffset:    v.IVOffset,
		cOff:        v.Offset,
		size:        size,
	}, nil
}

// iv is the unit number (IV) of the sector starting at plaintext offset
// off: dm-crypt's cc->iv_offset + (bio sector >> iv_large_sectors shift).
func (l *layout) iv(off int64) uint64 {
	return l.ivOffset + uint64(off)>>ivUnitShift>>l.ivShift
}

// clamp returns how many of n bytes at off lie inside the volume.
func (l *layout) clamp(off int64, n int) int {
	if off >= l.size {
		return 0
	}
	return int(min(int64(n), l.size-off))
}

// sectors returns the sector-aligned range [start, end) that covers the n
// bytes at off (inside the volume).
func (l *layout) sectors(off int64, n int) (start, end int64) {
	mask := l.sectorSize - 1
	return off &^ mask, (off + int64(n) + mask) &^ mask
}

// decrypt decrypts buf in place; buf holds whole sectors, the first at
// plaintext offset off.
func (l *layout) decrypt(c sector.Cipher, buf []byte, off int64) {
	ss := int(l.sectorSize)
	for i := 0; i < len(buf); i += ss {
		s := buf[i : i+ss]
		c.Decrypt(s, s, l.iv(off+int64(i)))
	}
}

// encrypt encrypts the whole sectors in src into dst (which may be src);
// the first sector is at plaintext offset off.
func (l *layout) encrypt(c sector.Cipher, dst, src []byte, off int64) {
	ss := int(l.sectorSize)
	for i := 0; i < len(src); i += ss {
		c.Encrypt(dst[i:i+ss], src[i:i+ss], l.iv(off+int64(i)))
	}
}
