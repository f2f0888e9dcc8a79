package names

import (
	"bytes"
	"crypto/aes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/rfjakob/eme"
)

func testKey() []byte {
	k := make([]byte, KeySize)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

func testIV(b byte) []byte { return bytes.Repeat([]byte{b}, DirIVSize) }

func newCipher(t testing.TB) *Cipher {
	t.Helper()
	c, err := New(testKey())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// double multiplies a block by x in GF(2^128) with the byte order of EME-32
// and IEEE P1619: byte 0 holds the least significant bits.
func double(b [16]byte) [16]byte {
	var out [16]byte
	carry := b[15] >> 7
	for i := 15; i > 0; i-- {
		out[i] = b[i]<<1 | b[i-1]>>7
	}
	out[0] = b[0]<<1 ^ carry*0x87
	return out
}

func xor16(a, b [16]byte) (c [16]byte) {
	for i := range c {
		c[i] = a[i] ^ b[i]
	}
	return c
}

// refEME is EME written from Halevi and Rogaway, "A Parallelizable
// Enciphering Mode" (2003), figure 2, independently of github.com/rfjakob/eme.
// decrypt selects the inverse: the same mode over AES^-1, except that L is
// always derived with the forward cipher.
func refEME(key, tweak, in []byte, decrypt bool) []byte {
	block, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	e := func(x [16]byte) (y [16]byte) {
		if decrypt {
			block.Decrypt(y[:], x[:])
		} else {
			block.Encrypt(y[:], x[:])
		}
		return y
	}
	var T [16]byte
	copy(T[:], tweak)
	m := len(in) / 16
	P := make([][16]byte, m)
	for j := range P {
		copy(P[j][:], in[16*j:])
	}
	// L = 2 * E_K(0); the j-th block uses 2^(j-1) * L (j from 1).
	var eZero [16]byte
	block.Encrypt(eZero[:], eZero[:])
	L := make([][16]byte, m)
	L[0] = double(eZero)
	for j := 1; j < m; j++ {
		L[j] = double(L[j-1])
	}
	PPP := make([][16]byte, m)
	for j := range P {
		PPP[j] = e(xor16(P[j], L[j]))
	}
	MP := xor16(PPP[0], T)
	for j := 1; j < m; j++ {
		MP = xor16(MP, PPP[j])
	}
	MC := e(MP)
	M := xor16(MP, MC)
	CCC := make([][16]byte, m)
	for j := 1; j < m; j++ {
		M = double(M)
		CCC[j] = xor16(PPP[j], M)
	}
	CCC[0] = xor16(MC, T)
	for j := 1; j < m; j++ {
		CCC[0] = xor16(CCC[0], CCC[j])
	}
	out := make([]byte, 0, len(in))
	for j := range CCC {
		c := xor16(e(CCC[j]), L[j])
		out = append(out, c[:]...)
	}
	return out
}

// TestRefEMEAgainstEME32 validates the reference implementation against
// Halevi's EME-32 vectors, so that agreement between refEME and the
// library below means agreement with the published algorithm.
func TestRefEMEAgainstEME32(t *testing.T) {
	data, err := os.ReadFile("testdata/eme32.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		KeyHex     string `json:"key_hex"`
		TweakHex   string `json:"tweak_hex"`
		InputHex   string `json:"input_hex"`
		EncryptHex string `json:"encrypt_hex"`
		DecryptHex string `json:"decrypt_hex"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	key, _ := hex.DecodeString(v.KeyHex)
	tweak, _ := hex.DecodeString(v.TweakHex)
	in, _ := hex.DecodeString(v.InputHex)
	enc, _ := hex.DecodeString(v.EncryptHex)
	dec, _ := hex.DecodeString(v.DecryptHex)
	if len(in) != 512 || len(enc) != 512 || len(dec) != 512 {
		t.Fatal("bad testdata")
	}
	if got := refEME(key, tweak, in, false); !bytes.Equal(got, enc) {
		t.Errorf("refEME encrypt: %x...", got[:16])
	}
	if got := refEME(key, tweak, in, true); !bytes.Equal(got, dec) {
		t.Errorf("refEME decrypt: %x...", got[:16])
	}
}

// TestMatchesRefEME checks the full name encryption against refEME plus an
// independent padding and encoding, for every padded length a name can have.
func TestMatchesRefEME(t *testing.T) {
	c := newCipher(t)
	for n := 1; n <= MaxPlainName; n++ {
		name := strings.Repeat(string(rune('a'+n%26)), n)
		iv := testIV(byte(n))
		got, err := c.Encrypt(name, iv)
		if err != nil {
			t.Fatal(err)
		}
		p := n % 16
		padded := append([]byte(name), bytes.Repeat([]byte{byte(16 - p)}, 16-p)...)
		want := base64.RawURLEncoding.EncodeToString(refEME(testKey(), iv, padded, false))
		if got != want {
			t.Fatalf("len %d: got %s want %s", n, got, want)
		}
	}
}

// TestKAT pins the format. The values were computed once with this code and
// agree with refEME (checked in TestMatchesRefEME and again here); they must
// never change, or existing volumes become unreadable.
func TestKAT(t *testing.T) {
	c := newCipher(t)
	iv := make([]byte, DirIVSize)
	for i := range iv {
		iv[i] = byte(0xf0 + i)
	}
	for _, k := range []struct{ plain, enc string }{
		{"a", "0gkJh8hIrWRA1dA9dZFzGg"},
		{"hello.txt", "jZ3LuY8hjx2fP5I_NhLh0Q"},
		{"exactly 16 bytes", "rAzwMH7Xg-Bbs8ZIEI8IIz56M5w5no27pqFCyMrtyP4"},
		{"Grüße, 世界 🌍", "Yqh33lfkx2z7sKMu7XsFi9o_7ic8qfXygfBMynpr97o"},
	} {
		got, err := c.Encrypt(k.plain, iv)
		if err != nil {
			t.Fatal(err)
		}
		if got != k.enc {
			t.Errorf("Encrypt(%q) = %s, want %s", k.plain, got, k.enc)
		}
		ref := base64.RawURLEncoding.EncodeToString(refEME(testKey(), iv, pad([]byte(k.plain)), false))
		if ref != k.enc {
			t.Errorf("refEME(%q) = %s, want %s", k.plain, ref, k.enc)
		}
		if back, err := c.Decrypt(k.enc, iv); err != nil || back != k.plain {
			t.Errorf("Decrypt(%s) = %q, %v", k.enc, back, err)
		}
	}
}

// plainName returns a valid name of length n that uses many byte values,
// including non-UTF-8 bytes, spaces and dots.
func plainName(n int, seed byte) string {
	b := make([]byte, n)
	for i := range b {
		v := byte(i*37) + seed
		if v == 0 || v == '/' {
			v = '.'
		}
		b[i] = v
	}
	if s := string(b); s == "." || s == ".." {
		return "x"
	}
	return string(b)
}

func TestRoundTripAllLengths(t *testing.T) {
	c := newCipher(t)
	iv := testIV(7)
	for n := 1; n <= MaxPlainName; n++ {
		for _, seed := range []byte{1, 128} {
			name := plainName(n, seed)
			enc, err := c.Encrypt(name, iv)
			if err != nil {
				t.Fatalf("len %d: %v", n, err)
			}
			wantLen := base64.RawURLEncoding.EncodedLen((n/16 + 1) * 16)
			if len(enc) != wantLen {
				t.Fatalf("len %d: encrypted to %d chars, want %d", n, len(enc), wantLen)
			}
			if strings.ContainsAny(enc, "./=\x00") {
				t.Fatalf("len %d: encrypted name %q has a forbidden character", n, enc)
			}
			dec, err := c.Decrypt(enc, iv)
			if err != nil || dec != name {
				t.Fatalf("len %d: Decrypt = %q, %v", n, dec, err)
			}
		}
	}
	// The boundary the brief calls out: 255 bytes -> 256 -> 342 chars.
	enc, _ := c.Encrypt(strings.Repeat("x", 255), iv)
	if len(enc) != 342 || len(enc) != MaxEncryptedName {
		t.Fatalf("255-byte name: %d chars", len(enc))
	}
	if _, long := Lower(enc); !long {
		t.Fatal("255-byte name not stored as long name")
	}
	// 175 bytes is the longest name stored as is.
	enc, _ = c.Encrypt(strings.Repeat("x", 175), iv)
	enc2, _ := c.Encrypt(strings.Repeat("x", 176), iv)
	if _, long := Lower(enc); long {
		t.Errorf("175-byte name is long (%d chars)", len(enc))
	}
	if _, long := Lower(enc2); !long {
		t.Errorf("176-byte name is not long (%d chars)", len(enc2))
	}
}

func TestDeterminismAndDirIV(t *testing.T) {
	c := newCipher(t)
	a1, _ := c.Encrypt("document.pdf", testIV(1))
	a2, _ := c.Encrypt("document.pdf", testIV(1))
	if a1 != a2 {
		t.Fatal("not deterministic within a directory")
	}
	c2 := newCipher(t)
	if a3, _ := c2.Encrypt("document.pdf", testIV(1)); a3 != a1 {
		t.Fatal("not deterministic across Cipher instances")
	}
	iv := testIV(1)
	iv[15] ^= 1
	if b, _ := c.Encrypt("document.pdf", iv); b == a1 {
		t.Fatal("dirIV does not change the encryption")
	}
	if _, err := c.Decrypt(a1, iv); err == nil {
		// With overwhelming probability the wrong IV breaks the
		// padding; a pass would mean the IV is ignored.
		t.Fatal("decrypted under another dirIV")
	}
	// Wide-block property: names with a common 16-byte prefix share no
	// ciphertext prefix.
	x, _ := c.Encrypt("common-prefix-16+A", testIV(2))
	y, _ := c.Encrypt("common-prefix-16+B", testIV(2))
	if x[:8] == y[:8] {
		t.Fatal("shared prefix visible in ciphertext")
	}
	other := testKey()
	other[0] ^= 1
	c3, _ := New(other)
	if z, _ := c3.Encrypt("document.pdf", testIV(1)); z == a1 {
		t.Fatal("key does not change the encryption")
	}
}

func TestNewKeySize(t *testing.T) {
	for _, n := range []int{0, 16, 24, 31, 33, 64} {
		if _, err := New(make([]byte, n)); err == nil {
			t.Errorf("key of %d bytes accepted", n)
		}
	}
}

func TestEncryptRefuses(t *testing.T) {
	c := newCipher(t)
	for _, name := range []string{"", ".", "..", "/", "a/b", "a/", "/a", "\x00", "a\x00b"} {
		if _, err := c.Encrypt(name, testIV(0)); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Encrypt(%q) = %v, want ErrInvalidName", name, err)
		}
	}
	if _, err := c.Encrypt(strings.Repeat("x", 256), testIV(0)); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("256 bytes: %v", err)
	}
	if _, err := c.Encrypt(strings.Repeat("x", 100000), testIV(0)); !errors.Is(err, ErrNameTooLong) {
		t.Errorf("100000 bytes: %v", err)
	}
	// Names that merely look special are fine.
	for _, name := range []string{"...", ".a", "a.", " ", "\n", "\xff\xfe", DirIVFile, "twincrypt.conf"} {
		if _, err := c.Encrypt(name, testIV(0)); err != nil {
			t.Errorf("Encrypt(%q) = %v", name, err)
		}
	}
	for _, iv := range [][]byte{nil, make([]byte, 15), make([]byte, 17)} {
		if _, err := c.Encrypt("a", iv); !errors.Is(err, ErrDirIV) {
			t.Errorf("iv len %d: %v", len(iv), err)
		}
		if _, err := c.Decrypt("AAAAAAAAAAAAAAAAAAAAAA", iv); !errors.Is(err, ErrDirIV) {
			t.Errorf("iv len %d: %v", len(iv), err)
		}
	}
}

// rawEncrypt enciphers arbitrary bytes the way Encrypt would, but without
// padding or checks, to build lower names Encrypt refuses to make.
func rawEncrypt(t *testing.T, data, iv []byte) string {
	t.Helper()
	block, err := aes.NewCipher(testKey())
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(eme.New(block).Encrypt(iv, data))
}

func TestDecryptBadNames(t *testing.T) {
	c := newCipher(t)
	iv := testIV(3)
	good, _ := c.Encrypt("fine", iv) // 22 chars
	cases := map[string]string{
		"empty":            "",
		"dot":              ".",
		"dotdot":           "..",
		"diriv file":       DirIVFile,
		"long entry":       LongPrefix + strings.Repeat("A", 43),
		"newline inside":   good[:10] + "\n" + good[10:],
		"CR inside":        good[:10] + "\r" + good[10:],
		"trailing newline": good + "\n",
		"padding char":     good + "==",
		"std alphabet":     strings.Repeat("+", 22),
		"slash":            strings.Repeat("/", 22),
		"space":            good[:21] + " ",
		"trailing bits":    good[:21] + nonCanonical(good[21]),
		"15 bytes":         base64.RawURLEncoding.EncodeToString(make([]byte, 15)),
		"17 bytes":         base64.RawURLEncoding.EncodeToString(make([]byte, 17)),
		"one char":         "A",
		"too long":         strings.Repeat("A", MaxEncryptedName+1),
		"huge":             strings.Repeat("A", 1<<20),
		"272 bytes":        base64.RawURLEncoding.EncodeToString(make([]byte, 272)),
		"truncated":        good[:len(good)-1],
		"raw empty pad":    rawEncrypt(t, bytes.Repeat([]byte{16}, 16), iv),
		"raw dot":          rawEncrypt(t, pad([]byte(".")), iv),
		"raw dotdot":       rawEncrypt(t, pad([]byte("..")), iv),
		"raw slash":        rawEncrypt(t, pad([]byte("a/b")), iv),
		"raw NUL":          rawEncrypt(t, pad([]byte("a\x00")), iv),
		"raw pad 0":        rawEncrypt(t, append(bytes.Repeat([]byte{'a'}, 15), 0), iv),
		"raw pad 17":       rawEncrypt(t, append(bytes.Repeat([]byte{'a'}, 15), 17), iv),
		"raw pad mixed":    rawEncrypt(t, append(bytes.Repeat([]byte{'a'}, 13), 2, 3, 3), iv),
		"raw no pad":       rawEncrypt(t, bytes.Repeat([]byte{'a'}, 16), iv),
		"raw 256 no pad":   rawEncrypt(t, bytes.Repeat([]byte{'a'}, 256), iv),
	}
	for name, cName := range cases {
		if _, err := c.Decrypt(cName, iv); !errors.Is(err, ErrBadName) {
			t.Errorf("%s: Decrypt(%.40q) = %v, want ErrBadName", name, cName, err)
		}
	}
	// Every single-character change of a valid name is rejected or
	// decrypts to a different name (EME has no integrity, but never
	// aliases).
	for i := 0; i < len(good); i++ {
		for _, ch := range "AgZ-_09" {
			bad := good[:i] + string(ch) + good[i+1:]
			if bad == good {
				continue
			}
			if dec, err := c.Decrypt(bad, iv); err == nil && dec == "fine" {
				t.Fatalf("%s also decrypts to %q", bad, dec)
			}
		}
	}
}

// nonCanonical returns another base64url character that decodes to the
// same bits as c in the last position of a 22-character string (which
// carries only 2 significant bits).
func nonCanonical(c byte) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, c)
	return string(alphabet[i|1])
}

func TestLower(t *testing.T) {
	short := strings.Repeat("A", MaxLowerName)
	if l, long := Lower(short); long || l != short {
		t.Fatalf("Lower(255 chars) = %q, %v", l, long)
	}
	cName := strings.Repeat("B", MaxLowerName+1)
	l, long := Lower(cName)
	sum := sha256.Sum256([]byte(cName))
	if want := LongPrefix + base64.RawURLEncoding.EncodeToString(sum[:]); !long || l != want {
		t.Fatalf("Lower(256 chars) = %q, %v; want %q", l, long, want)
	}
	// Pinned: base64url(sha256("B"*256)) computed with Python hashlib.
	if l != LongPrefix+"sBAuPl887TtL0enRoI7zXF_OIWsCS-6jmcSlG5Xs6Oc" {
		t.Fatalf("Lower(256 B) = %q", l)
	}
	if !IsLong(l) || IsSidecar(l) {
		t.Fatal("IsLong/IsSidecar wrong for long entry")
	}
	if Sidecar(l) != l+LongSuffix || !IsSidecar(Sidecar(l)) || IsLong(Sidecar(l)) {
		t.Fatal("IsLong/IsSidecar wrong for sidecar")
	}
	if len(Sidecar(l)) > MaxLowerName {
		t.Fatal("sidecar name too long")
	}
	hash := strings.TrimPrefix(l, LongPrefix)
	for _, s := range []string{
		"", LongPrefix, LongSuffix, DirIVFile, "twincrypt.conf", short,
		LongPrefix + hash[:42],
		LongPrefix + hash + "A",
		LongPrefix + hash[:42] + ".",
		LongPrefix + hash[:42] + nonCanonical(hash[42]),
		"x" + LongPrefix + hash,
		LongPrefix + hash + LongSuffix + LongSuffix,
		LongPrefix + hash + ".nam",
	} {
		if IsLong(s) || IsSidecar(s) {
			t.Errorf("%q classified as long name or sidecar", s)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	c := newCipher(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 1; i < 200; i++ {
				name := plainName(i%MaxPlainName+1, byte(g))
				enc, err := c.Encrypt(name, testIV(byte(g)))
				if err != nil {
					t.Error(err)
					return
				}
				if dec, err := c.Decrypt(enc, testIV(byte(g))); err != nil || dec != name {
					t.Errorf("round trip failed: %v", err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

// FuzzDecrypt checks that Decrypt never panics, accepts only valid names,
// and that every accepted lower name is the one Encrypt produces (no two
// lower names decrypt to the same plaintext).
func FuzzDecrypt(f *testing.F) {
	c, err := New(testKey())
	if err != nil {
		f.Fatal(err)
	}
	iv := testIV(9)
	for _, s := range []string{"a", "hello.txt", strings.Repeat("x", 255), "..."} {
		enc, _ := c.Encrypt(s, iv)
		f.Add(enc)
		f.Add(enc + "\n")
		f.Add(enc[:len(enc)-1])
	}
	f.Add("")
	f.Add(".")
	f.Add(strings.Repeat("A", 22))
	f.Add(strings.Repeat("_", 343))
	f.Add(LongPrefix + strings.Repeat("A", 43))
	f.Fuzz(func(t *testing.T, cName string) {
		plain, err := c.Decrypt(cName, iv)
		if err != nil {
			if !errors.Is(err, ErrBadName) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if CheckPlain(plain) != nil {
			t.Fatalf("Decrypt returned invalid name %q", plain)
		}
		enc, err := c.Encrypt(plain, iv)
		if err != nil || enc != cName {
			t.Fatalf("%q decrypts to %q, which encrypts to %q (%v)", cName, plain, enc, err)
		}
	})
}

func TestLongName(t *testing.T) {
	c, err := New(testKey())
	if err != nil {
		t.Fatal(err)
	}
	iv := testIV(3)
	enc, err := c.Encrypt(strings.Repeat("l", 250), iv)
	if err != nil {
		t.Fatal(err)
	}
	lower, long := Lower(enc)
	if !long {
		t.Fatalf("a 250-byte name gave a short lower name %q", lower)
	}
	got, err := LongName(lower, []byte(enc))
	if err != nil || got != enc {
		t.Fatalf("LongName(own sidecar) = %q, %v", got, err)
	}
	other, _ := c.Encrypt(strings.Repeat("m", 250), iv)
	otherLower, _ := Lower(other)
	for name, tc := range map[string]struct {
		lower   string
		sidecar []byte
	}{
		"swapped sidecar":  {lower, []byte(other)},
		"truncated":        {lower, []byte(enc[:len(enc)-1])},
		"trailing newline": {lower, []byte(enc + "\n")},
		"empty":            {lower, nil},
		"short name":       {lower, []byte("abc")},
		"huge":             {lower, bytes.Repeat([]byte("A"), 1<<20)},
		"not a long entry": {"plain", []byte(enc)},
		"sidecar as entry": {Sidecar(otherLower), []byte(other)},
	} {
		if _, err := LongName(tc.lower, tc.sidecar); !errors.Is(err, ErrBadSidecar) {
			t.Errorf("%s: err = %v, want ErrBadSidecar", name, err)
		}
	}
}

// FuzzLongName: whatever an attacker puts in a long-name entry's name and
// its sidecar, LongName does not panic, accepts only a sidecar that hashes
// to the entry, and the result decrypts (if at all) to a valid name.
func FuzzLongName(f *testing.F) {
	c, err := New(testKey())
	if err != nil {
		f.Fatal(err)
	}
	iv := testIV(5)
	for _, n := range []int{190, 200, 255} {
		enc, _ := c.Encrypt(strings.Repeat("z", n), iv)
		lower, _ := Lower(enc)
		f.Add(lower, []byte(enc))
		f.Add(lower, []byte(enc[1:]))
		f.Add(lower+LongSuffix, []byte(enc))
	}
	f.Add(LongPrefix, []byte{})
	f.Add("x", []byte("/\x00"))
	f.Fuzz(func(t *testing.T, lower string, sidecar []byte) {
		cName, err := LongName(lower, sidecar)
		if err != nil {
			if !errors.Is(err, ErrBadSidecar) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if l, long := Lower(cName); !long || l != lower {
			t.Fatalf("accepted sidecar %q for %q, which hashes to %q", cName, lower, l)
		}
		if plain, err := c.Decrypt(cName, iv); err == nil && CheckPlain(plain) != nil {
			t.Fatalf("long name decrypts to invalid %q", plain)
		}
	})
}
