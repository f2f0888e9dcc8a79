package luks

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/twincrypt/twincrypt/cipher/sector"
)

// openLUKS2 unlocks a LUKS2 volume: it picks the header copy cryptsetup
// would, then tries the keyslots bound to the data segment's digest.
func openLUKS2(r io.ReaderAt, passphrase []byte, lim limits) (*Volume, error) {
	h, err := readHeader2(r, lim)
	if err != nil {
		return nil, err
	}
	m := h.meta
	if m.unsupported != nil {
		return nil, m.unsupported
	}
	if len(m.segments) != 1 {
		return nil, fmt.Errorf("%w: %d data segments", ErrUnsupported, len(m.segments))
	}
	seg := m.segments[0]

	// The digests that vouch for the segment's volume key, and the keyslots
	// that store that key.
	var digests []*digest2
	for i := range m.digests {
		if slices.Contains(m.digests[i].segments, seg.id) {
			digests = append(digests, &m.digests[i])
		}
	}
	var slots []*keyslot2
	for i := range m.keyslots {
		ks := &m.keyslots[i]
		if ks.priority == 0 {
			continue // "ignore": only used when named explicitly
		}
		for _, d := range digests {
			if slices.Contains(d.keyslots, ks.id) {
				slots = append(slots, ks)
				break
			}
		}
	}
	if len(digests) == 0 || len(slots) == 0 {
		return nil, fmt.Errorf("%w: no keyslot is bound to segment %d", ErrWrongPassphrase, seg.id)
	}
	// Refuse a data cipher sector cannot run before spending a KDF on it.
	if err := checkCipher(seg.cipher, slots[0].keySize); err != nil {
		return nil, err
	}

	var skipped error // why a keyslot could not be tried
	tried := false    // whether a candidate key reached a digest
	for _, ks := range slots {
		key, err := unlockKeyslot2(r, ks, passphrase)
		if err != nil {
			if !isDamageOrUnsupported(err) {
				return nil, err // an I/O error
			}
			if skipped == nil {
				skipped = fmt.Errorf("keyslot %d: %w", ks.id, err)
			}
			continue
		}
		for _, d := range digests {
			if !slices.Contains(d.keyslots, ks.id) || d.unusable != nil {
				if d.unusable != nil && skipped == nil {
					skipped = d.unusable
				}
				continue
			}
			ok, err := d.verify(key)
			if err != nil {
				return nil, err
			}
			tried = true
			if ok {
				if err := checkCipher(seg.cipher, len(key)); err != nil {
					return nil, err
				}
				return &Volume{
					Version:    2,
					UUID:       h.uuid,
					Cipher:     seg.cipher,
					Key:        key,
					SectorSize: seg.sectorSize,
					IVShift:    0, // LUKS2 never sets iv_large_sectors: see Volume.IVShift
					IVOffset:   seg.ivTweak,
					Offset:     seg.offset,
					Size:       seg.size,
				}, nil
			}
		}
		clear(key)
	}
	switch {
	case skipped == nil:
		return nil, ErrWrongPassphrase
	case !tried:
		return nil, skipped
	}
	return nil, fmt.Errorf("%w (%v)", ErrWrongPassphrase, skipped)
}

// isDamageOrUnsupported tells errors about the volume from errors of the
// reader.
func isDamageOrUnsupported(err error) bool {
	return errors.Is(err, ErrCorruptHeader) || errors.Is(err, ErrUnsupported)
}

// unlockKeyslot2 derives the keyslot key from passphrase, decrypts the
// keyslot area and merges the stripes into a candidate volume key. Whether
// the candidate is right only the digest can tell.
func unlockKeyslot2(r io.ReaderAt, ks *keyslot2, passphrase []byte) ([]byte, error) {
	if ks.unusable != nil {
		return nil, ks.unusable
	}
	afHash, err := hashByName(ks.afHash)
	if err != nil {
		return nil, err
	}
	material, err := readFull(r, ks.areaOffset, int64(afSize(ks.keySize, ks.stripes)))
	if err != nil {
		if isShort(err) {
			return nil, fmt.Errorf("%w: keyslot area beyond the end of the image", ErrCorruptHeader)
		}
		return nil, err
	}
	derived, err := ks.kdf.derive(passphrase, ks.areaKeyLen)
	if err != nil {
		return nil, err
	}
	defer clear(derived)
	defer clear(material)
	if err := decryptSectors(ks.areaCipher, derived, material); err != nil {
		return nil, err
	}
	return afMerge(material, ks.keySize, ks.stripes, afHash), nil
}

// decryptSectors decrypts keyslot material in place: 512-byte sectors whose
// IV is the sector number counted from the start of the material (LUKS1
// keyencryption.c and LUKS2 luks2_keyslot_luks2.c both start at 0).
func decryptSectors(spec string, key, buf []byte) error {
	c, err := sector.New(spec, key)
	if err != nil {
		return fmt.Errorf("%w: keyslot cipher %q: %v", ErrUnsupported, spec, err)
	}
	for i := 0; i*sectorSize < len(buf); i++ {
		s := buf[i*sectorSize : (i+1)*sectorSize]
		c.Decrypt(s, s, uint64(i))
	}
	return nil
}

// encryptSectors is decryptSectors' inverse, for Format.
func encryptSectors(spec string, key, buf []byte) error {
	c, err := sector.New(spec, key)
	if err != nil {
		return fmt.Errorf("%w: keyslot cipher %q: %v", ErrUnsupported, spec, err)
	}
	for i := 0; i*sectorSize < len(buf); i++ {
		s := buf[i*sectorSize : (i+1)*sectorSize]
		c.Encrypt(s, s, uint64(i))
	}
	return nil
}

// verify reports whether key is the volume key: PBKDF2 of the key with the
// digest's salt and iterations equals the stored digest.
func (d *digest2) verify(key []byte) (bool, error) {
	got, err := pbkdf2Key(d.hash, key, d.salt, d.iterations, len(d.digest))
	if err != nil {
		return false, err
	}
	return subtle.ConstantTimeCompare(got, d.digest) == 1, nil
}

// checkCipher reports, as ErrUnsupported naming the cipher, whether sector
// cannot run spec with a keyLen-byte key.
func checkCipher(spec string, keyLen int) error {
	if _, err := sector.New(spec, make([]byte, keyLen)); err != nil {
		return fmt.Errorf("%w: cipher %q with a %d-bit key", ErrUnsupported, spec, keyLen*8)
	}
	return nil
}
