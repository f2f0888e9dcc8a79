package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/report"
)

// reportCLI runs the command line in-process: report needs no mount.
func reportCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// writeOpLog writes n reads (100 µs, twin 50 µs) and n/2 lookups, one op
// every millisecond from start, to path.
func writeOpLog(t *testing.T, path string, start time.Time, n int) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range n + n/2 {
		l := measure.LogLine{TS: start.Add(time.Duration(i) * time.Millisecond), Mount: "/mnt/v",
			Op: "read", Ino: 7, Len: 4096, Ns: 100_000, CryptoNs: 30_000, LowerNs: 40_000, TwinNs: 50_000}
		if i >= n {
			l.Op, l.Len, l.Ns, l.CryptoNs, l.TwinNs, l.Path = "lookup", 0, 20_000, 1_000, 15_000, "/a/b"
		}
		if err := enc.Encode(&l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

var logStart = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func TestReportTable(t *testing.T) {
	log := filepath.Join(t.TempDir(), "ops.log")
	writeOpLog(t, log, logStart, 200)
	r := reportCLI(t, "report", log)
	r.expectExit(t, 0, "report")
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	for _, want := range []string{
		"300 lines", "mirror mode", "latency per op", "p99.9", "MiB/s", "crypto%",
		"read      200       0   100µs", "encrypted vs twin", "2.00", "slowest 20 ops", "latency over time",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestReportMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.log")
	r := reportCLI(t, "report", missing)
	r.expectExit(t, exitError, "report of a missing file")
	if !strings.Contains(r.stderr, missing) || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("stderr does not say which file is missing: %q", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout: %q", r.stdout)
	}
}

func TestReportAllMalformed(t *testing.T) {
	log := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(log, []byte("these are\nnot op log lines\n"), 0o600)
	r := reportCLI(t, "report", log)
	r.expectExit(t, exitError, "report of a file that is no op log")
	if !strings.Contains(r.stderr, "all 2 line(s) are malformed") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

func TestReportOutputs(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "ops.log")
	writeOpLog(t, log, logStart, 100)

	r := reportCLI(t, "report", "--csv", log)
	r.expectExit(t, 0, "report --csv")
	rows, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][0] != "mount" || rows[1][1] != "read" {
		t.Errorf("--csv: %v\n%s", err, r.stdout)
	}

	r = reportCLI(t, "report", "--json", "--top", "2", log)
	r.expectExit(t, 0, "report --json")
	var rep report.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	if rep.Lines != 150 || len(rep.Slowest) != 2 || !rep.Mirror || len(rep.Ops) != 2 {
		t.Errorf("--json: lines %d slowest %d mirror %v ops %d", rep.Lines, len(rep.Slowest), rep.Mirror, len(rep.Ops))
	}

	cdf, tl := filepath.Join(dir, "cdf.svg"), filepath.Join(dir, "time.png")
	r = reportCLI(t, "report", "--chart", cdf, "--chart-time", tl, "--top", "0", log)
	r.expectExit(t, 0, "report --chart")
	for _, p := range []string{cdf, tl} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("chart %s: %v", p, err)
		}
	}
	if strings.Contains(r.stdout, "slowest") {
		t.Error("--top 0 still lists slowest ops")
	}
}

func TestReportRotated(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "ops.log")
	writeOpLog(t, log+".1", logStart, 100)
	writeOpLog(t, log, logStart.Add(time.Minute), 100)

	r := reportCLI(t, "report", "--json", log)
	r.expectExit(t, 0, "report of a rotated log")
	var rep report.Report
	json.Unmarshal([]byte(r.stdout), &rep)
	if rep.Lines != 300 || len(rep.Files) != 2 || rep.Files[0] != log+".1" {
		t.Errorf("rotated: %d lines from %q, want 300 from both", rep.Lines, rep.Files)
	}

	r = reportCLI(t, "report", "--json", "--rotated=false", log)
	r.expectExit(t, 0, "report --rotated=false")
	rep = report.Report{}
	json.Unmarshal([]byte(r.stdout), &rep)
	if rep.Lines != 150 {
		t.Errorf("--rotated=false: %d lines, want 150", rep.Lines)
	}
}

func TestReportUsageErrors(t *testing.T) {
	log := filepath.Join(t.TempDir(), "ops.log")
	writeOpLog(t, log, logStart, 10)
	for _, args := range [][]string{
		{"report"},
		{"report", "--csv", "--json", log},
		{"report", "--chart", "out.gif", log},
		{"report", "--chart-time", "out", log},
		{"report", "--buckets", "1", log},
		{"report", "--top", "-1", log},
		{"report", "--no-such-flag", log},
	} {
		r := reportCLI(t, args...)
		r.expectExit(t, exitUsage, strings.Join(args, " "))
	}
}

// TestHelpDefinesOpClasses: report and bench, whose charts group ops by
// class, define the classes in their help, with every op of each class.
func TestHelpDefinesOpClasses(t *testing.T) {
	for _, sub := range []string{"report", "bench"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{sub, "--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d: %s", sub, code, stderr.String())
		}
		help := strings.Join(strings.Fields(stdout.String()), " ")
		for _, want := range []string{
			"Op classes:",
			"data: move or sync file content",
			"metadata: read or change what an existing name carries",
			"namespace: create, remove or rename names",
			"create, link, mkdir, mknod, rename, rmdir, symlink, unlink.",
		} {
			if !strings.Contains(help, want) {
				t.Errorf("%s --help lacks %q", sub, want)
			}
		}
	}
}
