package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// events is the log the fakes write to, shared by all of a test's fakes.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(format string, a ...any) {
	e.mu.Lock()
	e.log = append(e.log, fmt.Sprintf(format, a...))
	e.mu.Unlock()
}

func (e *events) list() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// fakeTarget is a plain directory that logs what the runner does to it.
type fakeTarget struct {
	name        string
	ev          *events
	unavailable error
	setupErr    error
	mountErr    func(n int) error // by mount number, 1-based
	dir         string
	mounts      int
	mounted     bool
	cpu         time.Duration
	withStats   bool
	cleanups    int
}

func (t *fakeTarget) Name() string     { return t.name }
func (t *fakeTarget) Available() error { return t.unavailable }

func (t *fakeTarget) Setup(ctx context.Context, work string) error {
	t.ev.add("setup %s", t.name)
	t.dir = filepath.Join(work, "dir")
	if t.setupErr != nil {
		return t.setupErr
	}
	return os.Mkdir(t.dir, 0o700)
}

func (t *fakeTarget) Mount(ctx context.Context) (string, error) {
	t.mounts++
	t.ev.add("mount %s", t.name)
	if t.mountErr != nil {
		if err := t.mountErr(t.mounts); err != nil {
			return "", err
		}
	}
	t.mounted = true
	return t.dir, nil
}

func (t *fakeTarget) Unmount(ctx context.Context) error {
	if ctx.Err() != nil {
		return fmt.Errorf("unmount got a cancelled context")
	}
	t.ev.add("unmount %s", t.name)
	t.mounted = false
	return nil
}

func (t *fakeTarget) Cleanup() error {
	t.cleanups++
	t.ev.add("cleanup %s", t.name)
	return nil
}

// DaemonCPU grows by 100 ms per call.
func (t *fakeTarget) DaemonCPU() time.Duration {
	t.cpu += 100 * time.Millisecond
	return t.cpu
}

func (t *fakeTarget) Stats() *measure.Snapshot {
	if !t.withStats {
		return nil
	}
	return &measure.Snapshot{Ops: []measure.Stats{
		{Op: "read", Count: 10, P50Ns: 20_000, P99Ns: 90_000},
		{Op: "write", Count: 5, P50Ns: 30_000, P99Ns: 120_000},
	}}
}

// fakeWorkload writes and removes one file; its wall time is walls[target]
// (seconds) plus the repeat number, so medians and spreads are known.
type fakeWorkload struct {
	name     string
	ev       *events
	walls    map[string]float64
	failOn   map[string]error
	panicOn  string
	cancel   context.CancelFunc // called during the first run, if set
	headline string
	prepared int
	runs     int
}

func (w *fakeWorkload) Name() string     { return w.name }
func (w *fakeWorkload) Describe() string { return "a fake workload " + w.name }

func (w *fakeWorkload) Prepare(ctx context.Context, env *Env) error {
	w.prepared++
	return os.MkdirAll(env.Cache, 0o700)
}

func (w *fakeWorkload) Headline() string { return w.headline }

func (w *fakeWorkload) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	w.runs++
	target := filepath.Base(filepath.Dir(filepath.Dir(dir)))
	w.ev.add("run %s %s", w.name, target)
	if w.cancel != nil {
		w.cancel()
		return Result{}, ctx.Err()
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		return Result{}, fmt.Errorf("run directory not fresh and empty: %v %v", ents, err)
	}
	if target == w.panicOn {
		panic("boom")
	}
	if err := w.failOn[target]; err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		return Result{}, err
	}
	n := strings.Count(strings.Join(w.ev.list(), "\n"), fmt.Sprintf("run %s %s", w.name, target))
	wall := w.walls[target] + float64(n-1)
	return Result{
		Wall:        time.Duration(wall * float64(time.Second)),
		Bytes:       1 << 30,
		Ops:         100,
		WorkloadCPU: time.Second,
		Metrics:     map[string]float64{"untar_s": wall / 2, "rm_s": wall / 4, "opaque": 1},
		Verified:    true,
	}, nil
}

func newFakes(ev *events, names ...string) []*fakeTarget {
	var ts []*fakeTarget
	for _, n := range names {
		ts = append(ts, &fakeTarget{name: n, ev: ev})
	}
	return ts
}

func targetsOf(ts []*fakeTarget) []Target {
	var out []Target
	for _, t := range ts {
		out = append(out, t)
	}
	return out
}

func testConfig(t *testing.T, targets []Target, workloads ...Workload) Config {
	return Config{
		Targets: targets, Workloads: workloads, Size: SizeTiny, Repeat: 2,
		Work: t.TempDir(), Lower: "test", DropCaches: func() error { return nil },
	}
}

func TestRunnerInterleavesAndCleansUp(t *testing.T) {
	ev := &events{}
	fakes := newFakes(ev, "native", "twin", "crypt")
	off := &fakeTarget{name: "absent", ev: ev, unavailable: errors.New("not installed")}
	w1 := &fakeWorkload{name: "w1", ev: ev, walls: map[string]float64{"native": 1, "twin": 2, "crypt": 4}}
	w2 := &fakeWorkload{name: "w2", ev: ev, walls: map[string]float64{"native": 1, "twin": 1, "crypt": 1}}
	targets := append(targetsOf(fakes[:1]), off)
	targets = append(targets, targetsOf(fakes[1:])...)
	res, err := RunBench(context.Background(), testConfig(t, targets, w1, w2))
	if err != nil {
		t.Fatal(err)
	}

	var runs []string
	for _, e := range ev.list() {
		if strings.HasPrefix(e, "run ") {
			runs = append(runs, e)
		}
	}
	// Interleaved within each workload; the second repeat starts one
	// target further on, so that no target always runs right after the
	// same other one.
	want := []string{
		"run w1 native", "run w1 twin", "run w1 crypt", "run w2 native", "run w2 twin", "run w2 crypt",
		"run w1 twin", "run w1 crypt", "run w1 native", "run w2 twin", "run w2 crypt", "run w2 native",
	}
	if !reflect.DeepEqual(runs, want) {
		t.Errorf("run order\n got %q\nwant %q", runs, want)
	}
	// Each run is bracketed by its own mount and unmount.
	log := ev.list()
	for i, e := range log {
		if strings.HasPrefix(e, "run ") {
			target := strings.Fields(e)[2]
			if log[i-1] != "mount "+target || log[i+1] != "unmount "+target {
				t.Errorf("run %d (%s) not between mount and unmount: %q", i, e, log[i-1:i+2])
			}
		}
	}
	for _, f := range fakes {
		if f.cleanups != 1 || f.mounted {
			t.Errorf("%s: %d cleanups, mounted %v", f.name, f.cleanups, f.mounted)
		}
	}
	if off.mounts != 0 || off.cleanups != 0 || contains(log, "setup absent") {
		t.Errorf("the unavailable target was used: %q", log)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Reason != "not installed" {
		t.Errorf("skipped = %+v", res.Skipped)
	}
	if w1.prepared != 1 || w2.prepared != 1 {
		t.Errorf("prepared %d and %d times, want once each", w1.prepared, w2.prepared)
	}
	if len(res.Runs) != 12 {
		t.Fatalf("%d runs recorded, want 12", len(res.Runs))
	}
	r := res.Runs[0]
	if !r.OK() || !r.Verified || r.WallS != 1 || r.DaemonCPUS < 0.09 || r.DaemonCPUS > 0.11 || r.Repeat != 1 {
		t.Errorf("first run = %+v", r)
	}
	// The fake's headline is empty: seconds.
	if res.Workloads[0].Headline != "wall_s" || res.Workloads[0].Describe != "a fake workload w1" {
		t.Errorf("workload info = %+v", res.Workloads[0])
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestRunnerRecordsFailuresAndGoesOn(t *testing.T) {
	ev := &events{}
	fakes := newFakes(ev, "native", "twin", "crypt", "broken")
	fakes[2].mountErr = func(n int) error {
		if n == 1 {
			return errors.New("no such device")
		}
		return nil
	}
	fakes[3].setupErr = errors.New("mkfs failed")
	w := &fakeWorkload{name: "w", ev: ev,
		walls:   map[string]float64{"native": 1, "twin": 2, "crypt": 3},
		failOn:  map[string]error{"twin": errors.New("file f differs at offset 4096")},
		panicOn: "native"}
	skip := &fakeWorkload{name: "skippy", ev: ev, walls: map[string]float64{},
		failOn: map[string]error{"native": fmt.Errorf("%w: python3 not installed", ErrSkipped),
			"twin": fmt.Errorf("%w: python3 not installed", ErrSkipped), "crypt": fmt.Errorf("%w: python3 not installed", ErrSkipped)}}
	res, err := RunBench(context.Background(), testConfig(t, targetsOf(fakes), w, skip))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 16 {
		t.Fatalf("%d runs, want 16", len(res.Runs))
	}
	byKey := map[string]Run{}
	for _, r := range res.Runs {
		byKey[fmt.Sprintf("%s/%s/%d", r.Workload, r.Target, r.Repeat)] = r
	}
	for key, want := range map[string]string{
		"w/native/1": "workload panicked: boom",
		"w/twin/2":   "file f differs at offset 4096",
		"w/crypt/1":  "mount: no such device",
		"w/broken/1": "setup: mkfs failed",
	} {
		if got := byKey[key].Error; got != want {
			t.Errorf("%s: error %q, want %q", key, got, want)
		}
	}
	if r := byKey["w/crypt/2"]; !r.OK() || !r.Verified {
		t.Errorf("second crypt run should have succeeded: %+v", r)
	}
	if r := byKey["skippy/twin/1"]; !r.Skipped || r.OK() {
		t.Errorf("skipped run = %+v", r)
	}
	if res.Targets[3].SetupError != "mkfs failed" {
		t.Errorf("targets = %+v", res.Targets)
	}
	for _, f := range fakes {
		if f.mounted || f.cleanups != 1 {
			t.Errorf("%s left mounted (%v) or cleaned %d times", f.name, f.mounted, f.cleanups)
		}
	}

	var b bytes.Buffer
	WriteSummary(&b, res, 0)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{"FAIL", "skip", "Failures", "w on twin, repeat 2: file f differs at offset 4096",
		"w on broken, repeat 1: setup: mkfs failed", "skippy (native, twin, crypt): skipped: python3 not installed"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

func TestRunnerInterrupted(t *testing.T) {
	ev := &events{}
	fakes := newFakes(ev, "native", "twin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &fakeWorkload{name: "w", ev: ev, cancel: cancel}
	res, err := RunBench(ctx, testConfig(t, targetsOf(fakes), w))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The run that was cut short is not a result.
	if !res.Interrupted || len(res.Runs) != 0 {
		t.Errorf("interrupted %v, %d runs", res.Interrupted, len(res.Runs))
	}
	// The run's target was unmounted (with a live context) and both
	// targets were cleaned up.
	log := ev.list()
	if !contains(log, "unmount native") || !contains(log, "cleanup native") || !contains(log, "cleanup twin") {
		t.Errorf("no clean-up after the interrupt: %q", log)
	}
	if contains(log, "mount twin") {
		t.Errorf("ran on after the interrupt: %q", log)
	}
}

func TestSummarize(t *testing.T) {
	m, _ := metricFor("wall_s")
	runs := []Run{
		{WallS: 3, Verified: true}, {WallS: 1, Verified: true}, {WallS: 2, Verified: true},
		{Error: "boom"}, {Error: "skipped: x", Skipped: true}, {WallS: 10},
	}
	s := summarize(runs, m)
	want := Summary{N: 4, Failed: 1, Skipped: 1, Unverified: 1, Median: 2.5, Min: 1, Max: 10}
	if s != want {
		t.Errorf("summary = %+v, want %+v", s, want)
	}
	if c := s.cell(); c != "2.50 (1.00–10.0) ! ?" {
		t.Errorf("cell = %q", c)
	}
	for _, tc := range []struct {
		s    Summary
		want string
	}{
		{Summary{N: 1, Median: 1234.5, Min: 1234.5, Max: 1234.5}, "1234"},
		{Summary{N: 3, Median: 0.0123, Min: 0.01, Max: 0.02}, "0.0123 (0.0100–0.0200)"},
		{Summary{Failed: 3}, "FAIL"},
		{Summary{Skipped: 3}, "skip"},
		{Summary{}, "-"},
	} {
		if got := tc.s.cell(); got != tc.want {
			t.Errorf("%+v: cell %q, want %q", tc.s, got, tc.want)
		}
	}
	if got := median([]float64{5, 1, 3}); got != 3 {
		t.Errorf("median odd = %v", got)
	}
}

func TestMetricsAndRatios(t *testing.T) {
	res := &Results{
		Repeat:    1,
		Targets:   []TargetInfo{{Name: "native"}, {Name: "twin"}, {Name: "crypt-xts"}},
		Workloads: []WorkloadInfo{{Name: "seqwrite", Headline: "MiBps"}, {Name: "srctree", Headline: "wall_s"}},
		Runs: []Run{
			{Target: "native", Workload: "seqwrite", WallS: 1, Bytes: 1000 << 20, Verified: true},
			{Target: "twin", Workload: "seqwrite", WallS: 4, Bytes: 1000 << 20, Verified: true},
			{Target: "crypt-xts", Workload: "seqwrite", WallS: 8, Bytes: 1000 << 20, Verified: true},
			{Target: "native", Workload: "srctree", WallS: 2, Verified: true, Metrics: map[string]float64{"untar_s": 1, "rm_s": 0.5, "lsR_s": 0.2, "md5_s": 0.3}},
			{Target: "twin", Workload: "srctree", WallS: 10, Verified: true, Metrics: map[string]float64{"untar_s": 5, "rm_s": 2, "lsR_s": 1, "md5_s": 2}},
			{Target: "crypt-xts", Workload: "srctree", WallS: 15, Verified: true, Metrics: map[string]float64{"untar_s": 6, "rm_s": 3, "lsR_s": 2, "md5_s": 4}},
		},
	}
	var labels []string
	for _, m := range res.rows(res.Workloads[1]) {
		labels = append(labels, m.Label)
	}
	if want := []string{"time", "untar", "lsR", "md5", "rm"}; !reflect.DeepEqual(labels, want) {
		t.Errorf("srctree rows %q, want %q", labels, want)
	}
	mibps, _ := metricFor("MiBps")
	if r, ok := res.ratio("crypt-xts", "native", res.Workloads[0], mibps); !ok || !near(r.Point, 8) {
		t.Errorf("seqwrite crypt/native = %v %v, want 8 (1000 MiB/s against 125)", r, ok)
	}
	if r, ok := res.ratio("crypt-xts", "twin", res.Workloads[0], mibps); !ok || !near(r.Point, 2) {
		t.Errorf("seqwrite crypt/twin = %v, want 2", r)
	}
	untar, _ := metricFor("untar_s")
	if r, _ := res.ratio("twin", "native", res.Workloads[1], untar); !near(r.Point, 5) {
		t.Errorf("untar twin/native = %v, want 5", r)
	}
	tab, ok := res.ratioTable("native")
	if !ok {
		t.Fatal("no ratio table")
	}
	if got := tab.rows[0]; !reflect.DeepEqual(got, []string{"seqwrite", "4.00x", "8.00x"}) {
		t.Errorf("ratio row = %q", got)
	}
	cpu, ok := res.cpuTable(false)
	if ok {
		t.Errorf("CPU table without CPU numbers: %+v", cpu)
	}
	for _, tc := range []struct {
		key    string
		unit   string
		higher bool
		ok     bool
	}{
		{"write_MiBps", "MiB/s", true, true}, {"read_iops", "IOPS", true, true}, {"create_per_s", "/s", true, true},
		{"read_p99_us", "µs", false, true}, {"untar_s", "s", false, true}, {"opaque", "", false, false},
	} {
		m, ok := metricFor(tc.key)
		if ok != tc.ok || m.Unit != tc.unit || m.HigherBetter != tc.higher {
			t.Errorf("metricFor(%q) = %+v, %v", tc.key, m, ok)
		}
	}
}

func TestChooseHeadline(t *testing.T) {
	runs := []Run{
		{Workload: "seqwrite", Bytes: 1, WallS: 1},
		{Workload: "randrw", Metrics: map[string]float64{"iops": 5}},
		{Workload: "gzip", Bytes: 1, Metrics: map[string]float64{"MiBps": 3}},
		{Workload: "srctree", Bytes: 1},
	}
	for name, want := range map[string]string{"seqwrite": "MiBps", "randrw": "iops", "gzip": "MiBps", "srctree": "wall_s"} {
		if got := chooseHeadline(&fakeWorkload{name: name}, runs); got != want {
			t.Errorf("%s: headline %q, want %q", name, got, want)
		}
	}
	if got := chooseHeadline(&fakeWorkload{name: "srctree", headline: "iops"}, runs); got != "iops" {
		t.Errorf("Headliner ignored: %q", got)
	}
}

func TestTermProgressPlain(t *testing.T) {
	var b bytes.Buffer
	p := NewProgress(&b, false)
	p.Skip("cryfs", "cryfs is not installed")
	p.Phase("setting up twin")
	r := Run{Target: "twin", Workload: "seqwrite", Repeat: 1, WallS: 2, Bytes: 200 << 20, Verified: true}
	p.Start(r, 3, 12)
	p.Done(r, 3, 12)
	p.Done(Run{Target: "crypt-xts", Workload: "seqwrite", Repeat: 1, Error: "mount: boom"}, 4, 12)
	p.Close()
	out := b.String()
	for _, want := range []string{
		"skipping cryfs: cryfs is not installed\n",
		"setting up twin …\n",
		"[ 3/12] r1 seqwrite      twin                   2.00s     100.0 MiB/s\n",
		"[ 4/12] r1 seqwrite      crypt-xts          FAIL  mount: boom\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\r") {
		t.Error("plain progress draws a live line")
	}
}

func TestTermProgressLive(t *testing.T) {
	var b syncBuffer
	p := NewProgress(&b, true)
	p.Start(Run{Target: "twin", Workload: "seqwrite", Repeat: 1}, 1, 4)
	time.Sleep(250 * time.Millisecond)
	p.Done(Run{Target: "twin", Workload: "seqwrite", Repeat: 1, WallS: 1, Verified: true}, 1, 4)
	p.Close()
	out := b.String()
	if !strings.Contains(out, "\r\x1b[K[░░░░░░░░░░░░░░░░░░░░] 1/4 r1 seqwrite      twin") {
		t.Errorf("no live line with a bar:\n%q", out)
	}
	if !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("Close left the live line: %q", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// recProgress records the set-up steps and ETAs the runner reports.
type recProgress struct {
	nopProgress
	steps []string
	etas  []string
}

func (r *recProgress) Step(msg string) { r.steps = append(r.steps, msg) }
func (r *recProgress) ETA(repeat, repeats int, took, left time.Duration) {
	// Each repeat takes about as long as the first: left is the average
	// so far times the repeats to come.
	per := took / time.Duration(repeat)
	r.etas = append(r.etas, fmt.Sprintf("%d/%d left=%d", repeat, repeats, (left+per/2)/per))
}

// TestRunnerReportsSteps: one line per target set up, one naming the
// targets found (skipped ones are reported by Skip), one when the
// workloads are prepared, and an ETA after every repeat but the last.
func TestRunnerReportsSteps(t *testing.T) {
	var ev events
	fakes := newFakes(&ev, "native", "twin", "cryfs")
	fakes[2].unavailable = errors.New("cryfs is not installed")
	c := testConfig(t, targetsOf(fakes), &fakeWorkload{name: "w1", ev: &ev}, &fakeWorkload{name: "w2", ev: &ev})
	c.Repeat = 3
	rec := &recProgress{}
	c.Progress = rec
	if _, err := RunBench(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	want := []string{"targets: 2 of 3 available: native, twin", "native set up in ", "twin set up in ", "2 workload(s) prepared in "}
	if len(rec.steps) != len(want) {
		t.Fatalf("steps %q, want %d", rec.steps, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(rec.steps[i], w) {
			t.Errorf("step %d: %q, want %q…", i, rec.steps[i], w)
		}
	}
	if got := strings.Join(rec.etas, "; "); got != "1/3 left=2; 2/3 left=1" {
		t.Errorf("ETAs: %s", got)
	}
}

// TestTermProgressETA: the ETA is one line with the time left, and the
// live line shows it from then on.
func TestTermProgressETA(t *testing.T) {
	var b syncBuffer
	p := NewProgress(&b, true)
	p.ETA(1, 3, 65*time.Second, 130*time.Second)
	p.Start(Run{Target: "twin", Workload: "seqwrite", Repeat: 2}, 5, 12)
	time.Sleep(150 * time.Millisecond)
	p.Close()
	out := b.String()
	if !strings.Contains(out, "repeat 1 of 3 done (1m05s so far); about 2m10s left, ETA ") {
		t.Errorf("no ETA line: %q", out)
	}
	if !strings.Contains(out, "ETA ") || !strings.Contains(out, " left)") {
		t.Errorf("live line without the ETA: %q", out)
	}
}

// TestRunLabelAligned: the longest workload name keeps the target and the
// result in their columns.
func TestRunLabelAligned(t *testing.T) {
	var width int
	for _, w := range Workloads() {
		l := runLabel(Run{Target: "twin", Workload: w.Name(), Repeat: 1}, 1, 9, true)
		if width == 0 {
			width = len(l)
		}
		if len(l) != width || strings.Index(l, "twin") != strings.Index(runLabel(Run{Target: "twin", Workload: "seqwrite", Repeat: 1}, 1, 9, true), "twin") {
			t.Errorf("label %q out of line (width %d, want %d)", l, len(l), width)
		}
	}
}

func TestRotate(t *testing.T) {
	ts := []string{"a", "b", "c"}
	for k, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}, {"b", "c", "a"}} {
		if got := rotate(ts, k); !reflect.DeepEqual(got, want) {
			t.Errorf("rotate(%q, %d) = %q, want %q", ts, k, got, want)
		}
	}
	if !reflect.DeepEqual(ts, []string{"a", "b", "c"}) {
		t.Errorf("rotate changed its argument: %q", ts)
	}
	if got := rotate([]string(nil), 2); len(got) != 0 {
		t.Errorf("rotate(nil, 2) = %q", got)
	}
}
