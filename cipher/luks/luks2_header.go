package luks

import (
	"bytes"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The LUKS2 binary header (cryptsetup docs/on-disk-format-luks2.pdf, section
// 2; lib/luks2/luks2.h struct luks2_hdr_disk). Two copies sit at the start of
// the device, each a 4096-byte binary header followed by a JSON area of
// hdr_size - 4096 bytes; the secondary copy starts at offset hdr_size. All
// integers are big-endian. Offsets within the 4096 bytes:
const (
	bin2Magic       = 0   // [6] "LUKS\xba\xbe" (primary) or "SKUL\xba\xbe" (secondary)
	bin2Version     = 6   // u16, 2
	bin2HdrSize     = 8   // u64, binary header + JSON area, in bytes
	bin2SeqID       = 16  // u64, incremented on every metadata update
	bin2Label       = 24  // [48] NUL-terminated label
	bin2ChecksumAlg = 72  // [32] NUL-terminated hash name, "sha256"
	bin2Salt        = 104 // [64] random, different in each copy
	bin2UUID        = 168 // [40] NUL-terminated UUID string
	bin2Subsystem   = 208 // [48] NUL-terminated subsystem label
	bin2HdrOffset   = 256 // u64, offset of this copy on the device
	bin2Checksum    = 448 // [64] checksum, zero-padded; the rest up to 4096 is padding

	bin2Len         = 4096 // size of the binary header
	bin2LabelLen    = 48
	bin2AlgLen      = 32
	bin2SaltLen     = 64
	bin2UUIDLen     = 40
	bin2ChecksumLen = 64
)

var (
	magic1 = []byte("LUKS\xba\xbe") // primary LUKS2 header and the LUKS1 header
	magic2 = []byte("SKUL\xba\xbe") // secondary LUKS2 header
)

// hdr2MinSize and hdr2MaxSize bound hdr_size: 16 KiB is the smallest (and
// the default) metadata size, and no copy may start beyond 4 MiB.
const (
	hdr2MinSize = 0x4000
	hdr2MaxSize = 0x400000
)

// secondaryOffsets are where cryptsetup looks for the secondary header when the
// primary is unreadable and so cannot say its hdr_size
// (lib/luks2/luks2.h LUKS2_HDR2_OFFSETS): every valid hdr_size.
var secondaryOffsets = []int64{
	0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000,
}

// errNoMagic marks a place where no LUKS header starts at all, as opposed to
// a damaged one: only when no copy has a magic is the image "not LUKS".
var errNoMagic = errors.New("no LUKS magic")

// header2 is one valid, checksummed copy of the LUKS2 metadata.
type header2 struct {
	offset  int64 // where this copy starts
	hdrSize int64
	seqID   uint64
	label   string
	uuid    string
	meta    *metadata
}

// readFull reads exactly n bytes at off. A short image is io.ErrUnexpectedEOF.
// The buffer grows with the data actually read, so a header that claims a
// large size costs memory only if the image really holds that much.
func readFull(r io.ReaderAt, off, n int64) ([]byte, error) {
	b, err := io.ReadAll(io.NewSectionReader(r, off, n))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != n {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// isShort reports whether err means the image ended early, which for a header
// is damage (or absence), not an I/O failure to pass up.
func isShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// readBinary2 reads and sanity-checks the binary header of the copy at off
// (cryptsetup's hdr_disk_sanity_check_pre), before anything is allocated from
// it. I/O errors other than a short image are returned unwrapped.
func readBinary2(r io.ReaderAt, off int64, secondary bool) ([]byte, int64, error) {
	bin, err := readFull(r, off, bin2Len)
	if err != nil {
		if isShort(err) {
			return nil, 0, errNoMagic
		}
		return nil, 0, err
	}
	want := magic1
	if secondary {
		want = magic2
	}
	if !bytes.Equal(bin[bin2Magic:bin2Magic+6], want) {
		return nil, 0, errNoMagic
	}
	if v := binary.BigEndian.Uint16(bin[bin2Version:]); v != 2 {
		return nil, 0, fmt.Errorf("%w: header version %d at %#x", ErrCorruptHeader, v, off)
	}
	if o := binary.BigEndian.Uint64(bin[bin2HdrOffset:]); o != uint64(off) {
		return nil, 0, fmt.Errorf("%w: header at %#x says it is at %#x", ErrCorruptHeader, off, o)
	}
	size := binary.BigEndian.Uint64(bin[bin2HdrSize:])
	if size < hdr2MinSize || size > hdr2MaxSize || size%bin2Len != 0 {
		return nil, 0, fmt.Errorf("%w: header size %#x at %#x", ErrCorruptHeader, size, off)
	}
	if secondary && size != uint64(off) {
		return nil, 0, fmt.Errorf("%w: secondary header at %#x has size %#x", ErrCorruptHeader, off, size)
	}
	return bin, int64(size), nil
}

// checksum2 computes the header checksum: the named hash over the binary
// header with its checksum field zeroed, then the whole JSON area, unused
// space included (cryptsetup's hdr_checksum_calculate).
func checksum2(alg string, bin, jsonArea []byte) ([]byte, error) {
	newHash, err := hashByName(alg)
	if err != nil {
		return nil, err
	}
	h := newHash()
	if h.Size() > bin2ChecksumLen {
		return nil, fmt.Errorf("%w: checksum %q longer than the field", ErrUnsupported, alg)
	}
	var zero [bin2ChecksumLen]byte
	h.Write(bin[:bin2Checksum])
	h.Write(zero[:])
	h.Write(bin[bin2Checksum+bin2ChecksumLen : bin2Len])
	h.Write(jsonArea)
	return h.Sum(nil), nil
}

// readCopy2 reads, checksums, parses and validates the copy at off.
// checksummed reports whether the binary header was sane and the checksum
// right, whatever became of the JSON; size is then its hdr_size.
func readCopy2(r io.ReaderAt, off int64, secondary bool, lim limits) (h *header2, size int64, checksummed bool, err error) {
	bin, size, err := readBinary2(r, off, secondary)
	if err != nil {
		return nil, 0, false, err
	}
	jsonArea, err := readFull(r, off+bin2Len, size-bin2Len)
	if err != nil {
		if isShort(err) {
			return nil, 0, false, fmt.Errorf("%w: image ends inside the JSON area at %#x", ErrCorruptHeader, off)
		}
		return nil, 0, false, err
	}
	alg := cString(bin[bin2ChecksumAlg : bin2ChecksumAlg+bin2AlgLen])
	sum, err := checksum2(alg, bin, jsonArea)
	if err != nil {
		return nil, 0, false, fmt.Errorf("%w: header at %#x: %v", ErrCorruptHeader, off, err)
	}
	if subtle.ConstantTimeCompare(sum, bin[bin2Checksum:bin2Checksum+len(sum)]) != 1 {
		return nil, 0, false, fmt.Errorf("%w: checksum mismatch in header at %#x", ErrCorruptHeader, off)
	}
	meta, err := parseMetadata(jsonArea, size, lim)
	if err != nil {
		return nil, size, true, fmt.Errorf("header at %#x: %w", off, err)
	}
	return &header2{
		offset:  off,
		hdrSize: size,
		seqID:   binary.BigEndian.Uint64(bin[bin2SeqID:]),
		label:   cString(bin[bin2Label : bin2Label+bin2LabelLen]),
		uuid:    cString(bin[bin2UUID : bin2UUID+bin2UUIDLen]),
		meta:    meta,
	}, size, true, nil
}

// readHeader2 returns the copy of the LUKS2 metadata cryptsetup would use
// (lib/luks2/luks2_disk_metadata.c LUKS2_disk_hdr_read): of two valid copies
// the one with the higher seqid (the primary on a tie), otherwise whichever
// is valid. The secondary is read at the primary's hdr_size when the
// primary's checksum is right (only its JSON can then be bad); otherwise the
// primary's hdr_size cannot be trusted and every offset cryptsetup knows is
// probed.
func readHeader2(r io.ReaderAt, lim limits) (*header2, error) {
	primary, size, checksummed, perr := readCopy2(r, 0, false, lim)
	if perr != nil && !errors.Is(perr, ErrCorruptHeader) && !errors.Is(perr, errNoMagic) {
		return nil, perr // an I/O error
	}

	offsets := secondaryOffsets
	if checksummed {
		offsets = []int64{size}
	}
	var secondary *header2
	serr := errNoMagic
	for _, off := range offsets {
		h, _, _, err := readCopy2(r, off, true, lim)
		if err == nil {
			secondary, serr = h, nil
			break
		}
		if !errors.Is(err, ErrCorruptHeader) && !errors.Is(err, errNoMagic) {
			return nil, err
		}
		if !errors.Is(err, errNoMagic) {
			serr = err // remember the most telling failure
		}
	}

	switch {
	case primary != nil && secondary != nil:
		if secondary.seqID > primary.seqID {
			return secondary, nil
		}
		return primary, nil
	case primary != nil:
		return primary, nil
	case secondary != nil:
		return secondary, nil
	case errors.Is(perr, errNoMagic) && errors.Is(serr, errNoMagic):
		return nil, ErrNotLUKS
	case errors.Is(perr, errNoMagic):
		return nil, fmt.Errorf("primary header missing; secondary: %w", serr)
	case errors.Is(serr, errNoMagic):
		return nil, fmt.Errorf("%w; no valid secondary header", perr)
	}
	return nil, fmt.Errorf("%w; secondary: %v", perr, serr)
}
