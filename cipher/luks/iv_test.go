package luks

import (
	"bytes"
	"crypto/sha256"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/sector"
)

// IV numbering, proven against data cryptsetup itself encrypts or decrypts.
//
// cryptsetup reencrypt works offline on image files: it encrypts and
// decrypts in userspace (its crypto backend's storage wrapper mirrors
// dm-crypt's IV generators), so no device-mapper is needed. With a detached
// header (--header) the data is converted in place with the payload at
// offset 0 of the data file.

// skipIfTooOld skips when cryptsetup's output says it lacks offline
// reencryption or --force-offline-reencrypt (both in cryptsetup >= 2.5).
func skipIfTooOld(t *testing.T, out string) {
	t.Helper()
	if strings.Contains(strings.ToLower(out), "unknown") {
		t.Skipf("this cryptsetup cannot reencrypt offline (needs 2.5 or later): %s", strings.TrimSpace(out))
	}
}

// pattern returns n deterministic bytes.
func pattern(n int, seed string) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		s := sha256.Sum256([]byte(seed + strconv.Itoa(i)))
		b = append(b, s[:]...)
	}
	return b[:n]
}

// decryptVolume decrypts the payload bytes data (starting at payload offset
// 0) with v's geometry, computing each unit's IV with ivOf.
func decryptVolume(t *testing.T, v *Volume, data []byte, ivOf func(payloadOff int64) uint64) []byte {
	t.Helper()
	c, err := sector.New(v.Cipher, v.Key)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(data))
	for o := 0; o < len(data); o += v.SectorSize {
		c.Decrypt(out[o:o+v.SectorSize], data[o:o+v.SectorSize], ivOf(int64(o)))
	}
	return out
}

// volumeIV is the IV rule documented on Volume.
func volumeIV(v *Volume) func(int64) uint64 {
	return func(o int64) uint64 { return v.IVOffset + uint64(o>>9)>>v.IVShift }
}

// TestCryptsetupIVNumbering: cryptsetup encrypts known plaintext as LUKS2
// with 512-, 2048- and 4096-byte sectors; decrypting it with the Volume's IV
// rule gives the plaintext back. For sectors above 512 bytes the IV advances
// by SectorSize/512 per sector (IVShift 0): counting whole sectors
// (iv_large_sectors) does not decrypt it, which the test also checks so that
// it can fail.
func TestCryptsetupIVNumbering(t *testing.T) {
	cryptsetup(t)
	for _, c := range []struct {
		cipher  string
		keyBits int
		sector  int
	}{
		{"aes-xts-plain64", 512, 4096},
		{"aes-xts-plain64", 256, 2048},
		{"aes-xts-plain64", 512, 512},
		{"aes-cbc-essiv:sha256", 256, 4096},
	} {
		t.Run(c.cipher+"-"+strconv.Itoa(c.sector), func(t *testing.T) {
			dir := t.TempDir()
			plain := pattern(256<<10, c.cipher)
			data := writeFile(t, dir, "data", plain)
			hdr := dir + "/hdr"
			keyFile := writeFile(t, dir, "key", []byte("iv"))
			args := []string{"reencrypt", "--encrypt", "--type", "luks2", "--batch-mode", "--force-offline-reencrypt",
				"--key-file", keyFile, "--cipher", c.cipher, "--key-size", strconv.Itoa(c.keyBits),
				"--sector-size", strconv.Itoa(c.sector), "--header", hdr}
			args = append(args, kdfArgs("pbkdf2", "sha256")...)
			if out, err := runErr(t, append(args, data)...); err != nil {
				skipIfTooOld(t, out)
				t.Fatalf("reencrypt --encrypt: %v\n%s", err, out)
			}
			v := mustOpenFile(t, hdr, "iv")
			if v.Offset != 0 || v.SectorSize != c.sector || v.IVShift != 0 || v.IVOffset != 0 {
				t.Fatalf("Volume = %+v", v)
			}
			if !bytes.Equal(v.Key, dumpVolumeKey(t, hdr, keyFile)) {
				t.Fatal("key differs from cryptsetup's")
			}
			cipherText, err := os.ReadFile(data)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(cipherText, plain) {
				t.Fatal("cryptsetup did not encrypt")
			}
			if got := decryptVolume(t, v, cipherText, volumeIV(v)); !bytes.Equal(got, plain) {
				t.Fatalf("Volume's IV rule does not decrypt cryptsetup's data")
			}
			if c.sector > 512 {
				large := func(o int64) uint64 { return uint64(o) / uint64(c.sector) }
				got := decryptVolume(t, v, cipherText, large)
				if bytes.Equal(got[c.sector:2*c.sector], plain[c.sector:2*c.sector]) {
					t.Fatalf("whole-sector IVs decrypt too: the test proves nothing")
				}
			}
		})
	}
}

// TestFormatDataDecryptedByCryptsetup: data written with our sector cipher
// for a volume made by Format, at IVs given by the Volume, is decrypted to
// the same plaintext by cryptsetup (reencrypt --decrypt, offline). cryptsetup
// 2.6 decrypts only with a detached header whose segment starts at 0, so the
// test detaches Format's header: a copy with the segment offset set to 0,
// and the payload alone as the data file.
func TestFormatDataDecryptedByCryptsetup(t *testing.T) {
	cryptsetup(t)
	for _, sectorSize := range []int{512, 4096} {
		t.Run(strconv.Itoa(sectorSize), func(t *testing.T) {
			dir := t.TempDir()
			const payload = 256 << 10
			o := cheapFormat
			o.SectorSize = sectorSize
			img := &memImage{}
			v, err := Format(img, formatDataOffset+payload, []byte("dec"), o)
			if err != nil {
				t.Fatal(err)
			}
			plain := pattern(payload, "format")
			c, err := sector.New(v.Cipher, v.Key)
			if err != nil {
				t.Fatal(err)
			}
			ct := make([]byte, payload)
			for off := 0; off < payload; off += v.SectorSize {
				iv := v.IVOffset + uint64(off>>9)>>v.IVShift
				c.Encrypt(ct[off:off+v.SectorSize], plain[off:off+v.SectorSize], iv)
			}
			hdrBytes := img.b[:formatDataOffset]
			rewriteJSON(t, hdrBytes, func(m map[string]any) { path(m, "segments", "0")["offset"] = "0" })
			hdr := writeFile(t, dir, "hdr", hdrBytes)
			data := writeFile(t, dir, "data", ct)
			keyFile := writeFile(t, dir, "key", []byte("dec"))
			out, err := runErr(t, "reencrypt", "--decrypt", "--batch-mode", "--force-offline-reencrypt",
				"--key-file", keyFile, "--header", hdr, data)
			if err != nil {
				skipIfTooOld(t, out)
				t.Fatalf("reencrypt --decrypt: %v\n%s", err, out)
			}
			got, err := os.ReadFile(data)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(got, ct) {
				t.Fatalf("cryptsetup did not decrypt")
			}
			if !bytes.Equal(got, plain) {
				t.Fatalf("cryptsetup decrypted our sectors to something else")
			}
		})
	}
}
