package ecryptfs

import (
	"bytes"
	"crypto/sha512"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// Names written by the real kernel module, filename cipher AES-256 (from
// the public test suite of
// github.com/iqb/ecryptfs, tests/DecryptionStreamTest.php: a mount made
// with "ecryptfs-add-passphrase --fnek" from the passphrase "test").
var kernelNames = []struct{ passphrase, lower, plain string }{
	{"test", "ECRYPTFS_FNEK_ENCRYPTED.FWayVrRYlN446EY.WUc7GBFqG9GB6qF3eRmJwLxTOkMu8UtE6MkSWHGsZE--", "test"},
	{"test", "ECRYPTFS_FNEK_ENCRYPTED.FWayVrRYlN446EY.WUc7GBFqG9GB6qF3eRmJZ7NYS7ANeS4Gfi9c34ZDTU--", "loremipsum.txt"},
}

func TestKernelNamesDecrypt(t *testing.T) {
	for _, c := range kernelNames {
		kr := NewKeyring()
		if err := kr.AddPassphrase(c.passphrase); err != nil {
			t.Fatal(err)
		}
		got, err := DecryptName(c.lower, kr)
		if err != nil {
			t.Fatalf("%s: %v", c.lower, err)
		}
		if got != c.plain {
			t.Errorf("%s: got %q, want %q", c.lower, got, c.plain)
		}
	}
}

// The kernel's name prefix is derived from the FNEK, not random, so the
// writer must reproduce the kernel's lower names exactly.
func TestKernelNamesEncrypt(t *testing.T) {
	for _, c := range kernelNames {
		k, err := DeriveKey(c.passphrase, FNEKSalt)
		if err != nil {
			t.Fatal(err)
		}
		if got := EncryptName(c.plain, k, 32); got != c.lower {
			t.Errorf("%q: got %s, want %s", c.plain, got, c.lower)
		}
	}
}

func TestWrongPassphraseName(t *testing.T) {
	kr := NewKeyring()
	if err := kr.AddPassphrase("not-test"); err != nil {
		t.Fatal(err)
	}
	_, err := DecryptName(kernelNames[0].lower, kr)
	if !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("got %v, want ErrWrongPassphrase", err)
	}
}

// DeriveKey against the definition spelled out independently: 65536
// SHA-512 rounds, signature = first 8 bytes of one more round.
func TestDeriveKeyDefinition(t *testing.T) {
	pass := "correct horse"
	h := sha512.Sum512(append(append([]byte{}, DefaultSalt...), pass...))
	for i := 0; i < 65535; i++ {
		h = sha512.Sum512(h[:])
	}
	s := sha512.Sum512(h[:])
	k, err := DeriveKey(pass, DefaultSalt)
	if err != nil {
		t.Fatal(err)
	}
	if k.FEKEK != h || !bytes.Equal(k.Sig[:], s[:8]) {
		t.Fatalf("key or signature differs from the definition")
	}
	if len(k.SigHex()) != 16 {
		t.Fatalf("signature %q is not 16 hex digits", k.SigHex())
	}
	if _, err := DeriveKey(strings.Repeat("x", 65), DefaultSalt); err == nil {
		t.Fatal("a 65-byte passphrase was accepted")
	}
}

func TestNameCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 64; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		enc := encodeName(b)
		dec, err := decodeName(enc)
		if err != nil {
			t.Fatal(err)
		}
		if len(dec) < n || !bytes.Equal(dec[:n], b) {
			t.Fatalf("n=%d: round trip lost bytes", n)
		}
	}
	if _, err := decodeName("ab/c"); err == nil {
		t.Fatal("a '/' was decoded")
	}
}

func TestNameRoundTripLengths(t *testing.T) {
	kr := NewKeyring()
	k, _ := DeriveKey("pw", FNEKSalt)
	kr.Add(k)
	for _, ks := range []int{16, 24, 32} {
		for n := 1; n <= 143; n += 7 {
			name := strings.Repeat("é", n/2) + strings.Repeat("z", n%2)
			lower := EncryptName(name, k, ks)
			if len(lower) > 255 {
				t.Fatalf("lower name of %d bytes for a %d-byte name", len(lower), len(name))
			}
			got, err := DecryptName(lower, kr)
			if err != nil || got != name {
				t.Fatalf("key %d, name %d bytes: got %q, %v", ks, len(name), got, err)
			}
		}
	}
	if got, err := DecryptName("plain-name.txt", kr); err != nil || got != "plain-name.txt" {
		t.Fatalf("plain name: %q, %v", got, err)
	}
	if _, err := DecryptName(FEKPrefix+"abc", kr); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("FEK-encrypted name: %v", err)
	}
}

func TestCorruptNames(t *testing.T) {
	kr := NewKeyring()
	kr.AddPassphrase("test")
	good := kernelNames[0].lower
	for _, lower := range []string{
		FNEKPrefix,
		FNEKPrefix + "--",
		good[:len(good)-8],
		FNEKPrefix + "Z" + good[len(FNEKPrefix)+1:], // wrong tag
	} {
		if _, err := DecryptName(lower, kr); err == nil {
			t.Errorf("%q decrypted", lower)
		}
	}
}

func TestWrappedPassphrase(t *testing.T) {
	salt := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	w, err := WrapPassphrase("0123456789abcdef0123456789abcdef", "login pw", salt)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 2+8+16+32 || w[0] != ':' || w[1] != 2 {
		t.Fatalf("version-2 layout: %d bytes, % x", len(w), w[:2])
	}
	got, err := UnwrapPassphrase(w, "login pw", nil)
	if err != nil || got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("unwrap: %q, %v", got, err)
	}
	if _, err := UnwrapPassphrase(w, "wrong", nil); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("wrong login passphrase: %v", err)
	}
	// Version 1: no header, the salt is the configured one.
	v1 := w[2+8:]
	if _, err := UnwrapPassphrase(v1, "login pw", nil); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("v1 with the default salt: %v", err)
	}
	if got, err := UnwrapPassphrase(v1, "login pw", salt); err != nil || got != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("v1 with its salt: %q, %v", got, err)
	}
	for _, bad := range [][]byte{nil, w[:20], w[:len(w)-3], append([]byte(":\x02"), bytes.Repeat([]byte{'z'}, 40)...)} {
		if _, err := UnwrapPassphrase(bad, "login pw", nil); err == nil {
			t.Errorf("%d corrupt bytes unwrapped", len(bad))
		}
	}
}

func TestFileRoundTrip(t *testing.T) {
	k, _ := DeriveKey("mount pw", DefaultSalt)
	kr := NewKeyring()
	kr.Add(k)
	r := rand.New(rand.NewPCG(3, 4))
	for _, ks := range []int{16, 24, 32} {
		for _, inX := range []bool{false, true} {
			for _, size := range []int{0, 1, 15, 4095, 4096, 4097, 3*4096 + 100} {
				plain := make([]byte, size)
				for i := range plain {
					plain[i] = byte(r.Uint32())
				}
				lower, xattr, err := EncryptFile(plain, k, DefaultSalt, WriteOptions{KeySize: ks, InXattr: inX})
				if err != nil {
					t.Fatal(err)
				}
				hdr := int64(8192)
				if inX {
					hdr = 0
				}
				if int64(len(lower)) != LowerSize(int64(size), hdr) {
					t.Fatalf("lower size %d for %d", len(lower), size)
				}
				f, err := Open(bytes.NewReader(lower), xattr, kr)
				if err != nil {
					t.Fatalf("key %d xattr %v size %d: %v", ks, inX, size, err)
				}
				got, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size()))
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("key %d xattr %v size %d: content differs (%v)", ks, inX, size, err)
				}
				// Unaligned reads across extents.
				if size > 5000 {
					p := make([]byte, 5000)
					n, err := f.ReadAt(p, 100)
					if n != 5000 || err != nil || !bytes.Equal(p, plain[100:5100]) {
						t.Fatalf("ReadAt across extents: %d, %v", n, err)
					}
				}
			}
		}
	}
}

func TestFileErrors(t *testing.T) {
	k, _ := DeriveKey("mount pw", DefaultSalt)
	kr := NewKeyring()
	kr.Add(k)
	plain := bytes.Repeat([]byte("abc"), 5000)
	lower, _, _ := EncryptFile(plain, k, DefaultSalt, WriteOptions{})

	other := NewKeyring()
	other.AddPassphrase("other")
	if _, err := Open(bytes.NewReader(lower), nil, other); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("wrong passphrase: %v", err)
	}
	// Truncated: the header opens, the missing extent is an error.
	f, err := Open(bytes.NewReader(lower[:len(lower)-100]), nil, kr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(io.NewSectionReader(f, 0, f.Size())); !errors.Is(err, ErrTruncated) {
		t.Errorf("truncated file: %v", err)
	}
	if _, err := Open(bytes.NewReader(lower[:10]), nil, kr); !errors.Is(err, ErrTruncated) {
		t.Errorf("10-byte file: %v", err)
	}
	if _, err := Open(bytes.NewReader(bytes.Repeat([]byte{7}, 9000)), nil, kr); !errors.Is(err, ErrCorrupt) {
		t.Errorf("file without marker: %v", err)
	}
	// Tag 1 (public key) is refused by name.
	pk := append([]byte{}, lower...)
	pk[26] = tag1PubKey
	if _, err := Open(bytes.NewReader(pk), nil, kr); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "public key") {
		t.Errorf("tag 1: %v", err)
	}
	// Other ciphers are refused by name.
	bf := append([]byte{}, lower...)
	bf[26+3] = cipherBlowfish
	if _, err := Open(bytes.NewReader(bf), nil, kr); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "blowfish") {
		t.Errorf("blowfish: %v", err)
	}
	// Newer format versions are refused.
	v := append([]byte{}, lower...)
	v[16] = 4
	if _, err := Open(bytes.NewReader(v), nil, kr); !errors.Is(err, ErrUnsupported) {
		t.Errorf("version 4: %v", err)
	}
}

// Every cut of a header must give an error, never a panic.
func TestHeaderCuts(t *testing.T) {
	k, _ := DeriveKey("mount pw", DefaultSalt)
	lower, _, _ := EncryptFile([]byte("x"), k, DefaultSalt, WriteOptions{})
	for n := 0; n < 26+40; n++ {
		h := append([]byte{}, lower[:n]...)
		if _, err := ParseHeader(h, true); err == nil {
			t.Errorf("a %d-byte header parsed", n)
		}
	}
}

func FuzzParseHeader(f *testing.F) {
	k, _ := DeriveKey("mount pw", DefaultSalt)
	lower, _, _ := EncryptFile([]byte("x"), k, DefaultSalt, WriteOptions{})
	f.Add(lower[:200])
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseHeader(b, true)
		ParseHeader(b, false)
	})
}

func FuzzDecryptName(f *testing.F) {
	kr := NewKeyring()
	kr.AddPassphrase("test")
	for _, c := range kernelNames {
		f.Add(c.lower)
	}
	f.Fuzz(func(t *testing.T, s string) {
		DecryptName(s, kr)
	})
}

// A wrapped-passphrase file written by ecryptfs-utils itself.
func TestUnwrapEcryptfsUtilsFile(t *testing.T) {
	data, err := os.ReadFile("testdata/wrapped-passphrase-v2")
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnwrapPassphrase(data, "login passphrase", nil)
	if err != nil || got != "0f1e2d3c4b5a69788796a5b4c3d2e1f0" {
		t.Fatalf("unwrap: %q, %v", got, err)
	}
	if _, err := UnwrapPassphrase(data, "login passphrasE", nil); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("wrong login passphrase: %v", err)
	}
}
