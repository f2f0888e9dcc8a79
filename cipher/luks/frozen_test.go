package luks

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"os"
	"testing"
)

// Frozen volumes made by cryptsetup 2.6.1 (testdata/gen-fixtures.sh): they
// must keep opening, with or without cryptsetup installed.

// readGz returns the decompressed content of testdata/name.
func readGz(t testing.TB, name string) []byte {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestFrozenLUKS1(t *testing.T) {
	img := readGz(t, "luks1-cbc-essiv-128.img.gz")
	v, err := Open(bytes.NewReader(img), []byte("twincrypt"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Volume{Version: 1, UUID: v.UUID, Cipher: "aes-cbc-essiv:sha256",
		Key: mustHex("2f5ac826de61984a1aa14deb36608411"), SectorSize: 512, Offset: 1032 * 512, Size: -1}
	if !equalVolume(v, want) || len(v.UUID) != 36 {
		t.Fatalf("Open = %+v, want %+v", v, want)
	}
	_, err = Open(bytes.NewReader(img), []byte("Twincrypt"))
	wantErr(t, err, ErrWrongPassphrase)
}

// TestFrozenLUKS2Data opens a detached LUKS2 header (argon2id, 4096-byte
// sectors) and decrypts 64 KiB that cryptsetup encrypted, with the IV rule
// documented on Volume.
func TestFrozenLUKS2Data(t *testing.T) {
	hdr := readGz(t, "luks2-xts-4096.hdr.gz")
	data := readGz(t, "luks2-xts-4096.data.gz")
	v, err := Open(bytes.NewReader(hdr), []byte("twincrypt"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Volume{Version: 2, UUID: v.UUID, Cipher: "aes-xts-plain64",
		Key:        mustHex("6ba48227b2ccde5e4a0ad222267cecce894b949b27e0465ae96cec60e3884d06"),
		SectorSize: 4096, Offset: 0, Size: -1}
	if !equalVolume(v, want) {
		t.Fatalf("Open = %+v, want %+v", v, want)
	}
	if got := decryptVolume(t, v, data, volumeIV(v)); !bytes.Equal(got, pattern(len(data), "fixture")) {
		t.Fatal("the frozen data does not decrypt")
	}
	_, err = Open(bytes.NewReader(hdr), []byte("twincrypt\n"))
	wantErr(t, err, ErrWrongPassphrase)
}

func equalVolume(a, b *Volume) bool {
	return a.Version == b.Version && a.UUID == b.UUID && a.Cipher == b.Cipher && bytes.Equal(a.Key, b.Key) &&
		a.SectorSize == b.SectorSize && a.IVShift == b.IVShift && a.IVOffset == b.IVOffset &&
		a.Offset == b.Offset && a.Size == b.Size
}
