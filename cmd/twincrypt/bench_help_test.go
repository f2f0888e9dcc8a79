package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBenchHelpDurations: bench --help says for every --size how long a
// bench took (or that it was not timed), once each, that an ETA comes,
// what --full, --repeat auto and --budget do, what "level" means, where
// the results go and what an interrupt does.
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
	for _, want := range []string{"ETA", "--full", "\"level\"", "--repeat auto", "--budget", "SIGPIPE", "130", "twincrypt-bench-YYYYMMDD-HHMMSS"} {
		if !strings.Contains(help, want) {
			t.Errorf("bench --help does not mention %s", want)
		}
	}
}

// TestBenchPlanDefaults: the plain bench is the quick one, --full and
// "all" the whole set, named targets and workloads win over both; the
// repeats are 5, 3 with --full, auto from 3 with its limit, and --budget
// implies auto.
func TestBenchPlanDefaults(t *testing.T) {
	names := func(f benchFlags) (string, string) {
		t.Helper()
		ts, ws, err := benchPlan(f, "/bin/true")
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		var tn, wn []string
		for _, x := range ts {
			tn = append(tn, x.Name())
		}
		for _, x := range ws {
			wn = append(wn, x.Name())
		}
		return strings.Join(tn, ","), strings.Join(wn, ",")
	}
	quick := benchFlags{size: "small", peers: true}
	tn, wn := names(quick)
	if tn != "native,twin,crypt-xts,gocryptfs" || strings.Contains(wn, "build") || strings.Contains(wn, "git") || !strings.Contains(wn, "srctree") {
		t.Errorf("quick bench: targets %s, workloads %s", tn, wn)
	}
	full := quick
	full.full = true
	tn, wn = names(full)
	if !strings.Contains(tn, "crypt-cbc") || !strings.Contains(tn, "securefs") || !strings.HasSuffix(wn, ",build") {
		t.Errorf("--full: targets %s, workloads %s", tn, wn)
	}
	all := quick
	all.targets, all.workloads = []string{"all"}, []string{"all"}
	if tn2, wn2 := names(all); tn2 != tn || wn2 != wn {
		t.Errorf("--targets all --workloads all: %s / %s, want --full's %s / %s", tn2, wn2, tn, wn)
	}
	named := full
	named.targets, named.workloads = []string{"native", "twin"}, []string{"gzip"}
	if tn, wn := names(named); tn != "native,twin" || wn != "gzip" {
		t.Errorf("--full with names: %s / %s", tn, wn)
	}

	for _, c := range []struct {
		repeat string
		full   bool
		budget time.Duration
		n      int
		auto   bool
		max    int
	}{
		{"", false, 0, 5, false, 0},
		{"", true, 0, 3, false, 0},
		{"7", false, 0, 7, false, 0},
		{"auto", false, 0, 3, true, autoMaxRepeats},
		{"auto", false, 10 * time.Minute, 3, true, autoMaxRepeats},
		{"", false, 10 * time.Minute, 3, true, 0},
		{"4", false, 10 * time.Minute, 4, true, 0},
	} {
		n, auto, err := benchRepeat(benchFlags{repeat: c.repeat, full: c.full, budget: c.budget})
		if err != nil || n != c.n || (auto != nil) != c.auto || (auto != nil && (auto.Max != c.max || auto.Budget != c.budget)) {
			t.Errorf("--repeat %q --full=%v --budget %v: %d %+v %v", c.repeat, c.full, c.budget, n, auto, err)
		}
	}
	for _, bad := range []string{"0", "-2", "many"} {
		if _, _, err := benchRepeat(benchFlags{repeat: bad}); !isUsage(err) {
			t.Errorf("--repeat %s: %v, want a usage error", bad, err)
		}
	}
}
