package luks

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The layout Format writes is cryptsetup 2.x's default for luksFormat
// --type luks2 (no --offset, --luks2-metadata-size or
// --luks2-keyslots-size):
//
//	0        primary binary header (4 KiB) + JSON area (12 KiB)
//	16 KiB   secondary binary header + JSON area
//	32 KiB   keyslots area (16 MiB - 32 KiB); keyslot 0 at its start
//	16 MiB   payload
const (
	formatHdrSize      = 0x4000
	formatKeyslotsOff  = 2 * formatHdrSize
	formatDataOffset   = 16 << 20
	formatKeyslotsSize = formatDataOffset - formatKeyslotsOff
	formatAreaAlign    = 4096 // keyslot areas are allocated in 4 KiB units

	// formatDigestIterations is the PBKDF2 cost of the volume-key digest.
	// It protects nothing (the volume key has full entropy) and is paid on
	// every passphrase try, so Format uses cryptsetup's minimum.
	formatDigestIterations = 1000
)

// Format's defaults. The KDF costs are RFC 9106's second recommended Argon2
// setting with cryptsetup's minimum of 4 passes and its maximum of 4 lanes,
// and OWASP's 2023 figure for PBKDF2-HMAC-SHA256: a fraction of a second
// here, unlike cryptsetup's benchmarked 2 s and 1 GiB.
const (
	formatDefaultCipher     = "aes-xts-plain64"
	formatDefaultKeyBytes   = 64
	formatDefaultPBKDF      = "argon2id"
	formatDefaultHash       = "sha256"
	formatDefaultIterations = 600000
	formatDefaultTime       = 4
	formatDefaultMemoryKiB  = 64 << 10
	formatDefaultThreads    = 4
)

// Format writes a new LUKS2 header (both copies) and one keyslot for
// passphrase into w, whose payload starts at 16 MiB as cryptsetup's
// default; it returns the unlocked volume.
//
// size is the size of the image in bytes: more than 16 MiB, with the
// payload a whole number of sectors. Format overwrites the first 16 MiB of w
// (the keyslots area with random bytes, as cryptsetup does, so no older
// keyslot survives) and leaves the payload alone. The costs must lie within
// cryptsetup's limits (pbkdf2 at least 1000 iterations; argon2 at least 4
// passes, 32 KiB to 4 GiB, 1 to 4 threads) or cryptsetup would refuse the
// volume.
func Format(w io.WriterAt, size int64, passphrase []byte, o FormatOptions) (*Volume, error) {
	return formatLayout(w, size, passphrase, o, defaultLayout)
}

// layout is where Format puts things. Only tests (small fuzz seeds) use
// another than defaultLayout.
type layout struct {
	hdrSize      int64 // bytes per header copy, binary header included
	keyslotsSize int64 // bytes of the keyslots area after the two copies
	stripes      int   // AF stripes of the keyslot
}

var defaultLayout = layout{hdrSize: formatHdrSize, keyslotsSize: formatKeyslotsSize, stripes: afStripes}

func (l layout) keyslotsOffset() int64 { return 2 * l.hdrSize }
func (l layout) dataOffset() int64     { return 2*l.hdrSize + l.keyslotsSize }

func formatLayout(w io.WriterAt, size int64, passphrase []byte, o FormatOptions, l layout) (*Volume, error) {
	k, err := o.resolve()
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}
	dataOffset := l.dataOffset()
	if size < dataOffset+int64(o.SectorSize) || (size-dataOffset)%int64(o.SectorSize) != 0 {
		return nil, fmt.Errorf("luks: format: image of %d bytes: the payload after byte %d must be a positive number of %d-byte sectors",
			size, dataOffset, o.SectorSize)
	}

	volumeKey := make([]byte, o.KeyBytes)
	rand.Read(volumeKey)
	newHash, _ := hashByName(o.Hash) // resolve checked it

	// Keyslot 0: the volume key, split and encrypted under the derived key
	// with the volume's own cipher, as cryptsetup does for aes ciphers.
	derived, err := k.derive(passphrase, o.KeyBytes)
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}
	material := afSplit(volumeKey, l.stripes, newHash)
	err = encryptSectors(o.Cipher, derived, material)
	clear(derived)
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}

	digestSalt := make([]byte, saltSize)
	rand.Read(digestSalt)
	digest, err := pbkdf2Key(o.Hash, volumeKey, digestSalt, formatDigestIterations, newHash().Size())
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}

	areaSize := int64(len(material)+formatAreaAlign-1) / formatAreaAlign * formatAreaAlign
	if areaSize > l.keyslotsSize {
		return nil, fmt.Errorf("luks: format: keyslot of %d bytes does not fit the keyslots area", areaSize)
	}
	slot := jsonKeyslot{
		Type:    "luks2",
		KeySize: o.KeyBytes,
		AF:      jsonAF{Type: "luks1", Stripes: l.stripes, Hash: o.Hash},
		Area: jsonArea{
			Type:       "raw",
			Offset:     u64(l.keyslotsOffset()),
			Size:       u64(areaSize),
			Encryption: o.Cipher,
			KeySize:    o.KeyBytes,
		},
		KDF: jsonKDF{Type: k.typ, Salt: k.salt},
	}
	if k.typ == "pbkdf2" {
		slot.KDF.Hash, slot.KDF.Iterations = k.hash, k.iterations
	} else {
		slot.KDF.Time, slot.KDF.Memory, slot.KDF.CPUs = k.iterations, k.memoryKiB, k.threads
	}
	rawSlot, err := json.Marshal(slot)
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}
	meta := jsonMetadata{
		Keyslots: map[string]json.RawMessage{"0": rawSlot},
		Tokens:   map[string]json.RawMessage{},
		Segments: map[string]jsonSegment{"0": {
			Type:       "crypt",
			Offset:     u64(dataOffset),
			Size:       segmentSize{dynamic: true},
			IVTweak:    0,
			Encryption: o.Cipher,
			SectorSize: o.SectorSize,
		}},
		Digests: map[string]jsonDigest{"0": {
			Type:       "pbkdf2",
			Keyslots:   []string{"0"},
			Segments:   []string{"0"},
			Hash:       o.Hash,
			Iterations: formatDigestIterations,
			Salt:       digestSalt,
			Digest:     digest,
		}},
		Config: jsonConfig{JSONSize: u64(l.hdrSize - bin2Len), KeyslotsSize: u64(l.keyslotsSize)},
	}
	text, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}
	jsonArea := make([]byte, l.hdrSize-bin2Len)
	if len(text) >= len(jsonArea) { // room for the terminating NUL
		return nil, fmt.Errorf("luks: format: metadata of %d bytes does not fit", len(text))
	}
	copy(jsonArea, text)

	uuid := newUUID()
	// Wipe the keyslots area with random bytes, then write the keyslot and
	// the two header copies.
	buf := make([]byte, 1<<20)
	for off := l.keyslotsOffset(); off < dataOffset; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), dataOffset-off)]
		rand.Read(chunk)
		if _, err := w.WriteAt(chunk, off); err != nil {
			return nil, fmt.Errorf("luks: format: %w", err)
		}
	}
	if _, err := w.WriteAt(material, l.keyslotsOffset()); err != nil {
		return nil, fmt.Errorf("luks: format: %w", err)
	}
	for _, off := range []int64{0, l.hdrSize} {
		bin, err := binaryHeader2(off, l.hdrSize, 1, o.Label, uuid, jsonArea)
		if err != nil {
			return nil, fmt.Errorf("luks: format: %w", err)
		}
		if _, err := w.WriteAt(bin, off); err != nil {
			return nil, fmt.Errorf("luks: format: %w", err)
		}
		if _, err := w.WriteAt(jsonArea, off+bin2Len); err != nil {
			return nil, fmt.Errorf("luks: format: %w", err)
		}
	}
	return &Volume{
		Version:    2,
		UUID:       uuid,
		Cipher:     o.Cipher,
		Key:        volumeKey,
		SectorSize: o.SectorSize,
		Offset:     dataOffset,
		Size:       -1,
	}, nil
}

// resolve fills in o's defaults, checks them, and returns the keyslot KDF
// with a fresh salt.
func (o *FormatOptions) resolve() (*kdf, error) {
	if o.Cipher == "" {
		o.Cipher = formatDefaultCipher
	}
	if o.KeyBytes == 0 {
		o.KeyBytes = formatDefaultKeyBytes
	}
	if o.SectorSize == 0 {
		o.SectorSize = sectorSize
	}
	if o.PBKDF == "" {
		o.PBKDF = formatDefaultPBKDF
	}
	if o.Hash == "" {
		o.Hash = formatDefaultHash
	}
	if err := checkCipher(o.Cipher, o.KeyBytes); err != nil {
		return nil, err
	}
	switch o.SectorSize {
	case 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("sector size %d", o.SectorSize)
	}
	if len(o.Label) >= bin2LabelLen || strings.IndexByte(o.Label, 0) >= 0 {
		return nil, fmt.Errorf("label %q: at most %d bytes, no NUL", o.Label, bin2LabelLen-1)
	}
	if _, err := hashByName(o.Hash); err != nil {
		return nil, err
	}
	k := &kdf{typ: o.PBKDF, salt: make([]byte, saltSize)}
	rand.Read(k.salt)
	switch o.PBKDF {
	case "pbkdf2":
		if o.Iterations == 0 {
			o.Iterations = formatDefaultIterations
		}
		if o.Iterations < 1000 || int64(o.Iterations) > int64(^uint32(0)) {
			return nil, fmt.Errorf("pbkdf2 iterations %d outside [1000, 2^32)", o.Iterations)
		}
		k.hash, k.iterations = o.Hash, uint32(o.Iterations)
	case "argon2i", "argon2id":
		if o.Time == 0 {
			o.Time = formatDefaultTime
		}
		if o.MemoryKiB == 0 {
			o.MemoryKiB = formatDefaultMemoryKiB
		}
		if o.Threads == 0 {
			o.Threads = formatDefaultThreads
		}
		if o.Time < 4 || o.MemoryKiB < 32 || o.MemoryKiB > defaultLimits.maxArgon2MemoryKiB ||
			o.Threads < 1 || o.Threads > 4 || o.MemoryKiB < 8*o.Threads {
			return nil, fmt.Errorf("argon2 time %d, memory %d KiB, %d threads outside cryptsetup's limits",
				o.Time, o.MemoryKiB, o.Threads)
		}
		k.iterations, k.memoryKiB, k.threads = o.Time, o.MemoryKiB, o.Threads
	default:
		return nil, fmt.Errorf("%w: pbkdf %q", ErrUnsupported, o.PBKDF)
	}
	return k, nil
}

// binaryHeader2 builds the binary header of the copy at off, checksummed
// over jsonArea. Each copy gets its own random salt, as cryptsetup's do.
func binaryHeader2(off, hdrSize int64, seqID uint64, label, uuid string, jsonArea []byte) ([]byte, error) {
	bin := make([]byte, bin2Len)
	if off == 0 {
		copy(bin[bin2Magic:], magic1)
	} else {
		copy(bin[bin2Magic:], magic2)
	}
	binary.BigEndian.PutUint16(bin[bin2Version:], 2)
	binary.BigEndian.PutUint64(bin[bin2HdrSize:], uint64(hdrSize))
	binary.BigEndian.PutUint64(bin[bin2SeqID:], seqID)
	copy(bin[bin2Label:bin2Label+bin2LabelLen-1], label)
	copy(bin[bin2ChecksumAlg:], "sha256")
	rand.Read(bin[bin2Salt : bin2Salt+bin2SaltLen])
	copy(bin[bin2UUID:bin2UUID+bin2UUIDLen-1], uuid)
	binary.BigEndian.PutUint64(bin[bin2HdrOffset:], uint64(off))
	sum, err := checksum2("sha256", bin, jsonArea)
	if err != nil {
		return nil, err
	}
	copy(bin[bin2Checksum:], sum)
	return bin, nil
}

// newUUID returns a random (version 4) UUID in the lower-case form
// cryptsetup writes.
func newUUID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
