package sector

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// These tests pin every implementation (the portable Go one, which runs on
// every machine, and whichever assembly paths this CPU supports) to the
// published vectors and to each other. The tests in the other files use New,
// that is the fastest implementation only.

func mustNewImpl(tb testing.TB, spec string, key []byte, im impl) Cipher {
	tb.Helper()
	c, err := newCipher(spec, key, im)
	if err != nil {
		tb.Fatalf("newCipher(%q, %d-byte key, %v): %v", spec, len(key), im, err)
	}
	return c
}

// forEachImpl runs f as a subtest for every impl the CPU supports.
func forEachImpl(t *testing.T, f func(t *testing.T, im impl)) {
	for _, im := range availableImpls() {
		t.Run(im.String(), func(t *testing.T) { f(t, im) })
	}
}

func TestImpls(t *testing.T) {
	t.Logf("best implementation on this CPU: %v; testing %v", bestImpl, availableImpls())
	if availableImpls()[0] != implGeneric {
		t.Fatal("the generic implementation must always be tested")
	}
}

// TestSubByte checks the computed S-box: a permutation with the FIPS 197
// figure 7 entries spot-checked.
func TestSubByte(t *testing.T) {
	known := map[byte]byte{0x00: 0x63, 0x01: 0x7c, 0x53: 0xed, 0x10: 0xca, 0xff: 0x16, 0x9a: 0xb8, 0xc5: 0xa6}
	seen := make(map[byte]bool)
	for i := range 256 {
		s := subByte(byte(i))
		if want, ok := known[byte(i)]; ok && s != want {
			t.Errorf("S(%#02x) = %#02x, want %#02x", i, s, want)
		}
		if seen[s] {
			t.Fatalf("S-box is not a permutation: %#02x repeats", s)
		}
		seen[s] = true
	}
}

// TestKeyExpansionSteps checks the key expansion's SubWord and
// InvMixColumns (the AES-instruction versions where the CPU has them)
// against the constant-time Go versions, for every byte value in every
// position and random columns.
func TestKeyExpansionSteps(t *testing.T) {
	for i := range 256 {
		for pos := range 4 {
			var w [4]byte
			w[pos] = byte(i)
			w[(pos+1)%4] = byte(i * 7)
			x := binary.LittleEndian.Uint32(w[:])
			want := subWordGeneric(w)
			if got := subWord(x); got != binary.LittleEndian.Uint32(want[:]) {
				t.Fatalf("subWord(%x) = %x, want %x", w, got, want)
			}
		}
	}
	r := rand.New(rand.NewPCG(29, 30))
	for range 1000 {
		src := randBytes(r, 16)
		got, want := make([]byte, 16), make([]byte, 16)
		invMixColumns(got, src)
		invMixColumnsGeneric(want, src)
		if !bytes.Equal(got, want) {
			t.Fatalf("invMixColumns(%x) = %x, want %x", src, got, want)
		}
	}
}

// TestExpandKeyFIPS197 checks the key expansion against FIPS 197 appendix
// A.1-A.3 (the last four words of each expansion) and the first and last
// round keys against the cipher examples of appendix C.
func TestExpandKeyFIPS197(t *testing.T) {
	tests := []struct {
		key, last string
		rounds    int
	}{
		{"2b7e151628aed2a6abf7158809cf4f3c", "d014f9a8c9ee2589e13f0cc8b6630ca6", 10},
		{"8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b", "e98ba06f448c773c8ecc720401002202", 12},
		{"603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4", "fe4890d1e6188d0b046df344706c631e", 14},
	}
	for _, tt := range tests {
		var s aesSchedule
		s.expand(mustHex(tt.key))
		if s.rounds != tt.rounds {
			t.Fatalf("key %s: %d rounds, want %d", tt.key, s.rounds, tt.rounds)
		}
		got := hex.EncodeToString(s.enc[16*s.rounds : 16*s.rounds+16])
		if got != tt.last {
			t.Errorf("key %s: last round key %s, want %s", tt.key, got, tt.last)
		}
		if !bytes.Equal(s.enc[:16], mustHex(tt.key)[:16]) {
			t.Errorf("key %s: round key 0 is not the key", tt.key)
		}
		// The decryption schedule starts with the last and ends with the
		// first encryption round key (no InvMixColumns on those two).
		if !bytes.Equal(s.dec[:16], s.enc[16*s.rounds:16*s.rounds+16]) || !bytes.Equal(s.dec[16*s.rounds:16*s.rounds+16], s.enc[:16]) {
			t.Errorf("key %s: decryption schedule ends wrong", tt.key)
		}
	}
}

// TestAsmBlockVsCryptoAES checks the assembly single-block AES (and with it
// the key expansion, both schedules and every key size) against crypto/aes,
// including the FIPS 197 appendix C examples.
func TestAsmBlockVsCryptoAES(t *testing.T) {
	if bestImpl == implGeneric {
		t.Skip("no assembly on this CPU")
	}
	r := rand.New(rand.NewPCG(21, 22))
	fipsPT := mustHex("00112233445566778899aabbccddeeff")
	fips := map[int]string{
		16: "69c4e0d86a7b0430d8cdb78070b4c55a",
		24: "dda97ca4864cdfe06eaf70a0ec0d7191",
		32: "8ea2b7ca516745bfeafc49904b496089",
	}
	for _, ks := range []int{16, 24, 32} {
		key := mustHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")[:ks]
		b, err := newBlock(key, bestImpl)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 16)
		b.Encrypt(got, fipsPT)
		if hex.EncodeToString(got) != fips[ks] {
			t.Errorf("AES-%d FIPS 197 C: %x, want %s", ks*8, got, fips[ks])
		}
		b.Decrypt(got, got)
		if !bytes.Equal(got, fipsPT) {
			t.Errorf("AES-%d FIPS 197 C: decrypt does not invert", ks*8)
		}
		for range 200 {
			key := randBytes(r, ks)
			pt := randBytes(r, 16)
			ref, _ := aes.NewCipher(key)
			b, _ := newBlock(key, bestImpl)
			want, got := make([]byte, 16), make([]byte, 16)
			ref.Encrypt(want, pt)
			b.Encrypt(got, pt)
			if !bytes.Equal(got, want) {
				t.Fatalf("AES-%d key %x: Encrypt %x, crypto/aes %x", ks*8, key, got, want)
			}
			ref.Decrypt(want, pt)
			b.Decrypt(got, pt)
			if !bytes.Equal(got, want) {
				t.Fatalf("AES-%d key %x: Decrypt %x, crypto/aes %x", ks*8, key, got, want)
			}
		}
	}
}

// TestImplVectors runs the IEEE 1619, OpenSSL-generated dm-crypt and RFC
// 3962 vectors through every implementation.
func TestImplVectors(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, v := range readVectorFile(t, "ieee1619-xts.txt") {
			key := append(v.hex(t, "Key1"), v.hex(t, "Key2")...)
			ptx, ctx := v.hex(t, "PTX"), v.hex(t, "CTX")
			unit, err := strconv.ParseUint(v.fields["Unit"], 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			checkVector(t, "IEEE 1619 vector "+v.fields["Vector"], mustNewImpl(t, "aes-xts-plain64", key, im), unit, ptx, ctx)
		}
		for _, v := range readVectorFile(t, "dmcrypt-openssl-kat.txt") {
			unit, err := strconv.ParseUint(v.fields["Unit"], 0, 64)
			if err != nil {
				t.Fatal(err)
			}
			spec := v.fields["Spec"]
			checkVector(t, spec, mustNewImpl(t, spec, v.hex(t, "Key"), im), unit, v.hex(t, "Plaintext"), v.hex(t, "Ciphertext"))
		}
		blocks := readVectorFile(t, "rfc3962-cbc-cts.txt")
		c := mustNewImpl(t, "aes-cbc-plain64", blocks[0].hex(t, "Key"), im) // unit 0: zero IV
		for _, v := range blocks[1:] {
			in, want := v.hex(t, "Input"), v.hex(t, "Output")
			if len(in)%16 == 0 {
				want = swapLastBlocks(want)
			}
			checkVector(t, fmt.Sprintf("RFC 3962 %d bytes", len(in)), c, 0, in, want)
		}
	})
}

// checkVector checks one known answer out of place and in place, both ways.
func checkVector(t *testing.T, name string, c Cipher, unit uint64, pt, ct []byte) {
	t.Helper()
	got := make([]byte, len(pt))
	c.Encrypt(got, pt, unit)
	if !bytes.Equal(got, ct) {
		t.Fatalf("%s: Encrypt:\n got %x\nwant %x", name, got, ct)
	}
	c.Decrypt(got, ct, unit)
	if !bytes.Equal(got, pt) {
		t.Fatalf("%s: Decrypt:\n got %x\nwant %x", name, got, pt)
	}
	buf := append([]byte(nil), pt...)
	c.Encrypt(buf, buf, unit)
	if !bytes.Equal(buf, ct) {
		t.Fatalf("%s: in-place Encrypt differs", name)
	}
	c.Decrypt(buf, buf, unit)
	if !bytes.Equal(buf, pt) {
		t.Fatalf("%s: in-place Decrypt differs", name)
	}
}

// TestImplEveryLength compares every implementation with the reference
// implementations of helpers_test.go for every length up to 600 bytes (all
// group and tail shapes of the 8- and 16-block loops, several times over)
// and lengths around 4 and 8 KiB.
func TestImplEveryLength(t *testing.T) {
	var lengths []int
	for n := 16; n <= 600; n++ {
		lengths = append(lengths, n)
	}
	for _, base := range []int{4096, 8192} {
		for d := -33; d <= 33; d++ {
			lengths = append(lengths, base+d)
		}
	}
	forEachImpl(t, func(t *testing.T, im impl) {
		r := rand.New(rand.NewPCG(23, uint64(im)))
		for _, s := range allSpecs {
			for _, ks := range s.keySizes {
				key := randBytes(r, ks)
				c := mustNewImpl(t, s.spec, key, im)
				for _, n := range lengths {
					pt := randBytes(r, n)
					unit := r.Uint64()
					want := refCipher(s.spec, key, unit, pt, true)
					got := make([]byte, n)
					c.Encrypt(got, pt, unit)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s/%d len %d unit %#x: Encrypt differs from reference", s.spec, ks, n, unit)
					}
					c.Decrypt(got, want, unit)
					if !bytes.Equal(got, pt) {
						t.Fatalf("%s/%d len %d unit %#x: Decrypt differs", s.spec, ks, n, unit)
					}
				}
			}
		}
	})
}

// fastVsGeneric encrypts and decrypts one unit with the generic
// implementation and with every assembly one, out of place with src and dst
// at the given offsets inside larger buffers and in place, and fails on any
// difference or on a write outside the unit.
func fastVsGeneric(t *testing.T, spec string, key []byte, unit uint64, data []byte, srcOff, dstOff int) {
	t.Helper()
	n := len(data)
	gen := mustNewImpl(t, spec, key, implGeneric)
	wantCT := make([]byte, n)
	gen.Encrypt(wantCT, data, unit)
	wantPT := make([]byte, n)
	gen.Decrypt(wantPT, data, unit) // decrypting arbitrary data is as good a test
	const guard = 0x5c
	for _, im := range availableImpls()[1:] {
		c := mustNewImpl(t, spec, key, im)
		for _, op := range []struct {
			name string
			f    func(dst, src []byte, unit uint64)
			want []byte
		}{{"Encrypt", c.Encrypt, wantCT}, {"Decrypt", c.Decrypt, wantPT}} {
			srcBuf := make([]byte, srcOff+n+7)
			copy(srcBuf[srcOff:], data)
			dstBuf := bytes.Repeat([]byte{guard}, dstOff+n+7)
			op.f(dstBuf[dstOff:dstOff+n], srcBuf[srcOff:srcOff+n], unit)
			if !bytes.Equal(dstBuf[dstOff:dstOff+n], op.want) {
				t.Fatalf("%s %v key %d unit %#x len %d src+%d dst+%d: %s differs from generic", spec, im, len(key), unit, n, srcOff, dstOff, op.name)
			}
			if bytes.Count(dstBuf[:dstOff], []byte{guard}) != dstOff || bytes.Count(dstBuf[dstOff+n:], []byte{guard}) != 7 {
				t.Fatalf("%s %v len %d: %s wrote outside dst", spec, im, n, op.name)
			}
			if !bytes.Equal(srcBuf[srcOff:srcOff+n], data) {
				t.Fatalf("%s %v len %d: %s modified src", spec, im, n, op.name)
			}
			// In place, at the source offset.
			op.f(srcBuf[srcOff:srcOff+n], srcBuf[srcOff:srcOff+n], unit)
			if !bytes.Equal(srcBuf[srcOff:srcOff+n], op.want) {
				t.Fatalf("%s %v key %d unit %#x len %d off %d: in-place %s differs from generic", spec, im, len(key), unit, n, srcOff, op.name)
			}
		}
	}
}

// FuzzFastVsGeneric is the differential between the assembly and the
// portable implementation over random keys (every spec and key size), unit
// numbers, lengths 16..8192 and alignments (src and dst at arbitrary offsets
// in larger buffers, and in place).
//
//	go test -fuzz FuzzFastVsGeneric ./cipher/sector
func FuzzFastVsGeneric(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte("k"), uint64(0), uint16(0), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(0), uint8(1), []byte("k"), uint64(1<<63), uint16(4080), uint8(1), uint8(3), uint64(2))
	f.Add(uint8(1), uint8(0), []byte("key"), ^uint64(0), uint16(255), uint8(7), uint8(0), uint64(3))
	f.Add(uint8(2), uint8(2), []byte("key"), uint64(42), uint16(4096), uint8(9), uint8(15), uint64(4))
	f.Add(uint8(3), uint8(1), []byte{}, uint64(1<<32), uint16(1), uint8(0), uint8(1), uint64(5))
	f.Add(uint8(4), uint8(0), []byte{1}, uint64(7), uint16(8176), uint8(31), uint8(2), uint64(6))
	f.Add(uint8(3), uint8(2), []byte{2}, uint64(9), uint16(270), uint8(4), uint8(4), uint64(7))
	f.Fuzz(func(t *testing.T, specIdx, keyIdx uint8, seed []byte, unit uint64, length uint16, srcOff, dstOff uint8, dataSeed uint64) {
		if bestImpl == implGeneric {
			t.Skip("no assembly on this CPU")
		}
		s := allSpecs[int(specIdx)%len(allSpecs)]
		key := fuzzKey(seed, s.keySizes[int(keyIdx)%len(s.keySizes)])
		n := 16 + int(length)%(8192-16+1)
		data := randBytes(rand.New(rand.NewPCG(dataSeed, uint64(n))), n)
		fastVsGeneric(t, s.spec, key, unit, data, int(srcOff%64), int(dstOff%64))
	})
}

// TestFastVsGenericRandom is FuzzFastVsGeneric's check over a fixed random
// sample, so that plain "go test" covers it too.
func TestFastVsGenericRandom(t *testing.T) {
	if bestImpl == implGeneric {
		t.Skip("no assembly on this CPU")
	}
	r := rand.New(rand.NewPCG(25, 26))
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for range iters {
		s := allSpecs[r.IntN(len(allSpecs))]
		key := randBytes(r, s.keySizes[r.IntN(len(s.keySizes))])
		n := 16 + r.IntN(8192-16+1)
		if r.IntN(4) == 0 {
			n = 16 * (1 + r.IntN(512)) // more block-aligned lengths
		}
		fastVsGeneric(t, s.spec, key, r.Uint64()>>(r.IntN(4)*16), randBytes(r, n), r.IntN(64), r.IntN(64))
	}
}

// TestSectors checks EncryptSectors and DecryptSectors against per-unit
// Encrypt on every implementation: sector sizes with and without stealing,
// counts around the 8- and 16-unit batches, units that wrap at 2^32 and 2^64,
// out of place and in place.
func TestSectors(t *testing.T) {
	sizes := []int{16, 32, 48, 512, 4096, 17, 4101}
	counts := []int{0, 1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40}
	units := []uint64{0, 0xfffffff0, ^uint64(0) - 5}
	forEachImpl(t, func(t *testing.T, im impl) {
		r := rand.New(rand.NewPCG(27, uint64(im)))
		for _, s := range allSpecs {
			key := randBytes(r, s.keySizes[r.IntN(len(s.keySizes))])
			c := mustNewImpl(t, s.spec, key, im).(MultiCipher)
			for _, size := range sizes {
				for _, count := range counts {
					if size >= 4096 && count > 17 {
						continue
					}
					first := units[r.IntN(len(units))]
					pt := randBytes(r, size*count)
					want := make([]byte, len(pt))
					for i := range count {
						c.Encrypt(want[i*size:(i+1)*size], pt[i*size:(i+1)*size], first+uint64(i))
					}
					got := make([]byte, len(pt)+16)
					c.EncryptSectors(got, pt, size, first)
					if !bytes.Equal(got[:len(pt)], want) {
						t.Fatalf("%s size %d count %d first %#x: EncryptSectors differs from Encrypt per unit", s.spec, size, count, first)
					}
					if !bytes.Equal(got[len(pt):], make([]byte, 16)) {
						t.Fatalf("%s size %d count %d: EncryptSectors wrote past len(src)", s.spec, size, count)
					}
					back := make([]byte, len(pt))
					c.DecryptSectors(back, want, size, first)
					if !bytes.Equal(back, pt) {
						t.Fatalf("%s size %d count %d first %#x: DecryptSectors does not invert", s.spec, size, count, first)
					}
					buf := append([]byte(nil), pt...)
					c.EncryptSectors(buf, buf, size, first)
					if !bytes.Equal(buf, want) {
						t.Fatalf("%s size %d count %d: in-place EncryptSectors differs", s.spec, size, count)
					}
					c.DecryptSectors(buf, buf, size, first)
					if !bytes.Equal(buf, pt) {
						t.Fatalf("%s size %d count %d: in-place DecryptSectors differs", s.spec, size, count)
					}
				}
			}
		}
	})
}

func TestSectorsPanics(t *testing.T) {
	buf := make([]byte, 8192)
	tests := []struct {
		name     string
		dst, src []byte
		size     int
		want     string
	}{
		{"size 0", buf[:512], buf[:512], 0, "sector size 0"},
		{"size 15", buf[:30], buf[:30], 15, "sector size 15"},
		{"ragged", buf[:1000], buf[4096:5096], 512, "not a whole number"},
		{"short dst", buf[:512], buf[4096:5120], 512, "dst (512 bytes) is shorter than src (1024 bytes)"},
		{"overlap", buf[16:1040], buf[0:1024], 512, "overlap"},
	}
	for _, s := range allSpecs {
		c := mustNew(t, s.spec, make([]byte, s.keySizes[0])).(MultiCipher)
		for _, tt := range tests {
			for _, op := range []string{"encrypt", "decrypt"} {
				t.Run(s.spec+"/"+tt.name+"/"+op, func(t *testing.T) {
					defer func() {
						msg := fmt.Sprint(recover())
						if !bytes.HasPrefix([]byte(msg), []byte("sector: ")) || !bytes.Contains([]byte(msg), []byte(tt.want)) {
							t.Fatalf("panic %q, want one containing %q", msg, tt.want)
						}
					}()
					if op == "encrypt" {
						c.EncryptSectors(tt.dst, tt.src, tt.size, 0)
					} else {
						c.DecryptSectors(tt.dst, tt.src, tt.size, 0)
					}
				})
			}
		}
	}
}

// TestImplNoAllocs: no implementation allocates, per unit or per run of
// sectors.
func TestImplNoAllocs(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, s := range allSpecs {
			for _, ks := range s.keySizes {
				c := mustNewImpl(t, s.spec, make([]byte, ks), im).(MultiCipher)
				buf := make([]byte, 64<<10)
				unit := uint64(0)
				for _, n := range []int{16, 17, 4096, 4097} {
					if a := testing.AllocsPerRun(20, func() { unit++; c.Encrypt(buf[:n], buf[:n], unit) }); a != 0 {
						t.Errorf("%s/%d len %d: Encrypt allocates %v times", s.spec, ks, n, a)
					}
					if a := testing.AllocsPerRun(20, func() { unit++; c.Decrypt(buf[:n], buf[:n], unit) }); a != 0 {
						t.Errorf("%s/%d len %d: Decrypt allocates %v times", s.spec, ks, n, a)
					}
				}
				for _, size := range []int{512, 4096, 4097} {
					n := len(buf) / size * size
					if a := testing.AllocsPerRun(5, func() { c.EncryptSectors(buf[:n], buf[:n], size, unit) }); a != 0 {
						t.Errorf("%s/%d sector %d: EncryptSectors allocates %v times", s.spec, ks, size, a)
					}
					if a := testing.AllocsPerRun(5, func() { c.DecryptSectors(buf[:n], buf[:n], size, unit) }); a != 0 {
						t.Errorf("%s/%d sector %d: DecryptSectors allocates %v times", s.spec, ks, size, a)
					}
				}
			}
		}
	})
}

// TestRun checks RunCipher against Encrypt and Decrypt on each unit of
// the cut RunUnits describes, for every impl and spec: runs of one unit, of
// whole units, with a last unit shorter than a sector, and with a rest
// under 16 bytes joined to the unit before; sector sizes that take the
// 8-lane CBC path (16..512) and that do not (4096, 17); unit numbers that
// cross 2^32 and 2^64; in place and out of place; nothing written past
// len(src); and no allocation.
func TestRun(t *testing.T) {
	sizes := []int{16, 32, 512, 4096, 17}
	units := []uint64{0, 0xfffffffc, ^uint64(0) - 3}
	forEachImpl(t, func(t *testing.T, im impl) {
		r := rand.New(rand.NewPCG(31, uint64(im)))
		for _, s := range allSpecs {
			key := randBytes(r, s.keySizes[r.IntN(len(s.keySizes))])
			c := mustNewImpl(t, s.spec, key, im).(RunCipher)
			for _, size := range sizes {
				lengths := []int{16, 17, 31, size, size + 1, size + 15, size + 16, size + 17, 2 * size, 2*size + 5, 3*size + 100,
					7*size + 15, 7*size + 16, 8 * size, 8*size + 15, 8*size + 16, 9*size + 1, 4096, 4100, 4111, 1016}
				for _, n := range lengths {
					if n < 16 || n > 20*size+4111 {
						continue
					}
					first := units[r.IntN(len(units))]
					pt := randBytes(r, n)
					full, last := RunUnits(n, size)
					if full*size+last != n || (last != 0 && (last < 16 || last >= size+16)) {
						t.Fatalf("RunUnits(%d, %d) = %d, %d", n, size, full, last)
					}
					want := make([]byte, n)
					for i := range full {
						c.Encrypt(want[i*size:(i+1)*size], pt[i*size:(i+1)*size], first+uint64(i))
					}
					if last > 0 {
						c.Encrypt(want[full*size:], pt[full*size:], first+uint64(full))
					}
					got := make([]byte, n+16)
					c.EncryptRun(got, pt, size, first)
					if !bytes.Equal(got[:n], want) {
						t.Fatalf("%s sector %d run %d first %#x: EncryptRun differs from Encrypt per unit", s.spec, size, n, first)
					}
					if !bytes.Equal(got[n:], make([]byte, 16)) {
						t.Fatalf("%s sector %d run %d: EncryptRun wrote past len(src)", s.spec, size, n)
					}
					back := make([]byte, n)
					c.DecryptRun(back, want, size, first)
					if !bytes.Equal(back, pt) {
						t.Fatalf("%s sector %d run %d first %#x: DecryptRun does not invert", s.spec, size, n, first)
					}
					buf := append([]byte(nil), pt...)
					c.EncryptRun(buf, buf, size, first)
					if !bytes.Equal(buf, want) {
						t.Fatalf("%s sector %d run %d: in-place EncryptRun differs", s.spec, size, n)
					}
					c.DecryptRun(buf, buf, size, first)
					if !bytes.Equal(buf, pt) {
						t.Fatalf("%s sector %d run %d: in-place DecryptRun differs", s.spec, size, n)
					}
				}
			}
			buf := make([]byte, 4111)
			for _, n := range []int{1016, 4096, 4111} {
				if a := testing.AllocsPerRun(10, func() { c.EncryptRun(buf[:n], buf[:n], 512, 9) }); a != 0 {
					t.Errorf("%s run %d: EncryptRun allocates %v times", s.spec, n, a)
				}
				if a := testing.AllocsPerRun(10, func() { c.DecryptRun(buf[:n], buf[:n], 512, 9) }); a != 0 {
					t.Errorf("%s run %d: DecryptRun allocates %v times", s.spec, n, a)
				}
			}
		}
	})
}

// TestSectorsVsGeneric checks every impl's MultiCipher against the portable
// Go one unit at a time, on runs of units that cross 2^32 (where
// aes-xts-plain's 32-bit tweak wraps and plain64's does not) and 2^64: the
// AES-NI assembly runs such a run in one call, tweaks included, across the
// unit boundaries.
func TestSectorsVsGeneric(t *testing.T) {
	sizes := []int{128, 256, 512, 1024, 4096, 4096 + 128, 16, 144, 4101}
	firsts := []uint64{0, 1<<32 - 3, ^uint64(0) - 2}
	r := rand.New(rand.NewPCG(31, 32))
	forEachImpl(t, func(t *testing.T, im impl) {
		for _, spec := range []string{"aes-xts-plain64", "aes-xts-plain"} {
			for _, ks := range []int{32, 64} {
				key := randBytes(r, ks)
				ref := mustNewImpl(t, spec, key, implGeneric)
				c := mustNewImpl(t, spec, key, im).(MultiCipher)
				for _, size := range sizes {
					for _, first := range firsts {
						count := 1 + r.IntN(6)
						pt := randBytes(r, size*count)
						want := make([]byte, len(pt))
						for i := range count {
							ref.Encrypt(want[i*size:(i+1)*size], pt[i*size:(i+1)*size], first+uint64(i))
						}
						got := make([]byte, len(pt))
						c.EncryptSectors(got, pt, size, first)
						if !bytes.Equal(got, want) {
							t.Fatalf("%s %d-byte key, %d units of %d from %#x: EncryptSectors differs from generic", spec, ks, count, size, first)
						}
						c.DecryptSectors(got, got, size, first)
						if !bytes.Equal(got, pt) {
							t.Fatalf("%s %d-byte key, %d units of %d from %#x: DecryptSectors does not invert", spec, ks, count, size, first)
						}
					}
				}
			}
		}
	})
}

// TestGODEBUGSelectsImpl checks the switch that forces a slower path on a
// faster CPU, in a child process (the choice is made at start-up):
// GODEBUG=cpu.avx512f=off must give the AES-NI path, which CPUs without
// AVX-512 VAES run, and cpu.aes=off the portable Go.
func TestGODEBUGSelectsImpl(t *testing.T) {
	if os.Getenv("SECTOR_TEST_PRINT_IMPL") == "1" {
		fmt.Printf("impl=%v\n", bestImpl)
		return
	}
	tests := []struct {
		godebug string
		want    impl
		needs   impl // the best impl the CPU must have for the case to apply
	}{
		{"cpu.avx512f=off", implAESNI, implAESNI},
		{"cpu.aes=off", implGeneric, implGeneric},
	}
	for _, tt := range tests {
		t.Run(tt.godebug, func(t *testing.T) {
			if bestImpl < tt.needs {
				t.Skipf("this CPU's best path is %v", bestImpl)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestGODEBUGSelectsImpl$")
			cmd.Env = append(os.Environ(), "SECTOR_TEST_PRINT_IMPL=1", "GODEBUG="+tt.godebug)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", cmd, err, out)
			}
			if want := fmt.Sprintf("impl=%v\n", tt.want); !strings.Contains(string(out), want) {
				t.Fatalf("GODEBUG=%s: child printed %q, want %q", tt.godebug, out, want)
			}
		})
	}
}
