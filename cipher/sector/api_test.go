package sector

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestNewSpecAndKeySize(t *testing.T) {
	for _, s := range allSpecs {
		for _, ks := range s.keySizes {
			c := mustNew(t, s.spec, make([]byte, ks))
			if c.Spec() != s.spec {
				t.Errorf("Spec() = %q, want %q", c.Spec(), s.spec)
			}
			if c.KeySize() != ks {
				t.Errorf("%s: KeySize() = %d, want %d", s.spec, c.KeySize(), ks)
			}
		}
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		spec    string
		keySize int
		want    error
	}{
		{"aes-xts-plain64", 0, ErrKeySize},
		{"aes-xts-plain64", 16, ErrKeySize},
		{"aes-xts-plain64", 48, ErrKeySize}, // AES-192 halves: not in IEEE 1619
		{"aes-xts-plain64", 33, ErrKeySize},
		{"aes-xts-plain64", 128, ErrKeySize},
		{"aes-xts-plain", 24, ErrKeySize},
		{"aes-cbc-essiv:sha256", 0, ErrKeySize},
		{"aes-cbc-essiv:sha256", 8, ErrKeySize},
		{"aes-cbc-essiv:sha256", 64, ErrKeySize},
		{"aes-cbc-plain64", 15, ErrKeySize},
		{"aes-cbc-plain64", 31, ErrKeySize},
		{"aes-cbc-plain", 33, ErrKeySize},
		{"", 32, ErrUnsupported},
		{"aes", 32, ErrUnsupported},
		{"AES-XTS-PLAIN64", 32, ErrUnsupported},
		{"aes-xts-essiv:sha256", 32, ErrUnsupported},
		{"aes-cbc-essiv:sha1", 32, ErrUnsupported},
		{"aes-cbc-benbi", 32, ErrUnsupported},
		{"twofish-xts-plain64", 32, ErrUnsupported},
		{"aes-ecb", 16, ErrUnsupported},
		{"aes-xts-plain64 ", 32, ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.spec, tt.keySize), func(t *testing.T) {
			c, err := New(tt.spec, make([]byte, tt.keySize))
			if !errors.Is(err, tt.want) {
				t.Fatalf("New(%q, %d bytes) error = %v, want %v", tt.spec, tt.keySize, err, tt.want)
			}
			if c != nil {
				t.Fatalf("New returned a cipher with an error")
			}
		})
	}
}

// TestNewDoesNotRetainKey checks that changing the key slice after New does
// not change the cipher.
func TestNewDoesNotRetainKey(t *testing.T) {
	for _, s := range allSpecs {
		key := make([]byte, s.keySizes[0])
		c := mustNew(t, s.spec, key)
		pt := make([]byte, 32)
		before := make([]byte, 32)
		c.Encrypt(before, pt, 1)
		for i := range key {
			key[i] = 0xff
		}
		after := make([]byte, 32)
		c.Encrypt(after, pt, 1)
		if string(before) != string(after) {
			t.Errorf("%s: cipher changed when the caller's key slice changed", s.spec)
		}
	}
}

func TestPanics(t *testing.T) {
	buf := make([]byte, 64)
	tests := []struct {
		name     string
		dst, src []byte
		want     string
	}{
		{"empty", buf[:0], buf[:0], "shorter than one 16-byte block"},
		{"1 byte", buf[:1], buf[32:33], "shorter than one 16-byte block"},
		{"15 bytes", buf[:15], buf[32:47], "shorter than one 16-byte block"},
		{"short dst", buf[:16], buf[32:49], "dst (16 bytes) is shorter than src (17 bytes)"},
		{"overlap", buf[1:33], buf[0:32], "overlap"},
		{"overlap2", buf[0:32], buf[16:48], "overlap"},
	}
	for _, s := range allSpecs {
		c := mustNew(t, s.spec, make([]byte, s.keySizes[0]))
		for _, tt := range tests {
			for _, op := range []string{"encrypt", "decrypt"} {
				t.Run(s.spec+"/"+tt.name+"/"+op, func(t *testing.T) {
					defer func() {
						r := recover()
						if r == nil {
							t.Fatal("no panic")
						}
						msg := fmt.Sprint(r)
						if !strings.HasPrefix(msg, "sector: ") || !strings.Contains(msg, tt.want) {
							t.Fatalf("panic %q, want one containing %q", msg, tt.want)
						}
					}()
					if op == "encrypt" {
						c.Encrypt(tt.dst, tt.src, 0)
					} else {
						c.Decrypt(tt.dst, tt.src, 0)
					}
				})
			}
		}
	}
}

// TestDstLongerThanSrc: only the first len(src) bytes of dst are written, and
// dst may extend past src in memory when they start at the same address.
func TestDstLongerThanSrc(t *testing.T) {
	for _, s := range allSpecs {
		c := mustNew(t, s.spec, make([]byte, s.keySizes[0]))
		buf := make([]byte, 64)
		for i := range buf {
			buf[i] = byte(i)
		}
		want := make([]byte, 40)
		c.Encrypt(want, buf[:40], 3)
		c.Encrypt(buf, buf[:40], 3) // same start, dst longer: allowed
		if string(buf[:40]) != string(want) {
			t.Errorf("%s: in place with longer dst differs", s.spec)
		}
		for i := 40; i < 64; i++ {
			if buf[i] != byte(i) {
				t.Fatalf("%s: byte %d beyond len(src) was modified", s.spec, i)
			}
		}
	}
}
