package report

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

func TestMalformedLinesCountedAndSkipped(t *testing.T) {
	good := encodeLog(t, []measure.LogLine{
		{TS: t0, Mount: "m", Op: "read", Ns: 10 * us},
		{TS: t0.Add(time.Second), Mount: "m", Op: "read", Ns: 30 * us},
	})
	goodLines := strings.SplitAfter(string(good), "\n")
	var b strings.Builder
	b.WriteString(goodLines[0])
	for _, bad := range []string{
		"not json at all\n",
		`{"ts":"2026-11-30T10:00:00Z","mount":"m","op":"read","ns":` + "\n", // truncated
		`{"ts":"2026-11-30T10:00:00Z","mount":"m","ns":5}` + "\n",           // no op
		`{"mount":"m","op":"read","ns":5}` + "\n",                           // no ts
		`{"ts":"yesterday","mount":"m","op":"read","ns":5}` + "\n",          // bad ts
		`{"ts":"2026-11-30T10:00:00Z","mount":"m","op":"read","ns":-5}` + "\n",
		`{"ts":"2026-11-30T10:00:00Z","mount":"m","op":"read","ns":"fast"}` + "\n",
		`[1,2,3]` + "\n",
		`{"ts":"2026-11-30T10:00:00Z","op":"read","path":"` + strings.Repeat("x", MaxLine) + `"}` + "\n", // too long
		"\x00\xff\xfe binary\n",
	} {
		b.WriteString(bad)
	}
	b.WriteString("\n   \n")    // blank lines: neither data nor malformed
	b.WriteString(goodLines[1]) // after a too-long line, reading goes on
	// A last line without its newline still counts.
	b.WriteString(strings.TrimSuffix(goodLines[0], "\n"))

	a := NewAggregator(Options{})
	// One byte at a time would take too long for the 1 MiB line; half
	// reads still exercise lines split across reads.
	if err := a.Read(iotest.HalfReader(strings.NewReader(b.String())), "bad.log"); err != nil {
		t.Fatalf("Read: %v", err)
	}
	r := a.Report()
	if r.Lines != 3 || r.Malformed != 10 {
		t.Errorf("lines %d malformed %d, want 3 and 10", r.Lines, r.Malformed)
	}
	if read := opOf(t, r, "m", "read"); read.Crypt.Count != 3 || read.Crypt.MaxNs != 30*us {
		t.Errorf("read count %d max %d", read.Crypt.Count, read.Crypt.MaxNs)
	}
	if len(r.MalformedExamples) != maxExamples {
		t.Fatalf("examples %q, want %d", r.MalformedExamples, maxExamples)
	}
	if !strings.HasPrefix(r.MalformedExamples[0], "bad.log:2: ") || !strings.HasPrefix(r.MalformedExamples[2], "bad.log:4: ") ||
		!strings.Contains(r.MalformedExamples[2], `no "op"`) {
		t.Errorf("examples do not name file, line and reason: %q", r.MalformedExamples)
	}
	// A too-long line is reported as such, with its number.
	a = NewAggregator(Options{})
	long := `{"op":"` + strings.Repeat("y", MaxLine+10) + "\"}\n"
	if err := a.Read(strings.NewReader(long+goodLines[1]), "long.log"); err != nil {
		t.Fatal(err)
	}
	if r := a.Report(); r.Malformed != 1 || r.Lines != 1 || !strings.Contains(r.MalformedExamples[0], "long.log:1: longer than") {
		t.Errorf("long line: malformed %d lines %d examples %q", r.Malformed, r.Lines, r.MalformedExamples)
	}
}

// A long, valid line (a deep path) that does not fit in the read buffer
// is still read.
func TestLongValidLine(t *testing.T) {
	path := "/" + strings.Repeat("d/", 100_000) + "f"
	data := encodeLog(t, []measure.LogLine{{TS: t0, Mount: "m", Op: "read", Ns: 5 * us, Path: path}})
	if len(data) < 2*readBufSize {
		t.Fatalf("line of %d bytes does not exceed the buffer", len(data))
	}
	r := aggregate(t, Options{}, data)
	if r.Lines != 1 || r.Malformed != 0 || r.Slowest[0].Path != path {
		t.Errorf("lines %d malformed %d", r.Lines, r.Malformed)
	}
}

// An op log capped at MaxBytes rotates FILE to FILE.1; reading FILE picks
// up FILE.1 too, and the two together are the whole log.
func TestRotatedLog(t *testing.T) {
	dir := t.TempDir()
	all := mirrorLog()
	file := filepath.Join(dir, "ops.log")
	writeLog(t, file+".1", all[:700]) // older half
	writeLog(t, file, all[700:])

	paths := WithRotated([]string{file})
	if want := []string{file + ".1", file}; !slices.Equal(paths, want) {
		t.Fatalf("WithRotated = %q, want %q", paths, want)
	}
	// Listed explicitly, in any order: not read twice.
	for _, in := range [][]string{{file + ".1", file}, {file, file + ".1"}} {
		if got := WithRotated(in); len(got) != 2 {
			t.Errorf("WithRotated(%q) = %q", in, got)
		}
	}
	if got := WithRotated([]string{Stdin}); !slices.Equal(got, []string{Stdin}) {
		t.Errorf("WithRotated(stdin) = %q", got)
	}

	a := NewAggregator(Options{})
	for _, p := range paths {
		if err := a.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	r := a.Report()
	whole := aggregate(t, Options{}, encodeLog(t, all))
	if r.Lines != whole.Lines || !r.First.Equal(whole.First) || !r.Last.Equal(whole.Last) || len(r.Files) != 2 {
		t.Errorf("rotated: %d lines %v..%v files %q; whole: %d lines %v..%v",
			r.Lines, r.First, r.Last, r.Files, whole.Lines, whole.First, whole.Last)
	}
	for i := range whole.Ops {
		if got, want := r.Ops[i], whole.Ops[i]; got.Crypt != want.Crypt || *got.Twin != *want.Twin {
			t.Errorf("%s: rotated %+v, whole %+v", want.Op, got.Crypt, want.Crypt)
		}
	}
}

func TestGzipLog(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write(encodeLog(t, mirrorLog()))
	zw.Close()
	path := tempPath(t, "ops.log.gz")
	if err := os.WriteFile(path, zb.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	a := NewAggregator(Options{})
	if err := a.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if r := a.Report(); r.Lines != 1600 || r.Malformed != 0 {
		t.Errorf("gzip: lines %d malformed %d", r.Lines, r.Malformed)
	}

	// A .gz that is not gzip is an error, not 1600 malformed lines.
	bad := tempPath(t, "plain.gz")
	os.WriteFile(bad, encodeLog(t, mirrorLog()), 0o600)
	if err := NewAggregator(Options{}).ReadFile(bad); err == nil || !strings.Contains(err.Error(), "plain.gz") {
		t.Errorf("non-gzip .gz: err = %v", err)
	}
	// A truncated gzip stream is a read error naming the file.
	trunc := tempPath(t, "trunc.log.gz")
	os.WriteFile(trunc, zb.Bytes()[:zb.Len()/2], 0o600)
	if err := NewAggregator(Options{}).ReadFile(trunc); err == nil || !strings.Contains(err.Error(), "trunc.log.gz") {
		t.Errorf("truncated gzip: err = %v", err)
	}
}

func TestMissingFile(t *testing.T) {
	err := NewAggregator(Options{}).ReadFile(filepath.Join(t.TempDir(), "nope.log"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.log") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestReadError(t *testing.T) {
	boom := errors.New("disk on fire")
	err := NewAggregator(Options{}).Read(iotest.ErrReader(boom), "x.log")
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "x.log") {
		t.Errorf("err = %v", err)
	}
}
