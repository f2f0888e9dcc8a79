package luks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The LUKS2 JSON metadata (docs/on-disk-format-luks2.pdf section 3). Objects
// are keyed by decimal ids. 64-bit quantities (offsets, sizes) are JSON
// strings holding a decimal number, because JSON numbers are doubles; small
// ones (key sizes, iterations) are JSON numbers. Binary values are standard
// base64, which is how encoding/json already handles []byte.

// u64 is a uint64 stored as a decimal JSON string, e.g. "16777216".
type u64 uint64

func (v u64) MarshalJSON() ([]byte, error) {
	return json.Marshal(strconv.FormatUint(uint64(v), 10))
}

func (v *u64) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	n, err := parseDecimal(s)
	if err != nil {
		return err
	}
	*v = u64(n)
	return nil
}

// parseDecimal accepts only plain decimal digits, as cryptsetup's
// json_str_to_uint64 does (no sign, no spaces, no hex).
func parseDecimal(s string) (uint64, error) {
	if s == "" || len(s) > 20 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("not a decimal number: %q", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

// segmentSize is a segment's "size": a decimal string, or "dynamic" for "up
// to the end of the device".
type segmentSize struct {
	dynamic bool
	bytes   uint64
}

func (s segmentSize) MarshalJSON() ([]byte, error) {
	if s.dynamic {
		return json.Marshal("dynamic")
	}
	return u64(s.bytes).MarshalJSON()
}

func (s *segmentSize) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	if str == "dynamic" {
		*s = segmentSize{dynamic: true}
		return nil
	}
	n, err := parseDecimal(str)
	if err != nil {
		return err
	}
	*s = segmentSize{bytes: n}
	return nil
}

// jsonMetadata is the top-level object. Tokens are kept opaque: they only
// help find a passphrase, never change how one is checked.
type jsonMetadata struct {
	Keyslots map[string]json.RawMessage `json:"keyslots"`
	Tokens   map[string]json.RawMessage `json:"tokens"`
	Segments map[string]jsonSegment     `json:"segments"`
	Digests  map[string]jsonDigest      `json:"digests"`
	Config   jsonConfig                 `json:"config"`
}

// jsonKeyslot is a keyslot of type "luks2" (the only type that holds a
// passphrase; "reencrypt" keyslots hold reencryption state).
type jsonKeyslot struct {
	Type     string   `json:"type"`
	KeySize  int      `json:"key_size"`           // volume key bytes
	Priority *int     `json:"priority,omitempty"` // 0 ignore, 1 normal (default), 2 high
	AF       jsonAF   `json:"af"`
	Area     jsonArea `json:"area"`
	KDF      jsonKDF  `json:"kdf"`
}

type jsonAF struct {
	Type    string `json:"type"`    // "luks1"
	Stripes int    `json:"stripes"` // 4000
	Hash    string `json:"hash"`
}

type jsonArea struct {
	Type       string `json:"type"`       // "raw"
	Offset     u64    `json:"offset"`     // bytes from the device start
	Size       u64    `json:"size"`       // bytes reserved
	Encryption string `json:"encryption"` // dm-crypt spec of the area
	KeySize    int    `json:"key_size"`   // bytes the KDF derives
}

type jsonKDF struct {
	Type       string `json:"type"`
	Hash       string `json:"hash,omitempty"`       // pbkdf2
	Iterations uint32 `json:"iterations,omitempty"` // pbkdf2
	Time       uint32 `json:"time,omitempty"`       // argon2
	Memory     uint32 `json:"memory,omitempty"`     // argon2, KiB
	CPUs       uint32 `json:"cpus,omitempty"`       // argon2
	Salt       []byte `json:"salt"`
}

type jsonSegment struct {
	Type       string          `json:"type"` // "crypt"
	Offset     u64             `json:"offset"`
	Size       segmentSize     `json:"size"`
	IVTweak    u64             `json:"iv_tweak"`
	Encryption string          `json:"encryption"`
	SectorSize int             `json:"sector_size"`
	Integrity  json.RawMessage `json:"integrity,omitempty"`
	Flags      []string        `json:"flags,omitempty"`
}

type jsonDigest struct {
	Type       string   `json:"type"` // "pbkdf2"
	Keyslots   []string `json:"keyslots"`
	Segments   []string `json:"segments"`
	Hash       string   `json:"hash"`
	Iterations uint32   `json:"iterations"`
	Salt       []byte   `json:"salt"`
	Digest     []byte   `json:"digest"`
}

type jsonConfig struct {
	JSONSize     u64      `json:"json_size"`
	KeyslotsSize u64      `json:"keyslots_size"`
	Flags        []string `json:"flags,omitempty"`
	Requirements *struct {
		Mandatory []string `json:"mandatory"`
	} `json:"requirements,omitempty"`
}

// Bounds on values read from the JSON, checked before they size anything.
const (
	maxKeySize   = 128 // bytes; the largest dm-crypt key in practice is 64
	maxIDs       = 32  // keyslots, segments, digests (cryptsetup: 32, 32, 8)
	maxOffset    = 1 << 62
	sectorSize   = 512 // dm-crypt's unit; keyslot areas are encrypted in it
	maxDigestLen = 64
)

// metadata is the validated content of one JSON area.
type metadata struct {
	keyslots []keyslot2 // luks2 keyslots in the order Open tries them
	segments []segment2
	digests  []digest2
	// unsupported is set when the metadata is well formed but describes
	// something this package does not open (reencryption in progress,
	// integrity, a mandatory requirement it does not know).
	unsupported error
}

type keyslot2 struct {
	id         int
	priority   int
	keySize    int // volume key bytes
	areaOffset int64
	areaSize   int64
	areaCipher string
	areaKeyLen int
	stripes    int
	afHash     string
	kdf        kdf
	// unusable is set for a keyslot this package cannot try (unknown hash
	// or KDF); other keyslots may still open the volume.
	unusable error
}

type segment2 struct {
	id         int
	offset     int64
	size       int64 // -1 for dynamic
	ivTweak    uint64
	cipher     string
	sectorSize int
}

type digest2 struct {
	keyslots   []int
	segments   []int
	hash       string
	iterations uint32
	salt       []byte
	digest     []byte
	unusable   error
}

// corrupt formats an ErrCorruptHeader.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptHeader, fmt.Sprintf(format, args...))
}

// parseID parses an object key: a decimal number below maxIDs.
func parseID(s string) (int, error) {
	n, err := parseDecimal(s)
	if err != nil || n >= maxIDs {
		return 0, corrupt("bad object id %q", s)
	}
	return int(n), nil
}

// parseMetadata parses and validates a JSON area of a header of hdrSize
// bytes. Errors wrap ErrCorruptHeader; features it cannot handle are
// recorded in the result instead, so that a well-formed header stays valid.
func parseMetadata(area []byte, hdrSize int64, lim limits) (*metadata, error) {
	// The JSON text is NUL-terminated and everything after it must be zero
	// (cryptsetup's validate_json_area).
	end := bytes.IndexByte(area, 0)
	if end < 0 {
		return nil, corrupt("JSON area not NUL-terminated")
	}
	if len(bytes.Trim(area[end:], "\x00")) != 0 {
		return nil, corrupt("garbage after the JSON text")
	}
	text := area[:end]
	if len(text) == 0 || text[0] != '{' {
		return nil, corrupt("JSON area does not start with '{'")
	}
	var j jsonMetadata
	if err := json.Unmarshal(text, &j); err != nil {
		return nil, corrupt("JSON: %v", err)
	}
	if j.Keyslots == nil || j.Segments == nil || j.Digests == nil || j.Tokens == nil {
		return nil, corrupt("JSON lacks keyslots, tokens, segments or digests")
	}
	if uint64(j.Config.JSONSize) != uint64(hdrSize-bin2Len) {
		return nil, corrupt("config json_size %d for a header of %d bytes", j.Config.JSONSize, hdrSize)
	}
	if j.Config.KeyslotsSize%4096 != 0 || j.Config.KeyslotsSize > maxOffset {
		return nil, corrupt("config keyslots_size %d", j.Config.KeyslotsSize)
	}
	// Keyslot areas live between the two header copies' end and the end of
	// the keyslots area.
	areaLo := uint64(2 * hdrSize)
	areaHi := areaLo + uint64(j.Config.KeyslotsSize)

	m := &metadata{}
	if r := j.Config.Requirements; r != nil && len(r.Mandatory) > 0 {
		m.unsupported = fmt.Errorf("%w: mandatory requirement %q", ErrUnsupported, r.Mandatory)
	}
	if len(j.Keyslots) > maxIDs || len(j.Segments) > maxIDs || len(j.Digests) > maxIDs {
		return nil, corrupt("too many objects")
	}

	keyslotIDs := map[int]bool{}
	for sid, raw := range j.Keyslots {
		id, err := parseID(sid)
		if err != nil {
			return nil, err
		}
		keyslotIDs[id] = true
		var typ struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &typ); err != nil {
			return nil, corrupt("keyslot %d: %v", id, err)
		}
		if typ.Type != "luks2" {
			// "reencrypt" keyslots exist only while reencryption runs, and
			// then a mandatory requirement says so.
			if m.unsupported == nil {
				m.unsupported = fmt.Errorf("%w: keyslot type %q", ErrUnsupported, typ.Type)
			}
			continue
		}
		var jk jsonKeyslot
		if err := json.Unmarshal(raw, &jk); err != nil {
			return nil, corrupt("keyslot %d: %v", id, err)
		}
		ks, err := checkKeyslot(id, &jk, areaLo, areaHi, lim)
		if err != nil {
			return nil, err
		}
		m.keyslots = append(m.keyslots, ks)
	}
	// Open tries high-priority keyslots first, then normal ones, in id
	// order within a priority (cryptsetup's LUKS2_keyslot_open).
	slices.SortFunc(m.keyslots, func(a, b keyslot2) int {
		if a.priority != b.priority {
			return b.priority - a.priority
		}
		return a.id - b.id
	})

	segmentIDs := map[int]bool{}
	for sid, js := range j.Segments {
		id, err := parseID(sid)
		if err != nil {
			return nil, err
		}
		segmentIDs[id] = true
		seg, err := checkSegment(id, &js)
		if err != nil {
			return nil, err
		}
		if seg == nil {
			if m.unsupported == nil {
				m.unsupported = fmt.Errorf("%w: segment %d of type %q", ErrUnsupported, id, js.Type)
			}
			continue
		}
		if len(js.Integrity) > 0 && m.unsupported == nil {
			m.unsupported = fmt.Errorf("%w: segment %d with integrity protection", ErrUnsupported, id)
		}
		if len(js.Flags) > 0 && m.unsupported == nil {
			m.unsupported = fmt.Errorf("%w: segment %d flagged %q (reencryption)", ErrUnsupported, id, js.Flags)
		}
		m.segments = append(m.segments, *seg)
	}
	slices.SortFunc(m.segments, func(a, b segment2) int { return a.id - b.id })

	for sid, jd := range j.Digests {
		id, err := parseID(sid)
		if err != nil {
			return nil, err
		}
		d, err := checkDigest(id, &jd, keyslotIDs, segmentIDs, lim)
		if err != nil {
			return nil, err
		}
		m.digests = append(m.digests, d)
	}
	return m, nil
}

// checkKeyslot validates a luks2 keyslot.
func checkKeyslot(id int, jk *jsonKeyslot, areaLo, areaHi uint64, lim limits) (keyslot2, error) {
	ks := keyslot2{id: id, priority: 1}
	if jk.Priority != nil {
		if *jk.Priority < 0 || *jk.Priority > 2 {
			return ks, corrupt("keyslot %d: priority %d", id, *jk.Priority)
		}
		ks.priority = *jk.Priority
	}
	if jk.KeySize < 1 || jk.KeySize > maxKeySize {
		return ks, corrupt("keyslot %d: key_size %d", id, jk.KeySize)
	}
	if jk.AF.Type != "luks1" {
		return ks, corrupt("keyslot %d: af type %q", id, jk.AF.Type)
	}
	if jk.AF.Stripes < 1 || jk.AF.Stripes > afMaxStripes {
		return ks, corrupt("keyslot %d: %d stripes", id, jk.AF.Stripes)
	}
	if jk.Area.Type != "raw" {
		return ks, corrupt("keyslot %d: area type %q", id, jk.Area.Type)
	}
	if jk.Area.KeySize < 1 || jk.Area.KeySize > maxKeySize {
		return ks, corrupt("keyslot %d: area key_size %d", id, jk.Area.KeySize)
	}
	off, size := uint64(jk.Area.Offset), uint64(jk.Area.Size)
	need := uint64(afSize(jk.KeySize, jk.AF.Stripes))
	if off%sectorSize != 0 || off < areaLo || size > areaHi || off > areaHi-size || size < need {
		return ks, corrupt("keyslot %d: area [%d, +%d) outside the keyslots area or too small", id, off, size)
	}
	ks.keySize = jk.KeySize
	ks.areaOffset, ks.areaSize = int64(off), int64(size)
	ks.areaCipher = jk.Area.Encryption
	ks.areaKeyLen = jk.Area.KeySize
	ks.stripes = jk.AF.Stripes
	ks.afHash = jk.AF.Hash
	ks.kdf = kdf{
		typ:  jk.KDF.Type,
		hash: jk.KDF.Hash,
		salt: jk.KDF.Salt,
	}
	if jk.KDF.Type == "pbkdf2" {
		ks.kdf.iterations = jk.KDF.Iterations
	} else {
		ks.kdf.iterations = jk.KDF.Time
		ks.kdf.memoryKiB = jk.KDF.Memory
		ks.kdf.threads = jk.KDF.CPUs
	}
	if err := ks.kdf.check(lim); err != nil {
		if !errors.Is(err, ErrUnsupported) {
			return ks, fmt.Errorf("keyslot %d: %w", id, err)
		}
		ks.unusable = err
	}
	if _, err := hashByName(ks.afHash); err != nil && ks.unusable == nil {
		ks.unusable = fmt.Errorf("af: %w", err)
	}
	if err := checkCipher(ks.areaCipher, ks.areaKeyLen); err != nil && ks.unusable == nil {
		ks.unusable = fmt.Errorf("area: %w", err)
	}
	return ks, nil
}

// checkSegment validates a segment; it returns nil (and no error) for a
// well-formed segment of a type other than "crypt".
func checkSegment(id int, js *jsonSegment) (*segment2, error) {
	if js.Type != "crypt" {
		if js.Type == "" {
			return nil, corrupt("segment %d without type", id)
		}
		return nil, nil
	}
	switch js.SectorSize {
	case 512, 1024, 2048, 4096:
	default:
		return nil, corrupt("segment %d: sector_size %d", id, js.SectorSize)
	}
	if js.Offset%sectorSize != 0 || js.Offset > maxOffset {
		return nil, corrupt("segment %d: offset %d", id, js.Offset)
	}
	size := int64(-1)
	if !js.Size.dynamic {
		if js.Size.bytes%uint64(js.SectorSize) != 0 || js.Size.bytes > maxOffset {
			return nil, corrupt("segment %d: size %d", id, js.Size.bytes)
		}
		size = int64(js.Size.bytes)
	}
	if js.Encryption == "" {
		return nil, corrupt("segment %d without encryption", id)
	}
	return &segment2{
		id:         id,
		offset:     int64(js.Offset),
		size:       size,
		ivTweak:    uint64(js.IVTweak),
		cipher:     js.Encryption,
		sectorSize: js.SectorSize,
	}, nil
}

// checkDigest validates a digest and its references.
func checkDigest(id int, jd *jsonDigest, keyslots, segments map[int]bool, lim limits) (digest2, error) {
	d := digest2{hash: jd.Hash, iterations: jd.Iterations, salt: jd.Salt, digest: jd.Digest}
	for _, s := range jd.Keyslots {
		k, err := parseID(s)
		if err != nil || !keyslots[k] {
			return d, corrupt("digest %d names keyslot %q", id, s)
		}
		d.keyslots = append(d.keyslots, k)
	}
	for _, s := range jd.Segments {
		k, err := parseID(s)
		if err != nil || !segments[k] {
			return d, corrupt("digest %d names segment %q", id, s)
		}
		d.segments = append(d.segments, k)
	}
	if jd.Type != "pbkdf2" {
		d.unusable = fmt.Errorf("%w: digest type %q", ErrUnsupported, jd.Type)
		return d, nil
	}
	if jd.Iterations < 1 || jd.Iterations > lim.maxPBKDF2Iterations {
		return d, corrupt("digest %d: %d iterations", id, jd.Iterations)
	}
	if len(jd.Salt) < 1 || len(jd.Salt) > bin2SaltLen || len(jd.Digest) < 1 || len(jd.Digest) > maxDigestLen {
		return d, corrupt("digest %d: salt of %d or digest of %d bytes", id, len(jd.Salt), len(jd.Digest))
	}
	if _, err := hashByName(jd.Hash); err != nil {
		d.unusable = err
	}
	return d, nil
}
