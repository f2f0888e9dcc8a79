package luks

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestPlainHashKAT checks the passphrase hashing of plain mode against the
// keys cryptsetup's test suite reads back from dm-crypt
// (testdata/plain-hash-kat.txt). The sha1, sha224, ripemd160 and sha3-224
// cases with 256-bit keys need a second round with an 'A' prefix.
func TestPlainHashKAT(t *testing.T) {
	f, err := os.Open("testdata/plain-hash-kat.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		// The passphrase may contain spaces only inside its quotes; none do.
		if len(fields) != 4 {
			t.Fatalf("bad line %q", line)
		}
		hash, want := fields[0], fields[3]
		bits, err := strconv.Atoi(fields[1])
		if err != nil {
			t.Fatal(err)
		}
		pass, err := strconv.Unquote(fields[2])
		if err != nil {
			t.Fatal(err)
		}
		v, err := OpenPlain([]byte(pass), PlainOptions{Hash: hash, KeyBytes: bits / 8})
		if want == "error" {
			if err == nil {
				t.Errorf("%s %d %q: key %x, want an error", hash, bits, pass, v.Key)
			}
			n++
			continue
		}
		if err != nil {
			t.Errorf("%s %d %q: %v", hash, bits, pass, err)
			continue
		}
		if got := hex.EncodeToString(v.Key); got != want {
			t.Errorf("%s %d %q: key %s, want %s", hash, bits, pass, got, want)
		}
		n++
	}
	if n < 25 {
		t.Fatalf("only %d vectors", n)
	}
}

func TestPlainDefaults(t *testing.T) {
	v, err := OpenPlain([]byte("xxx"), PlainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// cryptsetup 2.6.1: aes-cbc-essiv:sha256, 256-bit key, ripemd160.
	want, _ := hex.DecodeString("aeb26d1f69eb6dddfb9381eed4d7299f091e99aa5d3ff06866d4ce9f620f7aca")
	if v.Cipher != "aes-cbc-essiv:sha256" || !bytes.Equal(v.Key, want) || v.SectorSize != 512 ||
		v.Version != 0 || v.UUID != "" || v.Offset != 0 || v.Size != -1 || v.IVShift != 0 || v.IVOffset != 0 {
		t.Fatalf("OpenPlain defaults = %+v", v)
	}
}

func TestPlainGeometry(t *testing.T) {
	for _, c := range []struct {
		o        PlainOptions
		offset   int64
		ivShift  uint
		ivOffset uint64
		err      bool
	}{
		{PlainOptions{Offset: 2048, Skip: 16}, 2048 * 512, 0, 16, false},
		{PlainOptions{SectorSize: 4096, Skip: 16}, 0, 0, 16, false},
		{PlainOptions{SectorSize: 4096, Skip: 16, IVLargeSectors: true}, 0, 3, 2, false},
		{PlainOptions{SectorSize: 4096, Skip: 12, IVLargeSectors: true}, 0, 0, 0, true},
		{PlainOptions{SectorSize: 512, Skip: 12, IVLargeSectors: true}, 0, 0, 12, false},
		{PlainOptions{SectorSize: 3000}, 0, 0, 0, true},
		{PlainOptions{Offset: -1}, 0, 0, 0, true},
		{PlainOptions{Cipher: "aes-xts-plain64", KeyBytes: 64, SectorSize: 4096}, 0, 0, 0, false},
		{PlainOptions{Cipher: "aes-xts-plain64", KeyBytes: 48}, 0, 0, 0, true},
		{PlainOptions{Cipher: "serpent-cbc-essiv:sha256"}, 0, 0, 0, true},
	} {
		v, err := OpenPlain([]byte("pw"), c.o)
		if (err != nil) != c.err {
			t.Errorf("%+v: error %v", c.o, err)
			continue
		}
		if err != nil {
			if c.o.Cipher == "serpent-cbc-essiv:sha256" && !errors.Is(err, ErrUnsupported) {
				t.Errorf("%+v: %v is not ErrUnsupported", c.o, err)
			}
			continue
		}
		if v.Offset != c.offset || v.IVShift != c.ivShift || v.IVOffset != c.ivOffset {
			t.Errorf("%+v: Volume %+v", c.o, v)
		}
	}
}
