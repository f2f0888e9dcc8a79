package sector

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha512"
	"testing"

	"golang.org/x/crypto/xts"
)

// fuzzKey stretches the fuzzer's key seed to n bytes, so that every input
// yields a valid key and the fuzzer spends its effort on data and units.
func fuzzKey(seed []byte, n int) []byte {
	h := sha512.Sum512(seed)
	return h[:n]
}

// FuzzXTSRoundTrip: for any data of at least 16 bytes, any unit and either
// key size, Decrypt inverts Encrypt, in place and out of place give the same
// result, and the output equals the byte-wise IEEE 1619 reference.
//
//	go test -fuzz FuzzXTSRoundTrip ./cipher/sector
func FuzzXTSRoundTrip(f *testing.F) {
	f.Add([]byte("k"), bytes.Repeat([]byte{0}, 16), uint64(0), false)
	f.Add([]byte("k"), bytes.Repeat([]byte{1}, 17), uint64(0x123456789a), false)
	f.Add([]byte("key"), bytes.Repeat([]byte{2}, 31), uint64(1<<63), true)
	f.Add([]byte("key"), bytes.Repeat([]byte{3}, 512), ^uint64(0), true)
	f.Add([]byte{}, bytes.Repeat([]byte{4}, 4097), uint64(7), false)
	f.Fuzz(func(t *testing.T, seed, data []byte, unit uint64, aes256 bool) {
		if len(data) < 16 {
			t.Skip()
		}
		ks := 32
		if aes256 {
			ks = 64
		}
		key := fuzzKey(seed, ks)
		for _, spec := range []string{"aes-xts-plain64", "aes-xts-plain"} {
			c := mustNew(t, spec, key)
			ct := make([]byte, len(data))
			c.Encrypt(ct, data, unit)
			if want := refCipher(spec, key, unit, data, true); !bytes.Equal(ct, want) {
				t.Fatalf("%s: Encrypt differs from reference", spec)
			}
			pt := make([]byte, len(data))
			c.Decrypt(pt, ct, unit)
			if !bytes.Equal(pt, data) {
				t.Fatalf("%s: Decrypt(Encrypt(p)) != p", spec)
			}
			buf := append([]byte(nil), data...)
			c.Encrypt(buf, buf, unit)
			if !bytes.Equal(buf, ct) {
				t.Fatalf("%s: in-place Encrypt differs", spec)
			}
			c.Decrypt(buf, buf, unit)
			if !bytes.Equal(buf, data) {
				t.Fatalf("%s: in-place Decrypt differs", spec)
			}
		}
	})
}

// FuzzDifferential compares every spec with an independent implementation:
// golang.org/x/crypto/xts or crypto/cipher CBC for block-aligned units, the
// standards-derived references in helpers_test.go for stealing lengths.
//
//	go test -fuzz FuzzDifferential ./cipher/sector
func FuzzDifferential(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte("seed"), bytes.Repeat([]byte{9}, 32), uint64(0))
	f.Add(uint8(1), uint8(1), []byte("seed"), bytes.Repeat([]byte{9}, 48), uint64(1<<32+1))
	f.Add(uint8(2), uint8(2), []byte("seed"), bytes.Repeat([]byte{9}, 512), uint64(12345))
	f.Add(uint8(3), uint8(0), []byte("seed"), bytes.Repeat([]byte{9}, 17), uint64(99))
	f.Add(uint8(4), uint8(1), []byte("seed"), bytes.Repeat([]byte{9}, 4095), ^uint64(0))
	f.Fuzz(func(t *testing.T, specIdx, keyIdx uint8, seed, data []byte, unit uint64) {
		if len(data) < 16 {
			t.Skip()
		}
		s := allSpecs[int(specIdx)%len(allSpecs)]
		ks := s.keySizes[int(keyIdx)%len(s.keySizes)]
		key := fuzzKey(seed, ks)
		c := mustNew(t, s.spec, key)
		got := make([]byte, len(data))
		c.Encrypt(got, data, unit)

		iv := refIV(s.spec, key, unit)
		var want []byte
		switch {
		case len(data)%16 != 0:
			want = refCipher(s.spec, key, unit, data, true)
		case s.spec == "aes-xts-plain64" || s.spec == "aes-xts-plain":
			x, err := xts.NewCipher(aes.NewCipher, key)
			if err != nil {
				t.Fatal(err)
			}
			want = make([]byte, len(data))
			x.Encrypt(want, data, le64(iv[:8]))
		default:
			b, _ := aes.NewCipher(key)
			want = make([]byte, len(data))
			cipher.NewCBCEncrypter(b, iv).CryptBlocks(want, data)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s key %d bytes unit %#x len %d: Encrypt differs\n got %x\nwant %x", s.spec, ks, unit, len(data), got, want)
		}
		back := make([]byte, len(data))
		c.Decrypt(back, got, unit)
		if !bytes.Equal(back, data) {
			t.Fatalf("%s: Decrypt(Encrypt(p)) != p", s.spec)
		}
	})
}
