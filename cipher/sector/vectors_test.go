package sector

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
)

// TestIEEE1619Vectors runs IEEE Std 1619-2007 Annex B vectors 1-19
// (testdata/ieee1619-xts.txt) through New("aes-xts-plain64", Key1||Key2).
func TestIEEE1619Vectors(t *testing.T) {
	for _, v := range readVectorFile(t, "ieee1619-xts.txt") {
		key := append(v.hex(t, "Key1"), v.hex(t, "Key2")...)
		ptx, ctx := v.hex(t, "PTX"), v.hex(t, "CTX")
		tweak := v.hex(t, "Tweak")
		unit, err := strconv.ParseUint(v.fields["Unit"], 0, 64)
		if err != nil {
			t.Fatalf("line %d: Unit: %v", v.line, err)
		}
		name := fmt.Sprintf("vector%s/%dbit/%dB", v.fields["Vector"], len(key)*4, len(ptx))
		t.Run(name, func(t *testing.T) {
			// The data unit sequence number maps to unit exactly as dm-crypt
			// plain64 maps the sector number: little-endian in the first 8
			// tweak bytes, zeros after (IEEE 1619 section 5.1).
			if want := ivBlock(unit, false); !bytes.Equal(tweak, want) {
				t.Fatalf("Tweak %x is not LE128(Unit=%#x) = %x", tweak, unit, want)
			}
			if len(ptx) != len(ctx) {
				t.Fatalf("PTX %d bytes, CTX %d bytes", len(ptx), len(ctx))
			}
			c := mustNew(t, "aes-xts-plain64", key)
			got := make([]byte, len(ptx))
			c.Encrypt(got, ptx, unit)
			if !bytes.Equal(got, ctx) {
				t.Fatalf("Encrypt:\n got %x\nwant %x", got, ctx)
			}
			c.Decrypt(got, ctx, unit)
			if !bytes.Equal(got, ptx) {
				t.Fatalf("Decrypt:\n got %x\nwant %x", got, ptx)
			}
			// In place, both directions.
			buf := append([]byte(nil), ptx...)
			c.Encrypt(buf, buf, unit)
			if !bytes.Equal(buf, ctx) {
				t.Fatalf("in-place Encrypt:\n got %x\nwant %x", buf, ctx)
			}
			c.Decrypt(buf, buf, unit)
			if !bytes.Equal(buf, ptx) {
				t.Fatalf("in-place Decrypt:\n got %x\nwant %x", buf, ptx)
			}
			// aes-xts-plain uses only the low 32 bits of the unit.
			p := mustNew(t, "aes-xts-plain", key)
			p.Encrypt(got, ptx, unit)
			if fits := unit <= 0xffffffff; bytes.Equal(got, ctx) != fits {
				t.Fatalf("aes-xts-plain with unit %#x: equal to plain64 = %v, want %v", unit, !fits, fits)
			}
			p.Encrypt(got, ptx, unit&0xffffffff|0xabcd<<32)
			want := make([]byte, len(ptx))
			c.Encrypt(want, ptx, unit&0xffffffff)
			if !bytes.Equal(got, want) {
				t.Fatalf("aes-xts-plain does not ignore the high 32 bits of the unit")
			}
		})
	}
}

// TestNISTCBCVectors runs NIST SP 800-38A F.2.1-F.2.6 through the internal
// CBC functions, which take an explicit IV (dm-crypt modes derive it from the
// unit, see TestIVGeneration).
func TestNISTCBCVectors(t *testing.T) {
	for _, v := range readVectorFile(t, "nist-sp800-38a-cbc.txt") {
		key, iv := v.hex(t, "Key"), v.hex(t, "IV")
		pt, ct := v.hex(t, "Plaintext"), v.hex(t, "Ciphertext")
		iv0 := binary.LittleEndian.Uint64(iv[0:8])
		iv1 := binary.LittleEndian.Uint64(iv[8:16])
		t.Run(v.fields["Section"], func(t *testing.T) {
			b, err := aes.NewCipher(key)
			if err != nil {
				t.Fatal(err)
			}
			// Every prefix of whole blocks is also a CBC vector.
			for n := 16; n <= len(pt); n += 16 {
				got := make([]byte, n)
				cbcEncrypt(b, got, pt[:n], iv0, iv1)
				if !bytes.Equal(got, ct[:n]) {
					t.Fatalf("encrypt %d bytes:\n got %x\nwant %x", n, got, ct[:n])
				}
				cbcDecrypt(b, got, ct[:n], iv0, iv1)
				if !bytes.Equal(got, pt[:n]) {
					t.Fatalf("decrypt %d bytes:\n got %x\nwant %x", n, got, pt[:n])
				}
				buf := append([]byte(nil), pt[:n]...)
				cbcEncrypt(b, buf, buf, iv0, iv1)
				cbcDecrypt(b, buf, buf, iv0, iv1)
				if !bytes.Equal(buf, pt[:n]) {
					t.Fatalf("in-place round trip %d bytes failed", n)
				}
			}
		})
	}
}

// TestRFC3962CTS checks CBC ciphertext stealing against RFC 3962 Appendix B.
// The RFC's CTS is CBC-CS3; for lengths that are not a multiple of 16 it is
// identical to CS2, for aligned lengths CS2 is plain CBC, so the expected
// output is the RFC output with its last two blocks swapped back.
func TestRFC3962CTS(t *testing.T) {
	blocks := readVectorFile(t, "rfc3962-cbc-cts.txt")
	key, iv := blocks[0].hex(t, "Key"), blocks[0].hex(t, "IV")
	b, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	iv0 := binary.LittleEndian.Uint64(iv[0:8])
	iv1 := binary.LittleEndian.Uint64(iv[8:16])
	for _, v := range blocks[1:] {
		in, cs3 := v.hex(t, "Input"), v.hex(t, "Output")
		want := cs3
		if len(in)%16 == 0 {
			want = swapLastBlocks(cs3)
		}
		t.Run(fmt.Sprintf("%dB", len(in)), func(t *testing.T) {
			got := make([]byte, len(in))
			cbcEncrypt(b, got, in, iv0, iv1)
			if !bytes.Equal(got, want) {
				t.Fatalf("encrypt:\n got %x\nwant %x", got, want)
			}
			cbcDecrypt(b, got, want, iv0, iv1)
			if !bytes.Equal(got, in) {
				t.Fatalf("decrypt:\n got %x\nwant %x", got, in)
			}
			// The same through the public API: plain64 with unit 0 has the
			// all-zero IV of the RFC vectors.
			c := mustNew(t, "aes-cbc-plain64", key)
			buf := append([]byte(nil), in...)
			c.Encrypt(buf, buf, 0)
			if !bytes.Equal(buf, want) {
				t.Fatalf("aes-cbc-plain64 unit 0 in place:\n got %x\nwant %x", buf, want)
			}
			c.Decrypt(buf, buf, 0)
			if !bytes.Equal(buf, in) {
				t.Fatalf("aes-cbc-plain64 unit 0 in-place decrypt:\n got %x\nwant %x", buf, in)
			}
		})
	}
}

// TestReferenceImplementations pins the test-only reference implementations
// (used by the differential and fuzz tests for non-aligned lengths) to the
// published vectors, so that agreeing with them means something.
func TestReferenceImplementations(t *testing.T) {
	for _, v := range readVectorFile(t, "ieee1619-xts.txt") {
		key := append(v.hex(t, "Key1"), v.hex(t, "Key2")...)
		ptx, ctx, tweak := v.hex(t, "PTX"), v.hex(t, "CTX"), v.hex(t, "Tweak")
		if got := refXTS(key, tweak, ptx, true); !bytes.Equal(got, ctx) {
			t.Errorf("refXTS vector %s encrypt mismatch", v.fields["Vector"])
		}
		if got := refXTS(key, tweak, ctx, false); !bytes.Equal(got, ptx) {
			t.Errorf("refXTS vector %s decrypt mismatch", v.fields["Vector"])
		}
	}
	blocks := readVectorFile(t, "rfc3962-cbc-cts.txt")
	b, _ := aes.NewCipher(blocks[0].hex(t, "Key"))
	iv := blocks[0].hex(t, "IV")
	for _, v := range blocks[1:] {
		in, want := v.hex(t, "Input"), v.hex(t, "Output")
		if len(in)%16 == 0 {
			want = swapLastBlocks(want)
		}
		if got := refCBCCS2(b, iv, in, true); !bytes.Equal(got, want) {
			t.Errorf("refCBCCS2 %d bytes encrypt mismatch:\n got %x\nwant %x", len(in), got, want)
		}
		if got := refCBCCS2(b, iv, want, false); !bytes.Equal(got, in) {
			t.Errorf("refCBCCS2 %d bytes decrypt mismatch", len(in))
		}
	}
}

// TestIVGeneration checks the dm-crypt IV generators on their own: the first
// ciphertext block of a CBC unit is E_K(P_0 xor IV), so decrypting it with
// the raw block cipher and XORing P_0 recovers the IV the package used.
func TestIVGeneration(t *testing.T) {
	key := mustHex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	units := []uint64{0, 1, 2, 255, 256, 0x12345678, 0xffffffff, 1 << 32, 0x123456789abcdef0, ^uint64(0)}
	for _, spec := range []string{"aes-cbc-essiv:sha256", "aes-cbc-plain64", "aes-cbc-plain"} {
		for _, ks := range []int{16, 24, 32} {
			c := mustNew(t, spec, key[:ks])
			b, _ := aes.NewCipher(key[:ks])
			for _, unit := range units {
				pt := bytes.Repeat([]byte{0x5a}, 32)
				ct := make([]byte, len(pt))
				c.Encrypt(ct, pt, unit)
				iv := make([]byte, 16)
				b.Decrypt(iv, ct[:16])
				for i := range iv {
					iv[i] ^= pt[i]
				}
				if want := refIV(spec, key[:ks], unit); !bytes.Equal(iv, want) {
					t.Errorf("%s key %d unit %#x: IV %x, want %x", spec, ks, unit, iv, want)
				}
			}
		}
	}
	// Known answers, computed by hand from the definitions.
	if got := refIV("aes-cbc-plain", nil, 0x1122334455667788); !bytes.Equal(got, mustHex("88776655000000000000000000000000")) {
		t.Errorf("plain IV %x", got)
	}
	if got := refIV("aes-cbc-plain64", nil, 0x1122334455667788); !bytes.Equal(got, mustHex("88776655443322110000000000000000")) {
		t.Errorf("plain64 IV %x", got)
	}
}

// TestDMCryptKAT checks every spec against known answers produced by OpenSSL
// (testdata/dmcrypt-openssl-kat.txt; the file says how), so dm-crypt
// compatibility is covered even where no openssl binary is installed.
func TestDMCryptKAT(t *testing.T) {
	for _, v := range readVectorFile(t, "dmcrypt-openssl-kat.txt") {
		spec := v.fields["Spec"]
		key, pt, ct := v.hex(t, "Key"), v.hex(t, "Plaintext"), v.hex(t, "Ciphertext")
		unit, err := strconv.ParseUint(v.fields["Unit"], 0, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("%s/%dbit/unit=%#x", spec, len(key)*8, unit), func(t *testing.T) {
			c := mustNew(t, spec, key)
			got := make([]byte, len(pt))
			c.Encrypt(got, pt, unit)
			if !bytes.Equal(got, ct) {
				t.Fatalf("Encrypt:\n got %x\nwant %x", got, ct)
			}
			c.Decrypt(got, ct, unit)
			if !bytes.Equal(got, pt) {
				t.Fatalf("Decrypt mismatch")
			}
		})
	}
}
