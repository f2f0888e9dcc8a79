package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

// escape is what a LOWER writer or a log writer puts in a string field:
// set the terminal's title, clear the screen, and a C1 CSI.
const escape = "\x1b]0;owned\x07\x1b[2J\u009b31mred"

// TestInfoQuotesCreator (issue #16 (6)): the config's creator field is
// not authenticated; `info` prints it with its escapes quoted.
func TestInfoQuotesCreator(t *testing.T) {
	lower := initVolume(t, writePassfile(t, "pw"))
	conf := filepath.Join(lower, "twincrypt.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["creator"] = escape
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", "info", lower)
	r.expectExit(t, exitOK, "info")
	if strings.ContainsAny(r.stdout, "\x1b\x07\u009b") {
		t.Errorf("info prints control characters raw:\n%q", r.stdout)
	}
	if want := `creator:   "\x1b]0;owned\a\x1b[2J\u009b31mred"`; !strings.Contains(r.stdout, want) {
		t.Errorf("info lacks %s:\n%s", want, r.stdout)
	}
}

// TestReportQuotesLogFields (issue #16 (6)): mount, op and path of an op
// log line are shown with their escapes quoted, in the table and in the
// message about malformed lines.
func TestReportQuotesLogFields(t *testing.T) {
	log := filepath.Join(t.TempDir(), "ops.log")
	var lines []byte
	for i := range 3 {
		l := measure.LogLine{TS: logStart.Add(-1), Mount: "/mnt/" + escape, Op: "read" + escape, Path: "/a" + escape, Ns: int64(1000 * (i + 1))}
		b, err := json.Marshal(&l)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(log, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	r := reportCLI(t, "report", log)
	r.expectExit(t, 0, "report")
	if strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07\u009b") {
		t.Errorf("report prints control characters raw:\n%q", r.stdout)
	}
	for _, want := range []string{`"read\x1b]0;owned\a`, `"/a\x1b]0;owned\a`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %s:\n%s", want, r.stdout)
		}
	}
}
