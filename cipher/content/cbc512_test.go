package content

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/keys"
)

// refCBC512 encrypts one unit as FORMAT.md §3.2 describes aes-cbc in
// 512-byte sectors (config version 2), with nothing but the standard
// library: the unit is cut into 512-byte sectors, a last piece shorter
// than 16 bytes staying with the sector before it; sector i of extent e
// is CBC-CS2 with IV AES-256_{SHA-256(key)}(LE64(8e+i) ‖ 0⁸).
func refCBC512(key, unit []byte, extentNo int64) []byte {
	blk, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	salt := sha256.Sum256(key)
	essiv, _ := aes.NewCipher(salt[:])
	n := len(unit)
	var bounds []int // end of each sector
	if n <= 512 {
		bounds = []int{n}
	} else {
		for end := 512; end <= n; end += 512 {
			bounds = append(bounds, end)
		}
		switch rest := n % 512; {
		case rest >= 16:
			bounds = append(bounds, n)
		case rest > 0:
			bounds[len(bounds)-1] = n
		}
	}
	out := make([]byte, n)
	start := 0
	for i, end := range bounds {
		iv := make([]byte, 16)
		binary.LittleEndian.PutUint64(iv, uint64(extentNo)*8+uint64(i))
		essiv.Encrypt(iv, iv)
		refCBCCS2(blk, iv, out[start:end], unit[start:end])
		start = end
	}
	return out
}

// refCBCCS2 is CBC-CS2 (NIST SP 800-38A Addendum): CBC over the message
// with its partial last block zero-padded, then, if there was a partial
// block, the last full ciphertext block before the truncated one.
func refCBCCS2(b cipher.Block, iv, dst, src []byte) {
	d := len(src) % 16
	if d == 0 {
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(dst, src)
		return
	}
	full := len(src) - d
	padded := make([]byte, full+16)
	copy(padded, src)
	ct := make([]byte, len(padded))
	cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, padded)
	copy(dst, ct[:full-16])
	copy(dst[full-16:], ct[full:])
	copy(dst[full:], ct[full-16:full-16+d])
}

// TestCBC512Layout compares the aes-cbc 512-byte-sector content cipher
// with refCBC512 on every way a unit can be cut (one short sector, whole
// sectors, a rest of 16 bytes or more, a rest under 16 that joins the
// sector before), at two extent numbers and both key sizes, and checks
// the decryption of each.
func TestCBC512Layout(t *testing.T) {
	master := make([]byte, keys.MasterKeySize)
	for i := range master {
		master[i] = byte(i)
	}
	for _, kb := range []int{16, 32} {
		e, err := NewEngine(SpecCBC512, kb, master)
		if err != nil {
			t.Fatal(err)
		}
		h := Header{Version: Version, CipherID: CipherCBC512, KeyBytes: uint8(kb)}
		for i := range h.FileID {
			h.FileID[i] = byte(0xa0 + i)
		}
		fc, err := e.FileCipher(&h)
		if err != nil {
			t.Fatal(err)
		}
		key := keys.Derive(master, "content "+SpecCBC512, h.FileID[:], kb)
		for _, n := range []int{16, 17, 31, 100, 511, 512, 513, 527, 528, 529, 1000, 1024, 1039, 1040, 2056, 4095, 4096, 4097, 4111} {
			for _, ext := range []int64{0, 12345} {
				plain := make([]byte, n)
				for i := range plain {
					plain[i] = byte(i*31 + n)
				}
				got := make([]byte, n)
				fc.EncryptUnit(got, plain, ext)
				if want := refCBC512(key, plain, ext); !bytes.Equal(got, want) {
					t.Fatalf("key %d bytes, unit of %d bytes, extent %d: ciphertext differs from the reference", kb, n, ext)
				}
				back := make([]byte, n)
				fc.DecryptUnit(back, got, ext)
				if !bytes.Equal(back, plain) {
					t.Fatalf("key %d bytes, unit of %d bytes, extent %d: round trip", kb, n, ext)
				}
			}
		}
	}
}

// TestCBC512KnownAnswer freezes the ciphertext of a fixed volume key, file
// id and plaintext (a full extent and a tail unit of 1000 bytes plus the
// trailer): the per-file key derivation and the sector layout of aes-cbc
// in config version 2 must never change (the digest was computed with
// refCBC512, which shares no code with the cipher under test).
func TestCBC512KnownAnswer(t *testing.T) {
	master := make([]byte, keys.MasterKeySize)
	for i := range master {
		master[i] = byte(i)
	}
	e, err := NewEngine(SpecCBC512, 32, master)
	if err != nil {
		t.Fatal(err)
	}
	h := Header{Version: Version, CipherID: CipherCBC512, KeyBytes: 32}
	copy(h.FileID[:], "twincrypt-kat-id")
	fc, err := e.FileCipher(&h)
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, ExtentSize+1000+TrailerSize)
	for i := range plain[:ExtentSize+1000] {
		plain[i] = byte(i * 7)
	}
	ct := make([]byte, len(plain))
	fc.EncryptExtentsTo(ct[:ExtentSize], plain[:ExtentSize], 3)
	fc.EncryptUnit(ct[ExtentSize:], plain[ExtentSize:], 4)
	sum := sha256.Sum256(ct)
	const want = "27230f5771a625c31336b6609a84dfe184d54a3a9ff9d1b77d028509c6dda00b"
	if got := hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ciphertext SHA-256 %s, want %s", got, want)
	}
}
