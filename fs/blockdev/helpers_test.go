package blockdev

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/cipher/sector"
)

// Geometry of the test images: a 1 MiB "header" of random bytes, the
// payload, and a random trailer that the volume must never touch.
const (
	testOffset  = 1 << 20
	testPayload = 2 << 20
	testTrailer = 64 << 10
)

// geometry is one dm-crypt configuration under test.
type geometry struct {
	name       string
	cipher     string
	keyBytes   int
	sectorSize int
	ivShift    uint
	ivOffset   uint64
}

// geometries covers the sector sizes and IV schemes of the dm-crypt path:
// 512-byte sectors; 4096-byte sectors counting IVs in 512-byte units
// (dm-crypt's default) and in whole sectors (iv_large_sectors, LUKS2's
// choice); CBC-ESSIV; and plain mode's --skip.
var geometries = []geometry{
	{"xts-512", "aes-xts-plain64", 64, 512, 0, 0},
	{"xts-4096-iv512", "aes-xts-plain64", 64, 4096, 0, 0},
	{"xts-4096-ivlarge", "aes-xts-plain64", 64, 4096, 3, 0},
	{"cbc-essiv-512", "aes-cbc-essiv:sha256", 32, 512, 0, 0},
	{"xts-1024-skip", "aes-xts-plain64", 32, 1024, 1, 12345},
}

// mountGeometries are the ones the brief asks to mount.
var mountGeometries = geometries[:3]

// testVolume is a hand-built unlocked volume over an image in a temp dir,
// with an independent decoder: it encrypts and decrypts the image itself,
// sector by sector, with the IVs dm-crypt would use.
type testVolume struct {
	g       geometry
	v       *luks.Volume
	image   string
	c       sector.Cipher
	outside []byte // the image's header and trailer, as written
}

func newTestVolume(t *testing.T, g geometry) *testVolume {
	t.Helper()
	key := make([]byte, g.keyBytes)
	rand.Read(key)
	c, err := sector.New(g.cipher, key)
	if err != nil {
		t.Fatal(err)
	}
	tv := &testVolume{
		g: g,
		v: &luks.Volume{
			Cipher:     g.cipher,
			Key:        key,
			SectorSize: g.sectorSize,
			IVShift:    g.ivShift,
			IVOffset:   g.ivOffset,
			Offset:     testOffset,
			Size:       testPayload,
		},
		image: filepath.Join(t.TempDir(), "disk.img"),
		c:     c,
	}
	img := make([]byte, testOffset+testPayload+testTrailer)
	rand.Read(img)
	if err := os.WriteFile(tv.image, img, 0o600); err != nil {
		t.Fatal(err)
	}
	tv.outside = append(append([]byte{}, img[:testOffset]...), img[testOffset+testPayload:]...)
	return tv
}

// iv is the IV of sector number secNo, written as dm-crypt documents it
// rather than as layout computes it: 512-byte sectors from the start of
// the payload, shifted by iv_large_sectors, plus the skip.
func (tv *testVolume) iv(secNo int64) uint64 {
	return tv.g.ivOffset + (uint64(secNo)*uint64(tv.g.sectorSize)/512)>>tv.g.ivShift
}

// plaintext decrypts the whole payload of the image.
func (tv *testVolume) plaintext(t *testing.T) []byte {
	t.Helper()
	img, err := os.ReadFile(tv.image)
	if err != nil {
		t.Fatal(err)
	}
	pt := img[testOffset : testOffset+testPayload]
	ss := tv.g.sectorSize
	for i := 0; i < len(pt); i += ss {
		tv.c.Decrypt(pt[i:i+ss], pt[i:i+ss], tv.iv(int64(i/ss)))
	}
	return pt
}

// putPlain encrypts whole sectors of plaintext at payload offset off
// straight into the image.
func (tv *testVolume) putPlain(t *testing.T, off int64, pt []byte) {
	t.Helper()
	ss := tv.g.sectorSize
	if off%int64(ss) != 0 || len(pt)%ss != 0 {
		t.Fatalf("putPlain: %d bytes at %d are not whole sectors", len(pt), off)
	}
	ct := make([]byte, len(pt))
	for i := 0; i < len(pt); i += ss {
		tv.c.Encrypt(ct[i:i+ss], pt[i:i+ss], tv.iv((off+int64(i))/int64(ss)))
	}
	f, err := os.OpenFile(tv.image, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(ct, testOffset+off); err != nil {
		t.Fatal(err)
	}
}

// checkOutside fails if anything outside the payload changed.
func (tv *testVolume) checkOutside(t *testing.T) {
	t.Helper()
	img, err := os.ReadFile(tv.image)
	if err != nil {
		t.Fatal(err)
	}
	got := append(append([]byte{}, img[:testOffset]...), img[testOffset+testPayload:]...)
	if !bytes.Equal(got, tv.outside) {
		t.Error("bytes of the image outside the payload changed")
	}
}

// randBytes returns n random bytes.
func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// firstDiff describes where two equal-length byte slices first differ.
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// ioCase is one write (or read) at an offset and length chosen to hit the
// edges: inside one sector, straddling sectors, aligned, unaligned at
// either end, a full 1 MiB request, and the end of the volume.
type ioCase struct {
	off int64
	n   int
}

func ioCases(ss int) []ioCase {
	s := int64(ss)
	return []ioCase{
		{0, ss},                    // one aligned sector
		{1, 1},                     // one byte inside the first sector
		{s - 1, 2},                 // straddles the first boundary
		{3*s + 7, ss - 9},          // inside one sector, partial at both ends
		{5 * s, 3*ss + 100},        // aligned start, partial end
		{9*s + 300, 4*ss - 300},    // partial start, aligned end
		{13*s + 17, 7*ss + 33},     // partial at both ends, many sectors
		{64 << 10, 1 << 20},        // one full-size aligned request
		{(64 << 10) + 511, 100000}, // large and odd
		{testPayload - s - 5, ss + 5},
		{testPayload - 1, 1}, // the last byte
	}
}
