package luks

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"hash"
	"testing"
)

func TestAFRoundTrip(t *testing.T) {
	for _, h := range []func() hash.Hash{sha1.New, sha256.New, sha512.New} {
		for _, keyLen := range []int{16, 20, 32, 33, 64} {
			for _, stripes := range []int{1, 2, 4000} {
				key := bytes.Repeat([]byte{byte(keyLen)}, keyLen)
				key[0] = 0xa5
				split := afSplit(key, stripes, h)
				if len(split) != afSize(keyLen, stripes) || len(split)%512 != 0 {
					t.Fatalf("split of %d bytes", len(split))
				}
				if got := afMerge(split, keyLen, stripes, h); !bytes.Equal(got, key) {
					t.Fatalf("merge(split(key)) != key for %d bytes, %d stripes", keyLen, stripes)
				}
				// Every stripe matters: damage one and the key is gone.
				if stripes > 1 {
					split[keyLen*(stripes/2)] ^= 1
					if got := afMerge(split, keyLen, stripes, h); bytes.Equal(got, key) {
						t.Fatalf("a damaged stripe still merges to the key")
					}
				}
			}
		}
	}
}

// TestDiffuseShortBlock pins diffuse on a length that is not a multiple of
// the hash size: the last block is hashed short (with its index) and
// truncated, as af.c does.
func TestDiffuseShortBlock(t *testing.T) {
	buf := make([]byte, 40) // one SHA-256 block and 8 bytes
	for i := range buf {
		buf[i] = byte(i)
	}
	h0 := sha256.Sum256(append([]byte{0, 0, 0, 0}, buf[:32]...))
	h1 := sha256.Sum256(append([]byte{0, 0, 0, 1}, buf[32:]...))
	diffuse(buf, sha256.New())
	if !bytes.Equal(buf[:32], h0[:]) || !bytes.Equal(buf[32:], h1[:8]) {
		t.Fatalf("diffuse = %x", buf)
	}
}
