package speed

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"testing"

	//lint:ignore SA1019 twofish-xts-plain64 is a cipher cryptsetup offers for LUKS volumes; we measure and open it
	"golang.org/x/crypto/twofish"
	"golang.org/x/crypto/xts"

	"github.com/twincrypt/twincrypt/cipher/sector"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTwofishKnownAnswers runs the block cipher the twofish rows are built
// on through the known-answer tests of the Twofish paper (Schneier et al.,
// "Twofish: A 128-Bit Block Cipher", 1998, file ecb_tbl.txt): the fixed-key
// vectors, and the 49-step chain in which each ciphertext becomes the next
// plaintext and the previous plaintext is shifted into the key.
func TestTwofishKnownAnswers(t *testing.T) {
	fixed := []struct{ key, pt, ct string }{
		{"00000000000000000000000000000000", "00000000000000000000000000000000", "9F589F5CF6122C32B6BFEC2F2AE8C35A"},
		{"0123456789ABCDEFFEDCBA98765432100011223344556677", "00000000000000000000000000000000", "CFD1D2E5A9BE9CDF501F13B892BD2248"},
		{"0123456789ABCDEFFEDCBA987654321000112233445566778899AABBCCDDEEFF", "00000000000000000000000000000000", "37527BE0052334B89F0CFCCAE87CFA20"},
	}
	for _, v := range fixed {
		c, err := twofish.NewCipher(unhex(t, v.key))
		if err != nil {
			t.Fatal(err)
		}
		pt, want := unhex(t, v.pt), unhex(t, v.ct)
		got := make([]byte, 16)
		c.Encrypt(got, pt)
		if !bytes.Equal(got, want) {
			t.Errorf("key %s: E(%s) = %X, want %s", v.key, v.pt, got, v.ct)
		}
		c.Decrypt(got, want)
		if !bytes.Equal(got, pt) {
			t.Errorf("key %s: D(%s) = %X, want %s", v.key, v.ct, got, v.pt)
		}
	}

	chains := []struct {
		keyLen int
		ct49   string // I=49 of ecb_tbl.txt
	}{
		{16, "5D9D4EEFFA9151575524F115815A12E0"},
		{24, "E75449212BEEF9F4A390BD860A640941"},
		{32, "37FE26FF1CF66175F5DDF4C33B97A205"},
	}
	for _, ch := range chains {
		key := make([]byte, ch.keyLen)
		pt := make([]byte, 16)
		ct := make([]byte, 16)
		for i := 1; i <= 49; i++ {
			c, err := twofish.NewCipher(key)
			if err != nil {
				t.Fatal(err)
			}
			c.Encrypt(ct, pt)
			key = append(bytes.Clone(pt), key...)[:ch.keyLen]
			pt = bytes.Clone(ct)
		}
		if got := hex.EncodeToString(ct); got != hex.EncodeToString(unhex(t, ch.ct49)) {
			t.Errorf("%d-bit key chain: I=49 CT = %s, want %s", ch.keyLen*8, got, ch.ct49)
		}
	}
}

func testData(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

// TestCBCPlain64WiringMatchesSector: the CBC construction the twofish rows
// use, instantiated with AES, is byte-identical to twincrypt's
// aes-cbc-plain64 (itself checked against dm-crypt and OpenSSL in
// cipher/sector). So with Twofish it is twofish-cbc-plain64.
func TestCBCPlain64WiringMatchesSector(t *testing.T) {
	for _, keyLen := range []int{16, 32} {
		key := testData(keyLen, 0x5a)
		b, err := aes.NewCipher(key)
		if err != nil {
			t.Fatal(err)
		}
		ours, err := newCBCPlain64(b)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := sector.New("aes-cbc-plain64", key)
		if err != nil {
			t.Fatal(err)
		}
		checkSameUnits(t, "aes-cbc-plain64", ours, ref)
	}
}

// TestXTSWiringMatchesSector: golang.org/x/crypto/xts with AES, as the
// twofish-xts rows use it with Twofish, is byte-identical to twincrypt's
// aes-xts-plain64, i.e. the sector number is dm-crypt's plain64 tweak and
// the key halves are in dm-crypt's order.
func TestXTSWiringMatchesSector(t *testing.T) {
	for _, keyLen := range []int{32, 64} {
		key := testData(keyLen, 0xa5)
		ours, err := xts.NewCipher(aes.NewCipher, key)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := sector.New("aes-xts-plain64", key)
		if err != nil {
			t.Fatal(err)
		}
		checkSameUnits(t, "aes-xts-plain64", ours, ref)
	}
}

func checkSameUnits(t *testing.T, name string, ours, ref UnitCipher) {
	t.Helper()
	for _, size := range []int{16, 512, 4096} {
		for _, unit := range []uint64{0, 1, 8, 0x0102030405060708, 1<<64 - 1} {
			pt := testData(size, byte(unit))
			a, b := make([]byte, size), make([]byte, size)
			ours.Encrypt(a, pt, unit)
			ref.Encrypt(b, pt, unit)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s size %d unit %#x: encryption differs from cipher/sector", name, size, unit)
			}
			ours.Decrypt(a, b, unit)
			if !bytes.Equal(a, pt) {
				t.Fatalf("%s size %d unit %#x: decryption does not round-trip", name, size, unit)
			}
		}
	}
}

// refXTS is IEEE 1619 XTS written out plainly over any 16-byte block
// cipher, for full blocks: T = E_K2(LE64(unit) || 0^64), then for each block
// C = E_K1(P xor T) xor T and T = T * alpha in GF(2^128).
func refXTS(k1, k2 cipher.Block, pt []byte, unit uint64) []byte {
	var tw [16]byte
	binary.LittleEndian.PutUint64(tw[:8], unit)
	k2.Encrypt(tw[:], tw[:])
	out := make([]byte, len(pt))
	var x [16]byte
	for off := 0; off < len(pt); off += 16 {
		for i := range 16 {
			x[i] = pt[off+i] ^ tw[i]
		}
		k1.Encrypt(x[:], x[:])
		for i := range 16 {
			out[off+i] = x[i] ^ tw[i]
		}
		carry := tw[15] >> 7
		for i := 15; i > 0; i-- {
			tw[i] = tw[i]<<1 | tw[i-1]>>7
		}
		tw[0] = tw[0]<<1 ^ 0x87*carry
	}
	return out
}

// refCBC is CBC written out plainly with the plain64 IV.
func refCBC(b cipher.Block, pt []byte, unit uint64) []byte {
	var prev [16]byte
	binary.LittleEndian.PutUint64(prev[:8], unit)
	out := make([]byte, len(pt))
	for off := 0; off < len(pt); off += 16 {
		for i := range 16 {
			prev[i] ^= pt[off+i]
		}
		b.Encrypt(prev[:], prev[:])
		copy(out[off:], prev[:])
	}
	return out
}

// TestTwofishXTSAgainstReference checks twofish-xts-plain64 (both key
// sizes) against the plain reference above built on the Twofish block
// cipher, and that decryption round-trips.
func TestTwofishXTSAgainstReference(t *testing.T) {
	for _, keyLen := range []int{32, 64} {
		key := testData(keyLen, 0x3c)
		c, err := newTwofishXTS(key)
		if err != nil {
			t.Fatal(err)
		}
		k1, _ := twofish.NewCipher(key[:keyLen/2])
		k2, _ := twofish.NewCipher(key[keyLen/2:])
		for _, unit := range []uint64{0, 8, 123456789, 1<<64 - 1} {
			pt := testData(4096, byte(unit>>3))
			got := make([]byte, len(pt))
			c.Encrypt(got, pt, unit)
			if want := refXTS(k1, k2, pt, unit); !bytes.Equal(got, want) {
				t.Fatalf("key %d bytes unit %d: twofish-xts differs from the reference", keyLen, unit)
			}
			if bytes.Equal(got, pt) {
				t.Fatal("ciphertext equals plaintext")
			}
			back := make([]byte, len(pt))
			c.Decrypt(back, got, unit)
			if !bytes.Equal(back, pt) {
				t.Fatalf("key %d bytes unit %d: twofish-xts does not round-trip", keyLen, unit)
			}
			// In place, as the benchmark runs it.
			buf := bytes.Clone(pt)
			c.Encrypt(buf, buf, unit)
			if !bytes.Equal(buf, got) {
				t.Fatal("in-place encryption differs")
			}
		}
	}
	if _, err := newTwofishXTS(make([]byte, 16)); err == nil {
		t.Error("newTwofishXTS accepted a 16-byte key")
	}
}

// TestTwofishCBCAgainstReference does the same for twofish-cbc-plain64
// with 128-, 192- and 256-bit keys, and checks that every sector starts a
// new chain (two sectors differ although their plaintexts are equal).
func TestTwofishCBCAgainstReference(t *testing.T) {
	for _, keyLen := range []int{16, 24, 32} {
		key := testData(keyLen, 0xc3)
		c, err := newTwofishCBC(key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := twofish.NewCipher(key)
		pt := testData(4096, 1)
		var prev []byte
		for _, unit := range []uint64{0, 8, 16, 1<<64 - 1} {
			got := make([]byte, len(pt))
			c.Encrypt(got, pt, unit)
			if want := refCBC(b, pt, unit); !bytes.Equal(got, want) {
				t.Fatalf("key %d bytes unit %d: twofish-cbc differs from the reference", keyLen, unit)
			}
			if bytes.Equal(got[:16], prev) {
				t.Fatalf("unit %d: same first block as the previous unit: IV not applied", unit)
			}
			prev = got[:16]
			back := bytes.Clone(got)
			c.Decrypt(back, back, unit)
			if !bytes.Equal(back, pt) {
				t.Fatalf("key %d bytes unit %d: twofish-cbc does not round-trip", keyLen, unit)
			}
		}
	}
	if _, err := newTwofishCBC(make([]byte, 20)); err == nil {
		t.Error("newTwofishCBC accepted a 20-byte key")
	}
}

// TestCBCPlain64NoAlloc: the CBC hot loop must not allocate, or the
// benchmark would measure the garbage collector.
func TestCBCPlain64NoAlloc(t *testing.T) {
	c, err := newTwofishCBC(make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n := testing.AllocsPerRun(20, func() {
		c.Encrypt(buf, buf, 3)
		c.Decrypt(buf, buf, 3)
	})
	if n != 0 {
		t.Errorf("%v allocations per sector", n)
	}
}
