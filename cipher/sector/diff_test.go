package sector

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/xts"
)

// maxRoundTripLen is the upper end of the every-length tests: a 4096-byte
// unit plus a few blocks, so every tail size is covered around the largest
// unit size in use.
const maxRoundTripLen = 4096 + 64

// TestDifferentialXTS compares aes-xts-plain64 with golang.org/x/crypto/xts
// (which implements only block-aligned units) over random keys, units and
// lengths.
func TestDifferentialXTS(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	iters := 2000
	if testing.Short() {
		iters = 200
	}
	for i := range iters {
		ks := []int{32, 64}[i%2]
		key := randBytes(r, ks)
		unit := r.Uint64() >> (r.IntN(4) * 16) // small and large units
		n := 16 * (1 + r.IntN(256))
		pt := randBytes(r, n)

		ref, err := xts.NewCipher(aes.NewCipher, key)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, n)
		ref.Encrypt(want, pt, unit)

		c := mustNew(t, "aes-xts-plain64", key)
		got := make([]byte, n)
		c.Encrypt(got, pt, unit)
		if !bytes.Equal(got, want) {
			t.Fatalf("key %x unit %#x len %d: Encrypt differs from x/crypto/xts", key, unit, n)
		}
		c.Decrypt(got, want, unit)
		if !bytes.Equal(got, pt) {
			t.Fatalf("key %x unit %#x len %d: Decrypt differs", key, unit, n)
		}
		// aes-xts-plain equals x/crypto/xts with the unit truncated to 32 bits.
		ref.Encrypt(want, pt, unit&0xffffffff)
		mustNew(t, "aes-xts-plain", key).Encrypt(got, pt, unit)
		if !bytes.Equal(got, want) {
			t.Fatalf("key %x unit %#x len %d: aes-xts-plain differs from x/crypto/xts(unit mod 2^32)", key, unit, n)
		}
	}
}

// TestDifferentialCBC compares the aligned CBC specs with crypto/cipher's CBC
// fed the IV computed from dm-crypt's definition.
func TestDifferentialCBC(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	iters := 1500
	if testing.Short() {
		iters = 150
	}
	specs := []string{"aes-cbc-essiv:sha256", "aes-cbc-plain64", "aes-cbc-plain"}
	for i := range iters {
		spec := specs[i%len(specs)]
		key := randBytes(r, []int{16, 24, 32}[r.IntN(3)])
		unit := r.Uint64() >> (r.IntN(4) * 16)
		n := 16 * (1 + r.IntN(256))
		pt := randBytes(r, n)

		b, _ := aes.NewCipher(key)
		iv := refIV(spec, key, unit)
		want := make([]byte, n)
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(want, pt)

		c := mustNew(t, spec, key)
		got := make([]byte, n)
		c.Encrypt(got, pt, unit)
		if !bytes.Equal(got, want) {
			t.Fatalf("%s key %x unit %#x len %d: Encrypt differs from crypto/cipher CBC", spec, key, unit, n)
		}
		c.Decrypt(got, want, unit)
		if !bytes.Equal(got, pt) {
			t.Fatalf("%s key %x unit %#x len %d: Decrypt differs", spec, key, unit, n)
		}
	}
}

// TestEveryLength runs every length from 16 to maxRoundTripLen through every
// spec: output must equal the reference implementation (x/crypto-independent,
// written from the standards, pinned to the vectors by
// TestReferenceImplementations), decrypt must invert encrypt, in-place must
// equal out-of-place, and bytes of dst beyond len(src) must stay untouched.
func TestEveryLength(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	step := 1
	if testing.Short() {
		step = 7
	}
	for _, s := range allSpecs {
		for _, ks := range s.keySizes {
			t.Run(fmt.Sprintf("%s/%d", s.spec, ks), func(t *testing.T) {
				key := randBytes(r, ks)
				c := mustNew(t, s.spec, key)
				buf := randBytes(r, maxRoundTripLen)
				for n := 16; n <= maxRoundTripLen; n += step {
					pt := buf[:n]
					unit := r.Uint64()
					want := refCipher(s.spec, key, unit, pt, true)

					got := make([]byte, n+16)
					for i := n; i < len(got); i++ {
						got[i] = 0xee
					}
					c.Encrypt(got, pt, unit)
					if !bytes.Equal(got[:n], want) {
						t.Fatalf("len %d unit %#x: Encrypt differs from reference\n got %x\nwant %x", n, unit, got[:n], want)
					}
					if !bytes.Equal(got[n:], bytes.Repeat([]byte{0xee}, 16)) {
						t.Fatalf("len %d: Encrypt wrote past len(src)", n)
					}
					if dec := refCipher(s.spec, key, unit, want, false); !bytes.Equal(dec, pt) {
						t.Fatalf("len %d: reference does not round-trip", n)
					}

					back := make([]byte, n)
					c.Decrypt(back, want, unit)
					if !bytes.Equal(back, pt) {
						t.Fatalf("len %d unit %#x: Decrypt(Encrypt(p)) != p", n, unit)
					}

					inplace := append([]byte(nil), pt...)
					c.Encrypt(inplace, inplace, unit)
					if !bytes.Equal(inplace, want) {
						t.Fatalf("len %d: in-place Encrypt differs", n)
					}
					c.Decrypt(inplace, inplace, unit)
					if !bytes.Equal(inplace, pt) {
						t.Fatalf("len %d: in-place Decrypt differs", n)
					}
				}
			})
		}
	}
}

// TestStealingTouchesOnlyTheEnd checks a structural property of both stealing
// schemes: with a partial last block, every block before the last full block
// is encrypted exactly as for the block-aligned prefix. This is what makes a
// unit that grows by a few bytes change only its last 16+b bytes.
func TestStealingTouchesOnlyTheEnd(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, s := range allSpecs {
		key := randBytes(r, s.keySizes[0])
		c := mustNew(t, s.spec, key)
		for _, n := range []int{33, 47, 100, 4095} {
			pt := randBytes(r, n)
			aligned := n &^ 15
			a := make([]byte, aligned)
			c.Encrypt(a, pt[:aligned], 42)
			b := make([]byte, n)
			c.Encrypt(b, pt, 42)
			if !bytes.Equal(a[:aligned-16], b[:aligned-16]) {
				t.Errorf("%s len %d: blocks before the stolen pair differ from the aligned prefix", s.spec, n)
			}
		}
	}
}

// TestUnitSeparation checks that the unit number is actually used: the same
// plaintext in units that differ in any one bit gives different ciphertext
// (for plain only in the low 32 bits, which is dm-crypt's plain semantics).
func TestUnitSeparation(t *testing.T) {
	for _, s := range allSpecs {
		key := bytes.Repeat([]byte{7}, s.keySizes[0])
		c := mustNew(t, s.spec, key)
		pt := make([]byte, 64)
		base := make([]byte, 64)
		c.Encrypt(base, pt, 0)
		plain32 := strings.HasSuffix(s.spec, "-plain")
		for bit := range 64 {
			got := make([]byte, 64)
			c.Encrypt(got, pt, 1<<bit)
			same := bytes.Equal(got, base)
			if want := plain32 && bit >= 32; same != want {
				t.Errorf("%s: unit 1<<%d gives the same ciphertext as unit 0: %v, want %v", s.spec, bit, same, want)
			}
		}
	}
}

// TestNoAllocs checks that Encrypt and Decrypt do not allocate, for aligned
// and stealing lengths.
func TestNoAllocs(t *testing.T) {
	for _, s := range allSpecs {
		for _, ks := range s.keySizes {
			c := mustNew(t, s.spec, make([]byte, ks))
			for _, n := range []int{16, 17, 512, 4096, 4097} {
				src := make([]byte, n)
				dst := make([]byte, n)
				unit := uint64(0)
				if a := testing.AllocsPerRun(100, func() { unit++; c.Encrypt(dst, src, unit) }); a != 0 {
					t.Errorf("%s/%d len %d: Encrypt allocates %v times per call", s.spec, ks, n, a)
				}
				if a := testing.AllocsPerRun(100, func() { unit++; c.Decrypt(dst, src, unit) }); a != 0 {
					t.Errorf("%s/%d len %d: Decrypt allocates %v times per call", s.spec, ks, n, a)
				}
				if a := testing.AllocsPerRun(100, func() { unit++; c.Encrypt(dst, dst, unit) }); a != 0 {
					t.Errorf("%s/%d len %d: in-place Encrypt allocates %v times per call", s.spec, ks, n, a)
				}
			}
		}
	}
}

// TestConcurrentUse shares one Cipher between goroutines (run with -race to
// catch shared scratch state) and compares with sequential results.
func TestConcurrentUse(t *testing.T) {
	const workers, units = 8, 64
	for _, s := range allSpecs {
		key := bytes.Repeat([]byte{0x42}, s.keySizes[len(s.keySizes)-1])
		c := mustNew(t, s.spec, key)
		pt := bytes.Repeat([]byte("twincrypt sector"), 32) // 512 bytes
		pt = append(pt, 1, 2, 3)                           // and a stolen tail
		want := make([][]byte, units)
		for u := range units {
			want[u] = make([]byte, len(pt))
			c.Encrypt(want[u], pt, uint64(u))
		}
		var wg sync.WaitGroup
		errs := make(chan string, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, len(pt))
				for i := range 20 * units {
					u := (i*7 + w) % units
					copy(buf, pt)
					c.Encrypt(buf, buf, uint64(u))
					if !bytes.Equal(buf, want[u]) {
						errs <- fmt.Sprintf("%s: worker %d unit %d: Encrypt differs under concurrency", s.spec, w, u)
						return
					}
					c.Decrypt(buf, buf, uint64(u))
					if !bytes.Equal(buf, pt) {
						errs <- fmt.Sprintf("%s: worker %d unit %d: Decrypt differs under concurrency", s.spec, w, u)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
	}
}

// TestMulAlpha compares the 64-bit tweak doubling with the byte-wise
// reference over a long chain from random starting points, including ones
// with bit 127 set (the reduction case).
func TestMulAlpha(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for range 100 {
		ref := randBytes(r, 16)
		t0 := le64(ref[0:8])
		t1 := le64(ref[8:16])
		for j := range 300 {
			refMulAlpha(ref)
			t0, t1 = mulAlpha(t0, t1)
			if le64(ref[0:8]) != t0 || le64(ref[8:16]) != t1 {
				t.Fatalf("step %d: mulAlpha %016x%016x, reference %x", j, t1, t0, ref)
			}
		}
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
