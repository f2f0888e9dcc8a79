package sector

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestNISTCBCEveryImpl runs NIST SP 800-38A F.2.1-F.2.6 through cbcEncrypt
// and cbcDecrypt on every implementation (TestNISTCBCVectors covers only
// crypto/aes), out of place and in place.
//
// The four blocks of a vector are fewer than the assembly's groups of 8
// (AES-NI) or 16 (VAES), so the vector is also stretched: a ciphertext of
// the NIST blocks C1 C2 C3 C4 repeated decrypts, block by block, to P1 P2
// P3 P4 and then, wherever C1 follows C4 instead of the IV, to
// P1 xor IV xor C4 (CBC decryption of a block depends only on it and the
// block before). The expected plaintext comes from the vector by XOR
// alone, so a group or tail of the assembly that decrypts or chains wrong
// fails it whatever the other paths do. Lengths run to 37 repeats (148
// blocks): every group and tail shape of both loops.
func TestNISTCBCEveryImpl(t *testing.T) {
	vectors := readVectorFile(t, "nist-sp800-38a-cbc.txt")
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, v := range vectors {
			key, iv := v.hex(t, "Key"), v.hex(t, "IV")
			pt, ct := v.hex(t, "Plaintext"), v.hex(t, "Ciphertext")
			iv0 := binary.LittleEndian.Uint64(iv[0:8])
			iv1 := binary.LittleEndian.Uint64(iv[8:16])
			b, err := newBlock(key, im)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s %v", v.fields["Section"], im)
			for n := 16; n <= len(pt); n += 16 {
				got := make([]byte, n)
				cbcEncrypt(b, got, pt[:n], iv0, iv1)
				if !bytes.Equal(got, ct[:n]) {
					t.Fatalf("%s: encrypt %d bytes:\n got %x\nwant %x", name, n, got, ct[:n])
				}
				cbcDecrypt(b, got, ct[:n], iv0, iv1)
				if !bytes.Equal(got, pt[:n]) {
					t.Fatalf("%s: decrypt %d bytes:\n got %x\nwant %x", name, n, got, pt[:n])
				}
			}

			// The stretched vector: P1 after C4 is P1 ^ IV ^ C4.
			p1 := make([]byte, 16)
			subtle.XORBytes(p1, pt[:16], iv)
			subtle.XORBytes(p1, p1, ct[48:64])
			const repeats = 37
			longCT := bytes.Repeat(ct, repeats)
			longPT := make([]byte, 0, len(longCT))
			for r := range repeats {
				if r == 0 {
					longPT = append(longPT, pt[:16]...)
				} else {
					longPT = append(longPT, p1...)
				}
				longPT = append(longPT, pt[16:]...)
			}
			for n := 16; n <= len(longCT); n += 16 {
				got := make([]byte, n)
				cbcDecrypt(b, got, longCT[:n], iv0, iv1)
				if !bytes.Equal(got, longPT[:n]) {
					t.Fatalf("%s: stretched vector, decrypt %d blocks:\n got %x\nwant %x", name, n/16, got, longPT[:n])
				}
				buf := append([]byte(nil), longCT[:n]...)
				cbcDecrypt(b, buf, buf, iv0, iv1)
				if !bytes.Equal(buf, longPT[:n]) {
					t.Fatalf("%s: stretched vector, in-place decrypt %d blocks differs", name, n/16)
				}
				cbcEncrypt(b, buf, buf, iv0, iv1)
				if !bytes.Equal(buf, longCT[:n]) {
					t.Fatalf("%s: stretched vector, encrypt %d blocks differs", name, n/16)
				}
			}
		}
	})
}

// cbcVsStdlib decrypts and encrypts n whole blocks with the explicit-IV CBC
// of implementation im and with crypto/cipher's CBC over crypto/aes, out of
// place (src and dst at the given offsets in larger buffers, guard bytes
// around dst) and in place, and fails on any difference.
func cbcVsStdlib(t *testing.T, im impl, key, iv, data []byte, srcOff, dstOff int) {
	t.Helper()
	n := len(data)
	std, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	wantPT := make([]byte, n)
	cipher.NewCBCDecrypter(std, iv).CryptBlocks(wantPT, data)
	wantCT := make([]byte, n)
	cipher.NewCBCEncrypter(std, iv).CryptBlocks(wantCT, data)

	b, err := newBlock(key, im)
	if err != nil {
		t.Fatal(err)
	}
	iv0 := binary.LittleEndian.Uint64(iv[0:8])
	iv1 := binary.LittleEndian.Uint64(iv[8:16])
	const guard = 0xa5
	for _, op := range []struct {
		name string
		f    func(b cipher.Block, dst, src []byte, iv0, iv1 uint64)
		want []byte
	}{{"decrypt", cbcDecrypt, wantPT}, {"encrypt", cbcEncrypt, wantCT}} {
		srcBuf := make([]byte, srcOff+n+16)
		copy(srcBuf[srcOff:], data)
		dstBuf := bytes.Repeat([]byte{guard}, dstOff+n+16)
		op.f(b, dstBuf[dstOff:dstOff+n], srcBuf[srcOff:srcOff+n], iv0, iv1)
		if !bytes.Equal(dstBuf[dstOff:dstOff+n], op.want) {
			t.Fatalf("%v AES-%d %d blocks src+%d dst+%d: %s differs from crypto/cipher", im, len(key)*8, n/16, srcOff, dstOff, op.name)
		}
		if bytes.Count(dstBuf[:dstOff], []byte{guard}) != dstOff || bytes.Count(dstBuf[dstOff+n:], []byte{guard}) != 16 {
			t.Fatalf("%v %d blocks: %s wrote outside dst", im, n/16, op.name)
		}
		if !bytes.Equal(srcBuf[srcOff:srcOff+n], data) {
			t.Fatalf("%v %d blocks: %s modified src", im, n/16, op.name)
		}
		op.f(b, srcBuf[srcOff:srcOff+n], srcBuf[srcOff:srcOff+n], iv0, iv1)
		if !bytes.Equal(srcBuf[srcOff:srcOff+n], op.want) {
			t.Fatalf("%v AES-%d %d blocks off %d: in-place %s differs from crypto/cipher", im, len(key)*8, n/16, srcOff, op.name)
		}
	}
}

// FuzzCBCVsStdlib is the differential between CBC on every implementation
// the CPU has (portable, AES-NI, VAES) and crypto/cipher's CBC: random keys
// of every size, random IVs, 1..600 whole blocks (every group and tail
// shape of the 8- and 16-block loops), arbitrary alignments, in place.
//
//	go test -fuzz FuzzCBCVsStdlib ./cipher/sector
func FuzzCBCVsStdlib(f *testing.F) {
	f.Add(uint8(0), []byte("key"), uint64(1), uint16(0), uint8(0), uint8(0))
	f.Add(uint8(1), []byte("key"), uint64(2), uint16(7), uint8(1), uint8(3))
	f.Add(uint8(2), []byte("key"), uint64(3), uint16(255), uint8(0), uint8(0))
	f.Add(uint8(2), []byte{7}, uint64(4), uint16(16), uint8(9), uint8(33))
	f.Add(uint8(0), []byte{8}, uint64(5), uint16(31), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, keyIdx uint8, seed []byte, dataSeed uint64, blocks uint16, srcOff, dstOff uint8) {
		ks := []int{16, 24, 32}[int(keyIdx)%3]
		key := fuzzKey(seed, ks)
		n := 16 * (1 + int(blocks)%600)
		r := rand.New(rand.NewPCG(dataSeed, uint64(n)))
		iv, data := randBytes(r, 16), randBytes(r, n)
		for _, im := range availableImpls() {
			cbcVsStdlib(t, im, key, iv, data, int(srcOff%64), int(dstOff%64))
		}
	})
}

// TestCBCVsStdlibRandom is FuzzCBCVsStdlib's check over a fixed random
// sample, so that plain "go test" covers it too, with the 4 KiB unit and
// 512-byte sector the filesystem uses among the lengths.
func TestCBCVsStdlibRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 43))
	iters := 600
	if testing.Short() {
		iters = 60
	}
	for i := range iters {
		key := randBytes(r, []int{16, 24, 32}[r.IntN(3)])
		n := 16 * (1 + r.IntN(600))
		switch i % 8 {
		case 0:
			n = 4096
		case 1:
			n = 512
		}
		iv, data := randBytes(r, 16), randBytes(r, n)
		srcOff, dstOff := r.IntN(64), r.IntN(64)
		for _, im := range availableImpls() {
			cbcVsStdlib(t, im, key, iv, data, srcOff, dstOff)
		}
	}
}
