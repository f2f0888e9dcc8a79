package luks

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// These tests need no cryptsetup: they format in memory, damage and edit
// the result, and open it. cryptsetup_test.go proves that what Format writes
// and what Open reads is what cryptsetup writes and reads.

func TestFormatOpenRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		o    FormatOptions
	}{
		{"pbkdf2-sha256-xts512", FormatOptions{PBKDF: "pbkdf2", Iterations: 1000}},
		{"pbkdf2-sha512-xts256", FormatOptions{PBKDF: "pbkdf2", Iterations: 1000, Hash: "sha512", KeyBytes: 32}},
		{"argon2id-4096", FormatOptions{PBKDF: "argon2id", Time: 4, MemoryKiB: 64, Threads: 2, SectorSize: 4096}},
		{"argon2i", FormatOptions{PBKDF: "argon2i", Time: 4, MemoryKiB: 32, Threads: 1}},
		{"cbc-essiv", FormatOptions{Cipher: "aes-cbc-essiv:sha256", KeyBytes: 32, PBKDF: "pbkdf2", Iterations: 1000}},
		{"label", FormatOptions{PBKDF: "pbkdf2", Iterations: 1000, Label: "twincrypt test"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img, want := formatMem(t, "correct horse", c.o, 1<<20)
			got, err := Open(img, []byte("correct horse"))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if !bytes.Equal(got.Key, want.Key) {
				t.Fatalf("key differs from Format's")
			}
			wantSector := max(c.o.SectorSize, 512)
			if got.Version != 2 || got.UUID != want.UUID || got.Cipher != want.Cipher ||
				got.SectorSize != wantSector || got.Offset != 16<<20 || got.Size != -1 ||
				got.IVShift != 0 || got.IVOffset != 0 {
				t.Fatalf("Open = %+v, Format = %+v", got, want)
			}
			_, err = Open(img, []byte("correct horse "))
			wantErr(t, err, ErrWrongPassphrase)
		})
	}
}

func TestFormatRejects(t *testing.T) {
	for name, o := range map[string]FormatOptions{
		"serpent":          {Cipher: "serpent-xts-plain64"},
		"xts-48":           {KeyBytes: 48},
		"sector-768":       {SectorSize: 768},
		"pbkdf2-999":       {PBKDF: "pbkdf2", Iterations: 999},
		"argon2-time-3":    {Time: 3},
		"argon2-threads-5": {Threads: 5},
		"argon2-mem-16":    {MemoryKiB: 16},
		"scrypt":           {PBKDF: "scrypt"},
		"whirlpool":        {PBKDF: "pbkdf2", Iterations: 1000, Hash: "whirlpool"},
		"label-48":         {Label: strings.Repeat("x", 48)},
	} {
		if _, err := Format(&memImage{}, 17<<20, []byte("p"), o); err == nil {
			t.Errorf("%s: Format accepted %+v", name, o)
		}
	}
	if _, err := Format(&memImage{}, 16<<20, []byte("p"), cheapFormat); err == nil {
		t.Errorf("Format accepted an image without payload")
	}
	o := cheapFormat
	o.SectorSize = 4096
	if _, err := Format(&memImage{}, 16<<20+6144, []byte("p"), o); err == nil {
		t.Errorf("Format accepted a payload that is not a whole number of sectors")
	}
}

// TestDamagedPrimary flips one byte at a time in places the primary header
// copy depends on: Open must fall back to the secondary copy.
func TestDamagedPrimary(t *testing.T) {
	base, want := formatMem(t, "pw", cheapFormat, 4096)
	jsonLen := bytes.IndexByte(base.b[bin2Len:], 0)
	for name, off := range map[string]int{
		"magic":         0,
		"version":       bin2Version + 1,
		"hdr_size":      bin2HdrSize + 6,
		"seqid":         bin2SeqID + 7,
		"label":         bin2Label,
		"checksum_alg":  bin2ChecksumAlg + 3,
		"uuid":          bin2UUID + 5,
		"hdr_offset":    bin2HdrOffset + 7,
		"checksum":      bin2Checksum + 9,
		"padding":       2000,
		"json-start":    bin2Len,
		"json-middle":   bin2Len + jsonLen/2,
		"json-nul":      bin2Len + jsonLen,
		"json-trailing": formatHdrSize - 1,
	} {
		t.Run(name, func(t *testing.T) {
			img := &memImage{b: bytes.Clone(base.b)}
			img.b[off] ^= 0x01
			got, err := Open(img, []byte("pw"))
			if err != nil {
				t.Fatalf("Open with damaged primary (%s): %v", name, err)
			}
			if !bytes.Equal(got.Key, want.Key) {
				t.Fatalf("wrong key")
			}
			// Now damage the secondary copy too. With no magic left
			// anywhere, the image is not LUKS at all.
			img.b[formatHdrSize+off] ^= 0x01
			_, err = Open(img, []byte("pw"))
			if name == "magic" {
				wantErr(t, err, ErrNotLUKS)
			} else {
				wantErr(t, err, ErrCorruptHeader)
			}
		})
	}
}

func TestDamagedSecondary(t *testing.T) {
	img, want := formatMem(t, "pw", cheapFormat, 4096)
	img.b[formatHdrSize+bin2Len+10] ^= 0x80
	got, err := Open(img, []byte("pw"))
	if err != nil || !bytes.Equal(got.Key, want.Key) {
		t.Fatalf("Open with damaged secondary: %v", err)
	}
}

func TestNotLUKS(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":  nil,
		"short":  []byte("LUKS"),
		"zeros":  make([]byte, 1<<20),
		"luks2?": append([]byte("LUKT\xba\xbe\x00\x02"), make([]byte, 40000)...),
	} {
		_, err := Open(bytes.NewReader(b), []byte("pw"))
		wantErr(t, err, ErrNotLUKS)
		_ = name
	}
	// A primary magic on an image too short for the rest is damage.
	_, err := Open(bytes.NewReader(append([]byte("LUKS\xba\xbe\x00\x02"), make([]byte, 5000)...)), []byte("pw"))
	wantErr(t, err, ErrCorruptHeader)
}

// TestSeqID: of two valid copies the one with the higher seqid wins, the
// primary on a tie. The copies differ in their segment's sector size so the
// result shows which one was used.
func TestSeqID(t *testing.T) {
	base, _ := formatMem(t, "pw", cheapFormat, 1<<20)
	rewriteCopy(t, base.b, formatHdrSize, func(m map[string]any) {
		path(m, "segments", "0")["sector_size"] = 4096
	})
	for _, c := range []struct {
		primary, secondary uint64
		sector             int
	}{
		{1, 1, 512},
		{1, 2, 4096},
		{3, 2, 512},
	} {
		img := &memImage{b: bytes.Clone(base.b)}
		setSeqID(t, img.b, 0, c.primary)
		setSeqID(t, img.b, formatHdrSize, c.secondary)
		v, err := Open(img, []byte("pw"))
		if err != nil {
			t.Fatal(err)
		}
		if v.SectorSize != c.sector {
			t.Errorf("seqid %d/%d: sector size %d, want %d", c.primary, c.secondary, v.SectorSize, c.sector)
		}
	}
}

// TestSecondaryProbe: with the primary binary header destroyed, the
// secondary copy is found at the offsets cryptsetup probes, here 32 KiB for
// a header with 32 KiB copies.
func TestSecondaryProbe(t *testing.T) {
	img, want := formatMem(t, "pw", cheapFormat, 4096)
	// Rebuild the copies as 32 KiB ones: the keyslot at 32 KiB must move,
	// so only the header layout changes and the keyslot is re-pointed.
	b := img.b
	area := bytes.Clone(b[formatKeyslotsOff : formatKeyslotsOff+256000])
	jsonText := bytes.Clone(b[bin2Len : bin2Len+bytes.IndexByte(b[bin2Len:], 0)])
	var m map[string]any
	d := json.NewDecoder(bytes.NewReader(jsonText))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	path(m, "config")["json_size"] = "28672"
	path(m, "keyslots", "0", "area")["offset"] = "65536"
	text, _ := json.Marshal(m)
	out := make([]byte, 17<<20)
	copy(out[65536:], area)
	for _, off := range []int64{0, 0x8000} {
		jsonArea := make([]byte, 0x8000-bin2Len)
		copy(jsonArea, text)
		bin, err := binaryHeader2(off, 0x8000, 1, "", want.UUID, jsonArea)
		if err != nil {
			t.Fatal(err)
		}
		copy(out[off:], bin)
		copy(out[off+bin2Len:], jsonArea)
	}
	v, err := Open(bytes.NewReader(out), []byte("pw"))
	if err != nil || !bytes.Equal(v.Key, want.Key) {
		t.Fatalf("Open of a 32 KiB header: %v", err)
	}
	clear(out[:bin2Len]) // primary gone: no hdr_size to follow
	v, err = Open(bytes.NewReader(out), []byte("pw"))
	if err != nil || !bytes.Equal(v.Key, want.Key) {
		t.Fatalf("Open with the primary wiped: %v", err)
	}
}

// TestUnsupported: volumes that are valid LUKS2 but that sector cannot
// decrypt, or that use features this package does not implement, fail with
// ErrUnsupported naming what is missing, before any KDF work.
func TestUnsupported(t *testing.T) {
	base, _ := formatMem(t, "pw", cheapFormat, 4096)
	cases := []struct {
		name, want string
		edit       func(m map[string]any)
	}{
		{"serpent", "serpent-xts-plain64", func(m map[string]any) {
			path(m, "segments", "0")["encryption"] = "serpent-xts-plain64"
		}},
		{"twofish", "twofish-cbc-essiv:sha256", func(m map[string]any) {
			path(m, "segments", "0")["encryption"] = "twofish-cbc-essiv:sha256"
		}},
		{"xts-essiv", "aes-xts-essiv:sha256", func(m map[string]any) {
			path(m, "segments", "0")["encryption"] = "aes-xts-essiv:sha256"
		}},
		{"keyslot-cipher", "serpent-xts-plain64", func(m map[string]any) {
			path(m, "keyslots", "0", "area")["encryption"] = "serpent-xts-plain64"
		}},
		{"kdf", "scrypt", func(m map[string]any) {
			path(m, "keyslots", "0", "kdf")["type"] = "scrypt"
		}},
		{"af-hash", "whirlpool", func(m map[string]any) {
			path(m, "keyslots", "0", "af")["hash"] = "whirlpool"
		}},
		{"integrity", "integrity", func(m map[string]any) {
			path(m, "segments", "0")["integrity"] = map[string]any{"type": "hmac(sha256)"}
		}},
		{"requirement", "online-reencrypt", func(m map[string]any) {
			path(m, "config")["requirements"] = map[string]any{"mandatory": []any{"online-reencrypt-v2"}}
		}},
		{"linear", "linear", func(m map[string]any) {
			path(m, "segments")["1"] = map[string]any{"type": "linear", "offset": "0", "size": "dynamic"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := &memImage{b: bytes.Clone(base.b)}
			rewriteJSON(t, img.b, c.edit)
			_, err := Open(img, []byte("pw"))
			wantErr(t, err, ErrUnsupported)
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
}

// TestBounds: header values that would size an allocation or a computation
// beyond what cryptsetup allows make the copy corrupt; with both copies
// edited Open fails with ErrCorruptHeader, having allocated nothing big.
func TestBounds(t *testing.T) {
	base, _ := formatMem(t, "pw", cheapFormat, 4096)
	edits := map[string]func(m map[string]any){
		"stripes":        func(m map[string]any) { path(m, "keyslots", "0", "af")["stripes"] = 4001 },
		"stripes-0":      func(m map[string]any) { path(m, "keyslots", "0", "af")["stripes"] = 0 },
		"key_size":       func(m map[string]any) { path(m, "keyslots", "0")["key_size"] = 129 },
		"key_size-neg":   func(m map[string]any) { path(m, "keyslots", "0")["key_size"] = -1 },
		"area-key_size":  func(m map[string]any) { path(m, "keyslots", "0", "area")["key_size"] = 1 << 20 },
		"area-offset":    func(m map[string]any) { path(m, "keyslots", "0", "area")["offset"] = "17179869184" },
		"area-in-header": func(m map[string]any) { path(m, "keyslots", "0", "area")["offset"] = "4096" },
		"area-size":      func(m map[string]any) { path(m, "keyslots", "0", "area")["size"] = "4096" },
		"area-huge":      func(m map[string]any) { path(m, "keyslots", "0", "area")["size"] = "18446744073709551615" },
		"area-number":    func(m map[string]any) { path(m, "keyslots", "0", "area")["offset"] = 32768 },
		"argon2-memory": func(m map[string]any) {
			path(m, "keyslots", "0")["kdf"] = map[string]any{"type": "argon2id", "time": 4, "memory": 4194305, "cpus": 1,
				"salt": path(m, "keyslots", "0", "kdf")["salt"]}
		},
		"argon2-cpus-0": func(m map[string]any) {
			path(m, "keyslots", "0")["kdf"] = map[string]any{"type": "argon2id", "time": 4, "memory": 1024, "cpus": 0,
				"salt": path(m, "keyslots", "0", "kdf")["salt"]}
		},
		"iterations-0":   func(m map[string]any) { path(m, "keyslots", "0", "kdf")["iterations"] = 0 },
		"iterations-big": func(m map[string]any) { path(m, "keyslots", "0", "kdf")["iterations"] = 1 << 33 },
		"salt":           func(m map[string]any) { path(m, "keyslots", "0", "kdf")["salt"] = "AAAA" },
		"digest-iter":    func(m map[string]any) { path(m, "digests", "0")["iterations"] = 0 },
		"digest-keyslot": func(m map[string]any) { path(m, "digests", "0")["keyslots"] = []any{"7"} },
		"sector_size":    func(m map[string]any) { path(m, "segments", "0")["sector_size"] = 8192 },
		"segment-offset": func(m map[string]any) { path(m, "segments", "0")["offset"] = "-1" },
		"priority":       func(m map[string]any) { path(m, "keyslots", "0")["priority"] = 3 },
		"json_size":      func(m map[string]any) { path(m, "config")["json_size"] = "4096" },
		"no-digests":     func(m map[string]any) { delete(m, "digests") },
		"keyslot-id":     func(m map[string]any) { path(m, "keyslots")["x"] = path(m, "keyslots", "0") },
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			img := &memImage{b: bytes.Clone(base.b)}
			rewriteJSON(t, img.b, edit)
			_, err := open(img, []byte("pw"), defaultLimits)
			wantErr(t, err, ErrCorruptHeader)
		})
	}
	t.Run("hdr_size", func(t *testing.T) {
		img := &memImage{b: bytes.Clone(base.b)}
		for _, off := range []int64{0, formatHdrSize} {
			// 4 GiB + 16 KiB; refused before the checksum is looked at.
			img.b[off+bin2HdrSize+3] = 0x01
		}
		_, err := Open(img, []byte("pw"))
		wantErr(t, err, ErrCorruptHeader)
	})
	t.Run("truncated", func(t *testing.T) {
		// The keyslot area lies beyond the end of the image.
		_, err := Open(bytes.NewReader(base.b[:40000]), []byte("pw"))
		wantErr(t, err, ErrCorruptHeader)
	})
}

// TestKeyslotOrder: a keyslot with priority "ignore" is never tried, and
// among the others the right one is found whatever its place.
func TestKeyslotOrder(t *testing.T) {
	img, want := formatMem(t, "pw", cheapFormat, 4096)
	rewriteJSON(t, img.b, func(m map[string]any) {
		path(m, "keyslots", "0")["priority"] = 0
	})
	_, err := Open(img, []byte("pw"))
	wantErr(t, err, ErrWrongPassphrase)
	rewriteJSON(t, img.b, func(m map[string]any) {
		path(m, "keyslots", "0")["priority"] = 2
	})
	v, err := Open(img, []byte("pw"))
	if err != nil || !bytes.Equal(v.Key, want.Key) {
		t.Fatalf("Open with a high-priority keyslot: %v", err)
	}
}

// TestIOError: an error from the reader other than a short read is
// returned as is, not disguised as a corrupt header.
func TestIOError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Open(failingReader{boom}, []byte("pw"))
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want %v", err, boom)
	}
}

type failingReader struct{ err error }

func (f failingReader) ReadAt(p []byte, off int64) (int, error) { return 0, f.err }
