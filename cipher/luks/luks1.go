package luks

import (
	"crypto/subtle"
	"encoding/binary"
	"io"
)

// The LUKS1 partition header ("LUKS On-Disk Format Specification" version
// 1.2.3, section 2.4; cryptsetup lib/luks1/luks.h struct luks_phdr): 592
// bytes at offset 0, big-endian integers, no secondary copy. Offsets:
const (
	phdrMagic       = 0   // [6] "LUKS\xba\xbe"
	phdrVersion     = 6   // u16, 1
	phdrCipherName  = 8   // [32] e.g. "aes"
	phdrCipherMode  = 40  // [32] e.g. "xts-plain64"
	phdrHashSpec    = 72  // [32] PBKDF2 and AF hash, e.g. "sha256"
	phdrPayload     = 104 // u32, payload offset in 512-byte sectors
	phdrKeyBytes    = 108 // u32, volume key length
	phdrMKDigest    = 112 // [20] PBKDF2 of the volume key
	phdrMKSalt      = 132 // [32]
	phdrMKIter      = 164 // u32
	phdrUUID        = 168 // [40]
	phdrKeyslots    = 208 // 8 keyslots of 48 bytes:
	slotActive      = 0   //   u32, keyActive or keyDisabled
	slotIterations  = 4   //   u32
	slotSalt        = 8   //   [32]
	slotMaterial    = 40  //   u32, key material offset in 512-byte sectors
	slotStripes     = 44  //   u32
	slotLen         = 48
	phdrLen         = 592
	phdrNameLen     = 32
	phdrDigestLen   = 20
	phdrNumKeyslots = 8

	keyActive   = 0x00AC71F3
	keyDisabled = 0x0000DEAD
)

// openLUKS1 unlocks a LUKS1 volume whose 592-byte header is phdr.
func openLUKS1(r io.ReaderAt, phdr []byte, passphrase []byte, lim limits) (*Volume, error) {
	be := binary.BigEndian
	spec := cString(phdr[phdrCipherName:phdrCipherName+phdrNameLen]) + "-" +
		cString(phdr[phdrCipherMode:phdrCipherMode+phdrNameLen])
	hashName := cString(phdr[phdrHashSpec : phdrHashSpec+phdrNameLen])
	payload := int64(be.Uint32(phdr[phdrPayload:])) * sectorSize
	keyBytes := int(be.Uint32(phdr[phdrKeyBytes:]))
	mkDigest := phdr[phdrMKDigest : phdrMKDigest+phdrDigestLen]
	mkSalt := phdr[phdrMKSalt : phdrMKSalt+saltSize]
	mkIter := be.Uint32(phdr[phdrMKIter:])

	if keyBytes < 1 || keyBytes > maxKeySize {
		return nil, corrupt("LUKS1 key-bytes %d", keyBytes)
	}
	if mkIter < 1 || mkIter > lim.maxPBKDF2Iterations {
		return nil, corrupt("LUKS1 mk-digest-iter %d", mkIter)
	}
	newHash, err := hashByName(hashName)
	if err != nil {
		return nil, err
	}
	if err := checkCipher(spec, keyBytes); err != nil {
		return nil, err
	}

	type slot struct {
		index          int
		iterations     uint32
		salt           []byte
		materialOffset int64
		stripes        int
	}
	var slots []slot
	for i := range phdrNumKeyslots {
		s := phdr[phdrKeyslots+i*slotLen : phdrKeyslots+(i+1)*slotLen]
		switch be.Uint32(s[slotActive:]) {
		case keyDisabled:
			continue
		case keyActive:
		default:
			return nil, corrupt("LUKS1 keyslot %d: state %#x", i, be.Uint32(s[slotActive:]))
		}
		sl := slot{
			index:          i,
			iterations:     be.Uint32(s[slotIterations:]),
			salt:           s[slotSalt : slotSalt+saltSize],
			materialOffset: int64(be.Uint32(s[slotMaterial:])) * sectorSize,
			stripes:        int(be.Uint32(s[slotStripes:])),
		}
		if sl.iterations < 1 || sl.iterations > lim.maxPBKDF2Iterations {
			return nil, corrupt("LUKS1 keyslot %d: %d iterations", i, sl.iterations)
		}
		if sl.stripes < 1 || sl.stripes > afMaxStripes {
			return nil, corrupt("LUKS1 keyslot %d: %d stripes", i, sl.stripes)
		}
		// Key material lies after the header and, unless the header is
		// detached (payload offset 0), before the payload.
		end := sl.materialOffset + int64(afSize(keyBytes, sl.stripes))
		if sl.materialOffset < phdrLen || (payload != 0 && end > payload) {
			return nil, corrupt("LUKS1 keyslot %d: key material at sector %d", i, sl.materialOffset/sectorSize)
		}
		slots = append(slots, sl)
	}

	for _, sl := range slots {
		derived, err := pbkdf2Key(hashName, passphrase, sl.salt, sl.iterations, keyBytes)
		if err != nil {
			return nil, err
		}
		material, err := readFull(r, sl.materialOffset, int64(afSize(keyBytes, sl.stripes)))
		if err != nil {
			if isShort(err) {
				return nil, corrupt("LUKS1 keyslot %d: key material beyond the end of the image", sl.index)
			}
			return nil, err
		}
		// The key material is encrypted with the volume's own cipher.
		if err := decryptSectors(spec, derived, material); err != nil {
			return nil, err
		}
		clear(derived)
		key := afMerge(material, keyBytes, sl.stripes, newHash)
		clear(material)
		sum, err := pbkdf2Key(hashName, key, mkSalt, mkIter, phdrDigestLen)
		if err != nil {
			return nil, err
		}
		if subtle.ConstantTimeCompare(sum, mkDigest) == 1 {
			return &Volume{
				Version:    1,
				UUID:       cString(phdr[phdrUUID : phdrUUID+bin2UUIDLen]),
				Cipher:     spec,
				Key:        key,
				SectorSize: sectorSize,
				Offset:     payload,
				Size:       -1,
			}, nil
		}
		clear(key)
	}
	return nil, ErrWrongPassphrase
}
