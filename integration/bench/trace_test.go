package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"slices"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure/trace"
)

// TestTracedPass: with Config.Trace the runner adds one traced run per
// workload and target, after the repeats and apart from Runs; each holds
// the workload's system calls on the target (the fake writes one file:
// exactly one write), and report.md and trace.csv show them. Without BPF
// the pass is replaced by its one-line reason.
func TestTracedPass(t *testing.T) {
	ev := &events{}
	fakes := newFakes(ev, "a", "b")
	w := &fakeWorkload{name: "w1", ev: ev, walls: map[string]float64{"a": 1, "b": 2}}
	c := testConfig(t, targetsOf(fakes), w)
	c.Repeat, c.Trace = 1, true
	res, err := RunBench(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d untraced runs, want 2", len(res.Runs))
	}
	var report bytes.Buffer
	if err := WriteReport(&report, res, nil); err != nil {
		t.Fatal(err)
	}
	if res.TraceNote != "" {
		if len(res.Traced) != 0 || !strings.Contains(report.String(), "No traced pass: kernel tracing unavailable") {
			t.Errorf("unavailable tracing: %d traced runs; report:\n%s", len(res.Traced), report.String())
		}
		t.Skip(res.TraceNote)
	}
	if len(res.Traced) != 2 {
		t.Fatalf("%d traced runs, want 2: %+v", len(res.Traced), res.Traced)
	}
	for _, tr := range res.Traced {
		if tr.Error != "" || tr.Workload != "w1" {
			t.Errorf("traced run %+v", tr)
		}
		writes := int64(-1)
		for _, s := range tr.Series {
			if s.Layer == trace.LayerSyscall && s.Stats.Op == "write" {
				writes = s.Stats.Count
			}
			if s.Layer == trace.LayerFUSE {
				t.Errorf("%s: FUSE series on a plain directory: %+v", tr.Target, s)
			}
		}
		if writes != 1 {
			t.Errorf("%s: %d writes traced, want 1: %+v", tr.Target, writes, tr.Series)
		}
	}
	if !strings.Contains(report.String(), "### w1: system calls\n\n| op | a | b |") {
		t.Errorf("report lacks the traced table:\n%s", report.String())
	}
	files, err := WriteOutputs(t.TempDir(), res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{TraceFile, SyscallsSVG, SyscallsPNG} {
		if !slices.Contains(files, want) {
			t.Errorf("WriteOutputs wrote %v, no %s", files, want)
		}
	}
	var b bytes.Buffer
	if err := WriteTraceCSV(&b, res); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil || len(rows) < 3 || strings.Join(rows[0], ",") != strings.Join(TraceCSVHeader, ",") {
		t.Errorf("trace.csv: %v\n%v", err, rows)
	}
}
