package content

import (
	"bytes"
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	e, err := NewEngine("aes-xts-plain64", 64, make([]byte, 64))
	if err != nil {
		t.Fatal(err)
	}
	h := e.NewHeader()
	var b [HeaderSize]byte
	h.Marshal(b[:])
	if !bytes.Equal(b[:4], []byte("TwCr")) || b[5] != Version || b[6] != CipherXTS || b[7] != 64 {
		t.Fatalf("header bytes % x", b)
	}
	got, err := ParseHeader(b[:])
	if err != nil || got != h {
		t.Fatalf("ParseHeader = %+v, %v; want %+v", got, err, h)
	}
	if h2 := e.NewHeader(); h2.FileID == h.FileID {
		t.Fatal("two headers with the same file id")
	}
}

func TestParseHeaderRejects(t *testing.T) {
	var good [HeaderSize]byte
	h := Header{Version: Version, CipherID: CipherCBC, KeyBytes: 32}
	h.Marshal(good[:])
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good[:]...)
		f(b)
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:HeaderSize-1], ErrCorruptHeader},
		{"empty", nil, ErrCorruptHeader},
		{"magic", mod(func(b []byte) { b[0] = 'X' }), ErrNotOurs},
		{"version", mod(func(b []byte) { b[5] = 9 }), ErrCorruptHeader},
		{"reserved", mod(func(b []byte) { b[31] = 1 }), ErrCorruptHeader},
	}
	for _, c := range cases {
		if _, err := ParseHeader(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestSizes(t *testing.T) {
	for _, plain := range []int64{0, 1, 15, 16, 17, 4095, 4096, 4097, 8191, 8192, 1 << 20, 5 << 30} {
		lower := LowerSize(plain)
		got, err := PlainSize(lower)
		if err != nil || got != plain {
			t.Errorf("PlainSize(LowerSize(%d)=%d) = %d, %v", plain, lower, got, err)
		}
		// The units tile the lower file exactly.
		var end int64 = HeaderSize
		if plain == 0 {
			end = 0
		}
		for e := int64(0); UnitSize(e, plain) > 0; e++ {
			if UnitOffset(e) != HeaderSize+e*ExtentSize {
				t.Fatalf("UnitOffset(%d)", e)
			}
			end = UnitOffset(e) + int64(UnitSize(e, plain))
		}
		if end != lower {
			t.Errorf("plain %d: units end at %d, lower size %d", plain, end, lower)
		}
	}
	for _, bad := range []int64{1, HeaderSize - 1, HeaderSize + 1, HeaderSize + TrailerSize - 1} {
		if _, err := PlainSize(bad); !errors.Is(err, ErrCorruptSize) {
			t.Errorf("PlainSize(%d) err = %v", bad, err)
		}
	}
	if n, err := PlainSize(HeaderSize); n != 0 || err != nil {
		t.Errorf("header-only file: %d, %v", n, err)
	}
}

func TestFileCipher(t *testing.T) {
	master := bytes.Repeat([]byte{7}, 64)
	for _, c := range []struct {
		spec string
		kb   int
	}{{"aes-xts-plain64", 32}, {"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 16}, {"aes-cbc-essiv:sha256", 32},
		{SpecCBC512, 16}, {SpecCBC512, 32}} {
		e, err := NewEngine(c.spec, c.kb, master)
		if err != nil {
			t.Fatal(err)
		}
		h1, h2 := e.NewHeader(), e.NewHeader()
		f1, err := e.FileCipher(&h1)
		if err != nil {
			t.Fatal(err)
		}
		f2, _ := e.FileCipher(&h2)
		plain := bytes.Repeat([]byte("twincrypt"), 500)[:ExtentSize]
		c1, c2 := make([]byte, ExtentSize), make([]byte, ExtentSize)
		f1.EncryptUnit(c1, plain, 3)
		f2.EncryptUnit(c2, plain, 3)
		if bytes.Equal(c1, c2) {
			t.Errorf("%s: two files give the same ciphertext", c.spec)
		}
		f1.EncryptUnit(c2, plain, 4)
		if bytes.Equal(c1, c2) {
			t.Errorf("%s: two extents give the same ciphertext", c.spec)
		}
		back := make([]byte, ExtentSize)
		f1.DecryptUnit(back, c1, 3)
		if !bytes.Equal(back, plain) {
			t.Errorf("%s: round trip", c.spec)
		}
		// A tail unit of 1 byte plus the trailer.
		tail := append([]byte{'x'}, make([]byte, TrailerSize)...)
		ct := make([]byte, len(tail))
		f1.EncryptUnit(ct, tail, 9)
		f1.DecryptUnit(back[:len(ct)], ct, 9)
		if !bytes.Equal(back[:len(ct)], tail) {
			t.Errorf("%s: tail round trip", c.spec)
		}
		// Holes read as zeros.
		zero := make([]byte, ExtentSize)
		f1.DecryptUnit(back, zero, 5)
		if !IsZero(back) {
			t.Errorf("%s: hole not zero", c.spec)
		}
		// A header of another cipher is refused.
		other := Header{Version: Version, CipherID: 99, KeyBytes: uint8(c.kb)}
		if _, err := e.FileCipher(&other); !errors.Is(err, ErrHeaderMismatch) {
			t.Errorf("%s: foreign header err = %v", c.spec, err)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	var good [HeaderSize]byte
	h := Header{Version: Version, CipherID: CipherXTS, KeyBytes: 64}
	h.Marshal(good[:])
	f.Add(good[:])
	f.Add([]byte("TwCr"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b)
		if err != nil {
			return
		}
		var out [HeaderSize]byte
		h.Marshal(out[:])
		if !bytes.Equal(out[:], b[:HeaderSize]) {
			t.Fatalf("accepted header does not round-trip: % x", b)
		}
	})
}

// countingCipher counts calls into the block cipher layer.
type countingCipher struct{ enc, dec int }

func (c *countingCipher) Encrypt(dst, src []byte, unit uint64) { c.enc++; copy(dst, src) }
func (c *countingCipher) Decrypt(dst, src []byte, unit uint64) { c.dec++; copy(dst, src) }
func (c *countingCipher) Spec() string                         { return "counting" }
func (c *countingCipher) KeySize() int                         { return 0 }

// TestHoleCostsNoCrypto: reading a hole (an all-zero unit) never calls
// the cipher; any non-zero unit does.
func TestHoleCostsNoCrypto(t *testing.T) {
	cc := &countingCipher{}
	f := &FileCipher{c: cc, chain: ExtentSize, perExtent: 1}
	buf := make([]byte, ExtentSize)
	f.DecryptUnit(buf, make([]byte, ExtentSize), 0)
	f.DecryptUnit(buf[:TrailerSize], make([]byte, TrailerSize), 1)
	if cc.dec != 0 {
		t.Fatalf("holes cost %d decryptions", cc.dec)
	}
	unit := make([]byte, ExtentSize)
	unit[ExtentSize-1] = 1
	f.DecryptUnit(buf, unit, 2)
	if cc.dec != 1 {
		t.Fatalf("a unit with one non-zero byte was not decrypted")
	}
}

// TestEncryptExtentsTo: encrypting out of place gives the same ciphertext
// as in place, leaves the source alone, and matches one unit at a time.
func TestEncryptExtentsTo(t *testing.T) {
	for _, c := range []struct {
		spec string
		kb   int
	}{{"aes-xts-plain64", 64}, {"aes-xts-plain64", 32}, {"aes-cbc-essiv:sha256", 32}, {"aes-cbc-essiv:sha256", 16},
		{SpecCBC512, 32}, {SpecCBC512, 16}} {
		master := bytes.Repeat([]byte{7}, 64)
		e, err := NewEngine(c.spec, c.kb, master)
		if err != nil {
			t.Fatal(err)
		}
		h := e.NewHeader()
		fc, err := e.FileCipher(&h)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 3, 64, 256} {
			src := make([]byte, n*ExtentSize)
			for i := range src {
				src[i] = byte(i*7 + i/4096)
			}
			orig := append([]byte(nil), src...)
			inPlace := append([]byte(nil), src...)
			fc.EncryptExtents(inPlace, 11)
			dst := make([]byte, len(src))
			fc.EncryptExtentsTo(dst, src, 11)
			if !bytes.Equal(dst, inPlace) {
				t.Fatalf("%s/%d, %d extents: out of place differs from in place", c.spec, c.kb, n)
			}
			if !bytes.Equal(src, orig) {
				t.Fatalf("%s/%d: EncryptExtentsTo changed its source", c.spec, c.kb)
			}
			for i := 0; i < n; i++ {
				u := make([]byte, ExtentSize)
				fc.EncryptUnit(u, orig[i*ExtentSize:(i+1)*ExtentSize], int64(11+i))
				if !bytes.Equal(u, dst[i*ExtentSize:(i+1)*ExtentSize]) {
					t.Fatalf("%s/%d: extent %d differs from EncryptUnit", c.spec, c.kb, i)
				}
			}
		}
	}
}

// TestDecryptExtents: decrypting a run of stored extents in one call gives
// what DecryptUnit gives one extent at a time, holes (all-zero extents:
// first, last, adjacent, alone) included, for both ciphers; holes cost no
// decryption.
func TestDecryptExtents(t *testing.T) {
	for _, c := range []struct {
		spec string
		kb   int
	}{{"aes-xts-plain64", 64}, {"aes-xts-plain64", 32}, {"aes-cbc-essiv:sha256", 32}, {SpecCBC512, 32}} {
		e, err := NewEngine(c.spec, c.kb, bytes.Repeat([]byte{9}, 64))
		if err != nil {
			t.Fatal(err)
		}
		h := e.NewHeader()
		fc, err := e.FileCipher(&h)
		if err != nil {
			t.Fatal(err)
		}
		for _, holes := range [][]int{nil, {0}, {5}, {0, 1, 7}, {3, 4}, {2, 6}} {
			const n = 8
			plain := make([]byte, n*ExtentSize)
			for i := range plain {
				plain[i] = byte(i*13 + i/ExtentSize)
			}
			stored := append([]byte(nil), plain...)
			fc.EncryptExtents(stored, 40)
			for _, hIdx := range holes {
				clear(stored[hIdx*ExtentSize : (hIdx+1)*ExtentSize])
			}
			want := make([]byte, len(stored))
			for i := range n {
				fc.DecryptUnit(want[i*ExtentSize:(i+1)*ExtentSize], stored[i*ExtentSize:(i+1)*ExtentSize], int64(40+i))
			}
			got := append([]byte(nil), stored...)
			fc.DecryptExtents(got, 40)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s/%d holes %v: DecryptExtents differs from DecryptUnit per extent", c.spec, c.kb, holes)
			}
		}
	}
	cc := &countingCipher{}
	f := &FileCipher{c: cc, chain: ExtentSize, perExtent: 1}
	buf := make([]byte, 3*ExtentSize)
	buf[ExtentSize] = 1
	f.DecryptExtents(buf, 0)
	if cc.dec != 1 {
		t.Fatalf("two holes and one extent cost %d decryptions, want 1", cc.dec)
	}
}

// BenchmarkFileCipher is the cost of a file's first I/O after each open:
// the per-file key (HKDF-SHA256) and its AES key schedules.
func BenchmarkFileCipher(b *testing.B) {
	for _, c := range []struct {
		spec  string
		bytes int
	}{{"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 32}, {SpecCBC512, 32}} {
		b.Run(c.spec, func(b *testing.B) {
			e, err := NewEngine(c.spec, c.bytes, make([]byte, 64))
			if err != nil {
				b.Fatal(err)
			}
			h := e.NewHeader()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.FileCipher(&h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
