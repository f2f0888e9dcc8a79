package sector

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// allSpecs lists every specification New accepts with the key sizes it takes.
var allSpecs = []struct {
	spec     string
	keySizes []int
}{
	{"aes-xts-plain64", []int{32, 64}},
	{"aes-xts-plain", []int{32, 64}},
	{"aes-cbc-essiv:sha256", []int{16, 24, 32}},
	{"aes-cbc-plain64", []int{16, 24, 32}},
	{"aes-cbc-plain", []int{16, 24, 32}},
}

// vectorBlock is one record of a testdata file: "Name = value" lines,
// separated from the next record by a blank line. '#' starts a comment line.
type vectorBlock struct {
	line   int // line number of the first field, for messages
	fields map[string]string
}

func (b vectorBlock) hex(t *testing.T, name string) []byte {
	t.Helper()
	v, ok := b.fields[name]
	if !ok {
		t.Fatalf("record at line %d has no %q", b.line, name)
	}
	out, err := hex.DecodeString(v)
	if err != nil {
		t.Fatalf("record at line %d: %s: %v", b.line, name, err)
	}
	return out
}

func readVectorFile(t *testing.T, name string) []vectorBlock {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []vectorBlock
	var cur *vectorBlock
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			cur = nil
			continue
		case strings.HasPrefix(line, "#"):
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s:%d: not a Name = value line", name, ln)
		}
		if cur == nil {
			blocks = append(blocks, vectorBlock{line: ln, fields: map[string]string{}})
			cur = &blocks[len(blocks)-1]
		}
		cur.fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("%s: no records", name)
	}
	return blocks
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func mustNew(tb testing.TB, spec string, key []byte) Cipher {
	tb.Helper()
	c, err := New(spec, key)
	if err != nil {
		tb.Fatalf("New(%q, %d-byte key): %v", spec, len(key), err)
	}
	return c
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// swapLastBlocks swaps the last two 16-byte blocks of a block-aligned buffer
// (turns CBC-CS3 output into CS2 / plain CBC output and back).
func swapLastBlocks(b []byte) []byte {
	out := append([]byte(nil), b...)
	n := len(out)
	var tmp [16]byte
	copy(tmp[:], out[n-32:n-16])
	copy(out[n-32:n-16], out[n-16:])
	copy(out[n-16:], tmp[:])
	return out
}

// ivBlock is the 16-byte little-endian IV/tweak block of dm-crypt's plain64
// generator, or plain's when plain32 is set.
func ivBlock(unit uint64, plain32 bool) []byte {
	b := make([]byte, 16)
	if plain32 {
		binary.LittleEndian.PutUint32(b, uint32(unit))
	} else {
		binary.LittleEndian.PutUint64(b, unit)
	}
	return b
}

// refIV computes the IV the way the dm-crypt documentation describes it,
// without sharing code with the package (used by the differential tests).
func refIV(spec string, key []byte, unit uint64) []byte {
	switch spec {
	case "aes-cbc-plain", "aes-xts-plain":
		return ivBlock(unit, true)
	case "aes-cbc-plain64", "aes-xts-plain64":
		return ivBlock(unit, false)
	case "aes-cbc-essiv:sha256":
		salt := sha256.Sum256(key)
		b, err := aes.NewCipher(salt[:])
		if err != nil {
			panic(err)
		}
		iv := ivBlock(unit, false)
		b.Encrypt(iv, iv)
		return iv
	}
	panic("refIV: unknown spec " + spec)
}

// refMulAlpha is the byte-oriented tweak update of IEEE 1619-2007 section
// 5.2 / Annex C, independent of the package's 64-bit version.
func refMulAlpha(t []byte) {
	var cin byte
	for j := 0; j < 16; j++ {
		cout := t[j] >> 7
		t[j] = t[j]<<1 | cin
		cin = cout
	}
	if cin != 0 {
		t[0] ^= 0x87
	}
}

// refXTS is a deliberately naive XTS-AES with ciphertext stealing, written
// from IEEE 1619-2007 sections 5.3 and 5.4 (the Annex C reference code shape):
// it computes the list of tweaks up front and allocates freely.
func refXTS(key, tweak, data []byte, encrypt bool) []byte {
	k1, err := aes.NewCipher(key[:len(key)/2])
	if err != nil {
		panic(err)
	}
	k2, err := aes.NewCipher(key[len(key)/2:])
	if err != nil {
		panic(err)
	}
	m, b := len(data)/16, len(data)%16
	tw := make([][]byte, m+1)
	tw[0] = make([]byte, 16)
	k2.Encrypt(tw[0], tweak)
	for j := 1; j <= m; j++ {
		tw[j] = append([]byte(nil), tw[j-1]...)
		refMulAlpha(tw[j])
	}
	blk := func(in, t []byte) []byte {
		x := make([]byte, 16)
		for i := range x {
			x[i] = in[i] ^ t[i]
		}
		if encrypt {
			k1.Encrypt(x, x)
		} else {
			k1.Decrypt(x, x)
		}
		for i := range x {
			x[i] ^= t[i]
		}
		return x
	}
	out := make([]byte, 0, len(data))
	if b == 0 {
		for q := 0; q < m; q++ {
			out = append(out, blk(data[16*q:16*q+16], tw[q])...)
		}
		return out
	}
	for q := 0; q < m-1; q++ {
		out = append(out, blk(data[16*q:16*q+16], tw[q])...)
	}
	first, second := tw[m-1], tw[m] // decryption swaps them (5.4.2)
	if !encrypt {
		first, second = second, first
	}
	cc := blk(data[16*(m-1):16*m], first)
	pp := append(append([]byte(nil), data[16*m:]...), cc[b:]...)
	out = append(out, blk(pp, second)...)
	return append(out, cc[:b]...)
}

// refCBCCS2 is CBC-CS2 written from the NIST SP 800-38A Addendum text with
// crypto/cipher's CBC mode: pad, CBC, then reorder (encrypt); or undo it
// (decrypt).
func refCBCCS2(b cipher.Block, iv, data []byte, encrypt bool) []byte {
	n := len(data)
	d := n % 16
	if d == 0 {
		out := make([]byte, n)
		if encrypt {
			cipher.NewCBCEncrypter(b, iv).CryptBlocks(out, data)
		} else {
			cipher.NewCBCDecrypter(b, iv).CryptBlocks(out, data)
		}
		return out
	}
	full := n - d // bytes in complete blocks, the last of which is C_{n-1}'s slot
	if encrypt {
		padded := make([]byte, full+16)
		copy(padded, data)
		ct := make([]byte, len(padded))
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(ct, padded)
		// C_1 .. C_{n-2} || C_n || MSB_d(C_{n-1})
		out := append([]byte(nil), ct[:full-16]...)
		out = append(out, ct[full:]...)
		return append(out, ct[full-16:full-16+d]...)
	}
	// Decryption per the Addendum: Z = D(C_n); C_{n-1} = C_{n-1}* || LSB_{16-d}(Z);
	// P_n* = MSB_d(Z) xor C_{n-1}*; then CBC-decrypt C_1 .. C_{n-1}.
	cn := data[full-16 : full]
	cstar := data[full:]
	z := make([]byte, 16)
	b.Decrypt(z, cn)
	cn1 := append(append([]byte(nil), cstar...), z[d:]...)
	pn := make([]byte, d)
	for i := range pn {
		pn[i] = z[i] ^ cstar[i]
	}
	ct := append(append([]byte(nil), data[:full-16]...), cn1...)
	out := make([]byte, len(ct))
	cipher.NewCBCDecrypter(b, iv).CryptBlocks(out, ct)
	return append(out, pn...)
}

// refCipher encrypts or decrypts one unit with the reference implementations
// above, for any spec.
func refCipher(spec string, key []byte, unit uint64, data []byte, encrypt bool) []byte {
	iv := refIV(spec, key, unit)
	if strings.HasPrefix(spec, "aes-xts-") {
		return refXTS(key, iv, data, encrypt)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	return refCBCCS2(b, iv, data, encrypt)
}
