package ecryptfs

import (
	"bytes"
	"testing"
)

// BenchmarkReadAt reads a 4 MiB file in 128 KiB requests (the FUSE read
// size), through the extent IVs (two MD5s per extent) and AES-CBC.
func BenchmarkReadAt(b *testing.B) {
	for _, ks := range []int{16, 32} {
		b.Run(map[int]string{16: "aes128", 32: "aes256"}[ks], func(b *testing.B) {
			k, _ := DeriveKey("bench", DefaultSalt)
			kr := NewKeyring()
			kr.Add(k)
			plain := bytes.Repeat([]byte{7}, 4<<20)
			lower, _, err := EncryptFile(plain, k, DefaultSalt, WriteOptions{KeySize: ks})
			if err != nil {
				b.Fatal(err)
			}
			f, err := Open(bytes.NewReader(lower), nil, kr)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 128<<10)
			b.SetBytes(int64(len(plain)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for off := int64(0); off < int64(len(plain)); off += int64(len(buf)) {
					if _, err := f.ReadAt(buf, off); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkDecryptName decrypts one FNEK name of 20 bytes.
func BenchmarkDecryptName(b *testing.B) {
	k, _ := DeriveKey("bench", FNEKSalt)
	kr := NewKeyring()
	kr.Add(k)
	lower := EncryptName("some-file-name-20.tx", k, 16)
	for i := 0; i < b.N; i++ {
		if _, err := DecryptName(lower, kr); err != nil {
			b.Fatal(err)
		}
	}
}
