package luks

import (
	"bytes"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Interop with the real cryptsetup, which formats, dumps and tests
// passphrases on plain image files without device-mapper. The tests skip
// when cryptsetup is not installed (CI installs cryptsetup-bin).

// kdfArgs are cheap KDF settings cryptsetup accepts (its minimums).
func kdfArgs(pbkdf, hash string) []string {
	if pbkdf == "pbkdf2" {
		return []string{"--pbkdf", "pbkdf2", "--hash", hash, "--pbkdf-force-iterations", "1000"}
	}
	return []string{"--pbkdf", pbkdf, "--hash", hash, "--pbkdf-force-iterations", "4",
		"--pbkdf-memory", "32", "--pbkdf-parallel", "1"}
}

// luksFormat runs cryptsetup luksFormat on a new sparse image and returns
// its path and the key file holding pass.
func luksFormat(t *testing.T, dir, typ, cipher string, keyBits, sectorSize int, pbkdf, hash, pass string) (img, keyFile string) {
	t.Helper()
	img = sparseImage(t, dir, "img", 20<<20)
	keyFile = writeFile(t, dir, "key", []byte(pass))
	args := []string{"luksFormat", "--batch-mode", "--type", typ, "--key-file", keyFile,
		"--cipher", cipher, "--key-size", strconv.Itoa(keyBits)}
	if typ == "luks2" {
		args = append(args, "--sector-size", strconv.Itoa(sectorSize))
	}
	args = append(args, kdfArgs(pbkdf, hash)...)
	run(t, append(args, img)...)
	return img, keyFile
}

func TestCryptsetupOpen(t *testing.T) {
	cryptsetup(t)
	t.Logf("%s", cryptsetupVersion(t))
	cases := []struct {
		typ, cipher string
		keyBits     int
		sector      int
		pbkdf, hash string
		wantOffset  int64
		wantVersion int
	}{
		{"luks2", "aes-xts-plain64", 512, 512, "pbkdf2", "sha256", 16 << 20, 2},
		{"luks2", "aes-xts-plain64", 256, 512, "pbkdf2", "sha512", 16 << 20, 2},
		{"luks2", "aes-xts-plain64", 512, 4096, "argon2id", "sha256", 16 << 20, 2},
		{"luks2", "aes-xts-plain64", 256, 4096, "argon2i", "sha256", 16 << 20, 2},
		{"luks2", "aes-cbc-essiv:sha256", 256, 512, "pbkdf2", "sha256", 16 << 20, 2},
		{"luks2", "aes-cbc-essiv:sha256", 256, 4096, "argon2id", "sha1", 16 << 20, 2},
		{"luks1", "aes-xts-plain64", 512, 512, "pbkdf2", "sha256", 4096 * 512, 1},
		{"luks1", "aes-xts-plain64", 256, 512, "pbkdf2", "sha1", 4096 * 512, 1},
		{"luks1", "aes-cbc-essiv:sha256", 256, 512, "pbkdf2", "sha512", 4096 * 512, 1},
	}
	for _, c := range cases {
		name := strings.Join([]string{c.typ, c.cipher, strconv.Itoa(c.keyBits), strconv.Itoa(c.sector), c.pbkdf, c.hash}, "-")
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			img, keyFile := luksFormat(t, dir, c.typ, c.cipher, c.keyBits, c.sector, c.pbkdf, c.hash, "open sesame")
			v := mustOpenFile(t, img, "open sesame")
			if want := dumpVolumeKey(t, img, keyFile); !bytes.Equal(v.Key, want) {
				t.Fatalf("key %x, cryptsetup says %x", v.Key, want)
			}
			if v.Version != c.wantVersion || v.Cipher != c.cipher || v.SectorSize != c.sector ||
				v.Offset != c.wantOffset || v.Size != -1 || v.IVShift != 0 || v.IVOffset != 0 || len(v.UUID) != 36 {
				t.Fatalf("Volume = %+v", v)
			}
			if !strings.Contains(run(t, "luksDump", img), v.UUID) {
				t.Fatalf("UUID %s not in luksDump", v.UUID)
			}
			_, err := openFile(t, img, "open sesame!")
			wantErr(t, err, ErrWrongPassphrase)
			_, err = openFile(t, img, "")
			wantErr(t, err, ErrWrongPassphrase)
		})
	}
}

// TestCryptsetupAddKey: a passphrase added with luksAddKey (keyslot 1) opens
// the volume too, and gives the same key.
func TestCryptsetupAddKey(t *testing.T) {
	cryptsetup(t)
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			img, keyFile := luksFormat(t, dir, typ, "aes-xts-plain64", 512, 512, "pbkdf2", "sha256", "first")
			second := writeFile(t, dir, "key2", []byte("second"))
			args := append([]string{"luksAddKey", "--batch-mode", "--key-file", keyFile}, kdfArgs("pbkdf2", "sha256")...)
			run(t, append(args, img, second)...)
			v1 := mustOpenFile(t, img, "first")
			v2 := mustOpenFile(t, img, "second")
			if !bytes.Equal(v1.Key, v2.Key) || !bytes.Equal(v2.Key, dumpVolumeKey(t, img, second)) {
				t.Fatalf("keys differ")
			}
			_, err := openFile(t, img, "third")
			wantErr(t, err, ErrWrongPassphrase)
		})
	}
}

// TestCryptsetupDamagedHeader: a LUKS2 volume from cryptsetup with a byte
// flipped in the primary binary header or in its JSON area still opens,
// through the secondary copy; with both copies damaged it is
// ErrCorruptHeader. (cryptsetup itself would repair the damaged copy on its
// next run, so the image is not shown to cryptsetup after the damage.)
func TestCryptsetupDamagedHeader(t *testing.T) {
	cryptsetup(t)
	dir := t.TempDir()
	img, keyFile := luksFormat(t, dir, "luks2", "aes-xts-plain64", 512, 4096, "argon2id", "sha256", "pw")
	want := dumpVolumeKey(t, img, keyFile)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	jsonLen := bytes.IndexByte(orig[bin2Len:], 0)
	for name, off := range map[string]int{
		"binary-magic": 2,
		"binary-seqid": bin2SeqID + 7,
		"binary-uuid":  bin2UUID + 3,
		"json":         bin2Len + jsonLen/3,
	} {
		t.Run(name, func(t *testing.T) {
			b := bytes.Clone(orig)
			b[off] ^= 0x20
			p := writeFile(t, t.TempDir(), "damaged", b)
			v := mustOpenFile(t, p, "pw")
			if !bytes.Equal(v.Key, want) {
				t.Fatalf("wrong key through the secondary header")
			}
			// Damage the secondary's JSON too, keeping its magic.
			b[bin2HdrSizeOf(orig)+bin2Len+1] ^= 0x20
			p = writeFile(t, t.TempDir(), "damaged2", b)
			_, err := openFile(t, p, "pw")
			wantErr(t, err, ErrCorruptHeader)
		})
	}
}

// TestCryptsetupSeqID: of two valid copies Open uses the newer. The image
// gets the primary header from before luksAddKey and the secondary from
// after: only the secondary knows keyslot 1.
func TestCryptsetupSeqID(t *testing.T) {
	cryptsetup(t)
	dir := t.TempDir()
	img, keyFile := luksFormat(t, dir, "luks2", "aes-xts-plain64", 512, 512, "pbkdf2", "sha256", "first")
	before, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	second := writeFile(t, dir, "key2", []byte("second"))
	args := append([]string{"luksAddKey", "--batch-mode", "--key-file", keyFile}, kdfArgs("pbkdf2", "sha256")...)
	run(t, append(args, img, second)...)
	after, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	hdrSize := bin2HdrSizeOf(after)
	copy(after[:hdrSize], before[:hdrSize])
	p := writeFile(t, dir, "mixed", after)
	if _, err := openFile(t, p, "second"); err != nil {
		t.Fatalf("the newer secondary copy was not used: %v", err)
	}
	// Reversed: the newer primary wins over the older secondary.
	after2, _ := os.ReadFile(img)
	copy(after2[hdrSize:2*hdrSize], before[hdrSize:2*hdrSize])
	p = writeFile(t, dir, "mixed2", after2)
	if _, err := openFile(t, p, "second"); err != nil {
		t.Fatalf("the newer primary copy was not used: %v", err)
	}
}

// TestFormatInterop: cryptsetup parses what Format writes, accepts its
// passphrase, rejects another, and dumps the same volume key; and it finds
// nothing to repair (the header bytes are unchanged after it ran).
func TestFormatInterop(t *testing.T) {
	cryptsetup(t)
	cases := map[string]FormatOptions{
		"default-costs": {},
		"pbkdf2":        {PBKDF: "pbkdf2", Iterations: 1000},
		"pbkdf2-sha512": {PBKDF: "pbkdf2", Iterations: 1000, Hash: "sha512", KeyBytes: 32},
		"argon2i-4096":  {PBKDF: "argon2i", Time: 4, MemoryKiB: 32, Threads: 1, SectorSize: 4096},
		"argon2id":      {PBKDF: "argon2id", Time: 4, MemoryKiB: 1024, Threads: 4, Label: "twincrypt"},
		"cbc-essiv":     {Cipher: "aes-cbc-essiv:sha256", KeyBytes: 32, PBKDF: "pbkdf2", Iterations: 1000},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "default-costs" && testing.Short() {
				t.Skip("argon2id with 64 MiB, several times: skipped with -short")
			}
			dir := t.TempDir()
			img := sparseImage(t, dir, "img", 17<<20)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			v, err := Format(f, 17<<20, []byte("format pass"), o)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			keyFile := writeFile(t, dir, "key", []byte("format pass"))
			wrongFile := writeFile(t, dir, "wrong", []byte("format pass?"))
			sum := fileSum(t, img, formatDataOffset)

			dump := run(t, "luksDump", img)
			for _, want := range []string{v.UUID, v.Cipher, "sector: " + strconv.Itoa(v.SectorSize), "offset: 16777216"} {
				if !strings.Contains(dump, want) {
					t.Errorf("luksDump lacks %q:\n%s", want, dump)
				}
			}
			if o.Label != "" && !strings.Contains(dump, o.Label) {
				t.Errorf("luksDump lacks the label:\n%s", dump)
			}
			run(t, "open", "--test-passphrase", "--key-file", keyFile, img)
			if out, err := runErr(t, "open", "--test-passphrase", "--key-file", wrongFile, img); err == nil {
				t.Fatalf("cryptsetup accepted a wrong passphrase:\n%s", out)
			}
			if got := dumpVolumeKey(t, img, keyFile); !bytes.Equal(got, v.Key) {
				t.Fatalf("cryptsetup's key %x, Format's %x", got, v.Key)
			}
			if fileSum(t, img, formatDataOffset) != sum {
				t.Fatalf("cryptsetup rewrote the header area: it found something to repair")
			}
			// And cryptsetup can add a keyslot to it, which Open reads.
			second := writeFile(t, dir, "key2", []byte("second"))
			args := append([]string{"luksAddKey", "--batch-mode", "--key-file", keyFile}, kdfArgs("pbkdf2", "sha256")...)
			run(t, append(args, img, second)...)
			if v2 := mustOpenFile(t, img, "second"); !bytes.Equal(v2.Key, v.Key) {
				t.Fatalf("key through cryptsetup's keyslot differs")
			}
		})
	}
}

// bin2HdrSizeOf returns the hdr_size field of the primary header in img.
func bin2HdrSizeOf(img []byte) int64 {
	return int64(binary.BigEndian.Uint64(img[bin2HdrSize:]))
}

// TestCryptsetupConvert: a LUKS1 volume converted in place to LUKS2 by
// cryptsetup (keyslot areas at LUKS1 offsets, a 20-byte digest) opens with
// the same key, as LUKS2.
func TestCryptsetupConvert(t *testing.T) {
	cryptsetup(t)
	dir := t.TempDir()
	img, keyFile := luksFormat(t, dir, "luks1", "aes-xts-plain64", 512, 512, "pbkdf2", "sha256", "convert me")
	v1 := mustOpenFile(t, img, "convert me")
	run(t, "convert", "--batch-mode", "--type", "luks2", img)
	v2 := mustOpenFile(t, img, "convert me")
	if v1.Version != 1 || v2.Version != 2 || !bytes.Equal(v1.Key, v2.Key) ||
		!bytes.Equal(v2.Key, dumpVolumeKey(t, img, keyFile)) || v1.Offset != v2.Offset || v1.UUID != v2.UUID {
		t.Fatalf("LUKS1 %+v, converted %+v", v1, v2)
	}
	_, err := openFile(t, img, "convert")
	wantErr(t, err, ErrWrongPassphrase)
}

// TestCryptsetupUnsupportedCipher: a volume cryptsetup formats with a cipher
// sector lacks is ErrUnsupported naming it. cryptsetup checks the cipher
// with the kernel through device-mapper, so without it (as on our build
// machines) the test skips; TestUnsupported covers the same with edited
// headers.
func TestCryptsetupUnsupportedCipher(t *testing.T) {
	cryptsetup(t)
	for _, c := range []string{"serpent-xts-plain64", "twofish-cbc-essiv:sha256"} {
		t.Run(c, func(t *testing.T) {
			dir := t.TempDir()
			img := sparseImage(t, dir, "img", 20<<20)
			keyFile := writeFile(t, dir, "key", []byte("pw"))
			args := append([]string{"luksFormat", "--batch-mode", "--type", "luks2", "--key-file", keyFile,
				"--cipher", c, "--key-size", "256"}, kdfArgs("pbkdf2", "sha256")...)
			if out, err := runErr(t, append(args, img)...); err != nil {
				t.Skipf("cryptsetup cannot format %s here: %s", c, strings.TrimSpace(out))
			}
			_, err := openFile(t, img, "pw")
			wantErr(t, err, ErrUnsupported)
			if !strings.Contains(err.Error(), c) {
				t.Fatalf("error %q does not name %s", err, c)
			}
		})
	}
}
