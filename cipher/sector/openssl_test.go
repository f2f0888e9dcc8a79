package sector

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const opensslPath = "/usr/bin/openssl"

// openssl runs the openssl binary with stdin and returns its stdout.
func openssl(t *testing.T, stdin []byte, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(opensslPath, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("openssl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

func needOpenSSL(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(opensslPath); err != nil {
		t.Skipf("skipping OpenSSL cross-check: %s not found (testdata/dmcrypt-openssl-kat.txt still covers compatibility)", opensslPath)
	}
}

// opensslECB encrypts whole blocks with AES-ECB, no padding.
func opensslECB(t *testing.T, key, data []byte) []byte {
	t.Helper()
	out, err := openssl(t, data, "enc", fmt.Sprintf("-aes-%d-ecb", len(key)*8), "-nopad", "-K", hex.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestOpenSSLCBC cross-checks the CBC specs against "openssl enc -aes-N-cbc"
// on 512- and 4096-byte units. The ESSIV IV is computed independently of the
// package: SHA-256 by "openssl dgst", the IV by "openssl enc -aes-256-ecb" of
// the LE64 sector block.
func TestOpenSSLCBC(t *testing.T) {
	needOpenSSL(t)
	r := rand.New(rand.NewPCG(1, 2))
	units := []uint64{0, 1, 4095, 0xffffffff, 1<<32 | 7, r.Uint64()}
	if testing.Short() {
		units = units[:3]
	}
	for _, spec := range []string{"aes-cbc-essiv:sha256", "aes-cbc-plain64", "aes-cbc-plain"} {
		for _, ks := range []int{16, 24, 32} {
			key := randBytes(r, ks)
			c := mustNew(t, spec, key)
			for _, size := range []int{512, 4096} {
				for _, unit := range units {
					pt := randBytes(r, size)
					var iv []byte
					switch spec {
					case "aes-cbc-essiv:sha256":
						salt, err := openssl(t, key, "dgst", "-sha256", "-binary")
						if err != nil {
							t.Fatal(err)
						}
						iv = opensslECB(t, salt, ivBlock(unit, false))
					case "aes-cbc-plain64":
						iv = ivBlock(unit, false)
					case "aes-cbc-plain":
						iv = ivBlock(unit, true)
					}
					want, err := openssl(t, pt, "enc", fmt.Sprintf("-aes-%d-cbc", ks*8), "-nopad",
						"-K", hex.EncodeToString(key), "-iv", hex.EncodeToString(iv))
					if err != nil {
						t.Fatal(err)
					}
					got := make([]byte, size)
					c.Encrypt(got, pt, unit)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s key %d unit %#x size %d: differs from openssl", spec, ks, unit, size)
					}
					c.Decrypt(got, want, unit)
					if !bytes.Equal(got, pt) {
						t.Fatalf("%s key %d unit %#x size %d: decrypt of openssl output differs", spec, ks, unit, size)
					}
				}
			}
		}
	}
}

// opensslXTS encrypts one data unit with OpenSSL. It first asks
// "openssl enc -aes-N-xts"; OpenSSL 3 refuses XTS in enc ("enc XTS ciphers
// not supported"), in which case XTS is assembled from OpenSSL's AES-ECB:
// T_0 = AES-ECB_{K2}(tweak) from openssl, the T_j by the byte-wise reference
// multiplication of IEEE 1619 section 5.2, and one openssl AES-ECB_{K1} pass
// over the whole unit XORed with the tweaks before and after.
func opensslXTS(t *testing.T, key, tweak, pt []byte) (ct []byte, how string) {
	t.Helper()
	out, err := openssl(t, pt, "enc", fmt.Sprintf("-aes-%d-xts", len(key)*4), "-nopad",
		"-K", hex.EncodeToString(key), "-iv", hex.EncodeToString(tweak))
	if err == nil {
		return out, "openssl enc xts"
	}
	if !strings.Contains(err.Error(), "XTS") {
		t.Fatal(err)
	}
	k1, k2 := key[:len(key)/2], key[len(key)/2:]
	tw := opensslECB(t, k2, tweak)
	mask := make([]byte, len(pt))
	for i := 0; i < len(pt); i += 16 {
		copy(mask[i:], tw)
		refMulAlpha(tw)
	}
	x := make([]byte, len(pt))
	for i := range x {
		x[i] = pt[i] ^ mask[i]
	}
	y := opensslECB(t, k1, x)
	for i := range y {
		y[i] ^= mask[i]
	}
	return y, "openssl aes-ecb + reference tweaks"
}

// TestOpenSSLXTS cross-checks aes-xts-plain64 and aes-xts-plain against
// OpenSSL on 512- and 4096-byte units, AES-128 and AES-256.
func TestOpenSSLXTS(t *testing.T) {
	needOpenSSL(t)
	r := rand.New(rand.NewPCG(3, 4))
	units := []uint64{0, 1, 0xffffffff, 1<<32 | 9, r.Uint64()}
	if testing.Short() {
		units = units[:2]
	}
	logged := false
	for _, spec := range []string{"aes-xts-plain64", "aes-xts-plain"} {
		for _, ks := range []int{32, 64} {
			key := randBytes(r, ks)
			c := mustNew(t, spec, key)
			for _, size := range []int{512, 4096} {
				for _, unit := range units {
					pt := randBytes(r, size)
					want, how := opensslXTS(t, key, ivBlock(unit, spec == "aes-xts-plain"), pt)
					if !logged {
						t.Logf("XTS reference: %s", how)
						logged = true
					}
					got := make([]byte, size)
					c.Encrypt(got, pt, unit)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s key %d unit %#x size %d: differs from OpenSSL (%s)", spec, ks, unit, size, how)
					}
					c.Decrypt(got, want, unit)
					if !bytes.Equal(got, pt) {
						t.Fatalf("%s key %d unit %#x size %d: decrypt of OpenSSL output differs", spec, ks, unit, size)
					}
				}
			}
		}
	}
}
