package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestBenchHelpDurations: bench --help says for every --size how long a
// bench took (or that it was not timed), once each, and that an ETA comes.
func TestBenchHelpDurations(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("bench --help: exit %d: %s", code, stderr.String())
	}
	help := stdout.String()
	for _, size := range []string{"tiny", "small", "default", "large"} {
		re := regexp.MustCompile(`(?m)^  ` + size + ` +(\d+ min( \d+ s)?|not timed)( / (\d+ min( \d+ s)?|not timed))?$`)
		if n := len(re.FindAllString(help, -1)); n != 1 {
			t.Errorf("bench --help has %d duration line(s) for size %s:\n%s", n, size, help)
		}
	}
	if !strings.Contains(help, "ETA") {
		t.Error("bench --help does not mention the ETA")
	}
}
