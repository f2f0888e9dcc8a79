package luks

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// memImage is an in-memory image: an io.ReaderAt and io.WriterAt that grows.
type memImage struct{ b []byte }

func (m *memImage) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memImage) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(m.b).ReadAt(p, off)
}

// testLimits keep the KDF cheap where a test feeds Open arbitrary headers.
var testLimits = limits{maxPBKDF2Iterations: 1000, maxArgon2Time: 4, maxArgon2MemoryKiB: 1024}

// cheapFormat is a Format configuration that costs milliseconds.
var cheapFormat = FormatOptions{PBKDF: "pbkdf2", Iterations: 1000}

// formatMem formats a fresh in-memory image of 16 MiB plus payloadSize.
func formatMem(t testing.TB, pass string, o FormatOptions, payloadSize int64) (*memImage, *Volume) {
	t.Helper()
	img := &memImage{}
	size := formatDataOffset + payloadSize
	v, err := Format(img, size, []byte(pass), o)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	img.WriteAt(make([]byte, payloadSize), formatDataOffset)
	return img, v
}

// rewriteJSON edits the JSON metadata of both LUKS2 header copies in img
// (through a generic map, so it can write what Format never would) and
// recomputes their checksums, leaving everything else alone.
func rewriteJSON(t testing.TB, img []byte, edit func(m map[string]any)) {
	t.Helper()
	rewriteCopy(t, img, 0, edit)
	rewriteCopy(t, img, int64(binary.BigEndian.Uint64(img[bin2HdrSize:])), edit)
}

// rewriteCopy edits the JSON metadata of the header copy at off.
func rewriteCopy(t testing.TB, img []byte, off int64, edit func(m map[string]any)) {
	t.Helper()
	size := int64(binary.BigEndian.Uint64(img[off+bin2HdrSize:]))
	area := img[off+bin2Len : off+size]
	var m map[string]any
	text := area[:bytes.IndexByte(area, 0)]
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("rewriteCopy: %v", err)
	}
	edit(m)
	out, err := json.Marshal(m)
	if err != nil || len(out) >= len(area) {
		t.Fatalf("rewriteCopy: marshal: %v (%d bytes)", err, len(out))
	}
	clear(area)
	copy(area, out)
	fixChecksum(t, img, off)
}

// setSeqID sets the seqid of the header copy at off and fixes its checksum.
func setSeqID(t testing.TB, img []byte, off int64, seq uint64) {
	t.Helper()
	binary.BigEndian.PutUint64(img[off+bin2SeqID:], seq)
	fixChecksum(t, img, off)
}

// fixChecksum recomputes the checksum of the header copy at off.
func fixChecksum(t testing.TB, img []byte, off int64) {
	t.Helper()
	bin := img[off : off+bin2Len]
	size := int64(binary.BigEndian.Uint64(bin[bin2HdrSize:]))
	sum, err := checksum2("sha256", bin, img[off+bin2Len:off+size])
	if err != nil {
		t.Fatal(err)
	}
	copy(bin[bin2Checksum:bin2Checksum+bin2ChecksumLen], make([]byte, bin2ChecksumLen))
	copy(bin[bin2Checksum:], sum)
}

// path walks a JSON map: path(m, "segments", "0") is m["segments"]["0"].
func path(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}

// --- cryptsetup -------------------------------------------------------------

// cryptsetup returns the path of the cryptsetup binary or skips the test.
func cryptsetup(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("cryptsetup")
	if err != nil {
		t.Skip("cryptsetup is not installed (apt-get install cryptsetup-bin): interop test skipped")
	}
	return p
}

// run runs cryptsetup with args and fails the test on error.
func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := runErr(t, args...)
	if err != nil {
		t.Fatalf("cryptsetup %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runErr runs cryptsetup with args and returns its combined output.
func runErr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(cryptsetup(t), args...)
	// No locking directory, no udev: all of this works on plain files.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cryptsetupVersion returns the "cryptsetup X.Y.Z" line.
func cryptsetupVersion(t testing.TB) string {
	return strings.TrimSpace(run(t, "--version"))
}

// writeFile writes data to a new file in dir and returns its path.
func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// sparseImage creates an empty file of size bytes.
func sparseImage(t testing.TB, dir, name string, size int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

var mkDumpRE = regexp.MustCompile(`(?s)MK dump:\s*(.*)$`)

// dumpVolumeKey asks cryptsetup for the volume key of img.
func dumpVolumeKey(t testing.TB, img, keyFile string) []byte {
	t.Helper()
	out, err := runErr(t, "luksDump", "--dump-volume-key", "--batch-mode", "--key-file", keyFile, img)
	if err != nil && strings.Contains(out, "dump-volume-key") {
		// cryptsetup before 2.4 calls it --dump-master-key.
		out, err = runErr(t, "luksDump", "--dump-master-key", "--batch-mode", "--key-file", keyFile, img)
	}
	if err != nil {
		t.Fatalf("luksDump --dump-volume-key: %v\n%s", err, out)
	}
	m := mkDumpRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no MK dump in:\n%s", out)
	}
	key, err := hex.DecodeString(strings.Join(strings.Fields(m[1]), ""))
	if err != nil {
		t.Fatalf("MK dump: %v\n%s", err, out)
	}
	return key
}

// openFile opens the image at p with Open.
func openFile(t testing.TB, p, pass string) (*Volume, error) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return Open(f, []byte(pass))
}

// mustOpenFile opens p and fails the test on error.
func mustOpenFile(t testing.TB, p, pass string) *Volume {
	t.Helper()
	v, err := openFile(t, p, pass)
	if err != nil {
		t.Fatalf("Open(%s): %v", filepath.Base(p), err)
	}
	return v
}

// wantErr fails unless err wraps target.
func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

// fileSum is the SHA-256 of the first n bytes of the file at p.
func fileSum(t testing.TB, p string, n int64) [32]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b[:min(n, int64(len(b)))])
}
