package report

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

func TestMirrorReportNumbers(t *testing.T) {
	r := aggregate(t, Options{}, encodeLog(t, mirrorLog()))

	if r.Lines != 1600 || r.Malformed != 0 || !r.Mirror {
		t.Fatalf("lines %d malformed %d mirror %v, want 1600, 0, true", r.Lines, r.Malformed, r.Mirror)
	}
	if want := 1.599; !near(r.SpanS, want, 1e-9) {
		t.Errorf("span %v s, want %v", r.SpanS, want)
	}
	if !r.First.Equal(t0) || !r.Last.Equal(t0.Add(1599*time.Millisecond)) {
		t.Errorf("first %v last %v", r.First, r.Last)
	}

	read := opOf(t, r, "m", "read")
	tests := []struct {
		name      string
		got, want float64
		rel       float64
	}{
		// HDR histograms with 3 digits: within 0.1 %.
		{"read p50", float64(read.Crypt.P50Ns), float64(100 * us), 1e-3},
		{"read p99.9", float64(read.Crypt.P999Ns), float64(100 * us), 1e-3},
		{"read twin p50", float64(read.Twin.P50Ns), float64(50 * us), 1e-3},
		{"read twin p99", float64(read.Twin.P99Ns), float64(50 * us), 1e-3},
		{"read max", float64(read.Crypt.MaxNs), float64(100 * us), 0},
		{"read mean", read.Crypt.MeanNs, float64(100 * us), 0},
		{"read ratio p50", read.Overhead.RatioP50, 2, 2e-3},
		{"read ratio mean", read.Overhead.RatioMean, 2, 0},
		{"read diff mean µs", read.Overhead.DiffMeanUs, 50, 0},
		{"read diff p50 µs", read.Overhead.DiffP50Us, 50, 2e-3},
		{"read crypto%", read.Crypt.CryptoPct, 30, 1e-9},
		{"read lower%", read.Crypt.LowerPct, 40, 1e-9},
		{"read twin lower%", read.Twin.LowerPct, 80, 1e-9},
		{"read crypto p50", float64(read.Crypt.CryptoP50Ns), float64(30 * us), 1e-2},
		{"read MiB/s", read.MiBps, 990 * 4096 / float64(1<<20) / 1.599, 1e-9},
		{"lookup ratio mean", opOf(t, r, "m", "lookup").Overhead.RatioMean, 1.25, 1e-9},
		{"create ratio p50", opOf(t, r, "m", "create").Overhead.RatioP50, 4, 2e-3},
		{"create diff mean µs", opOf(t, r, "m", "create").Overhead.DiffMeanUs, 750, 1e-9},
	}
	for _, tt := range tests {
		if !near(tt.got, tt.want, tt.rel) {
			t.Errorf("%s = %v, want %v (±%v)", tt.name, tt.got, tt.want, tt.rel)
		}
	}

	if read.Crypt.Count != 1000 || read.Crypt.Errors != 10 || read.Twin.Count != 1000 || read.Twin.Errors != 10 {
		t.Errorf("read count/errors %d/%d, twin %d/%d, want 1000/10 on both",
			read.Crypt.Count, read.Crypt.Errors, read.Twin.Count, read.Twin.Errors)
	}
	if read.Bytes != 990*4096 {
		t.Errorf("read bytes %d, want %d (failed reads move nothing)", read.Bytes, 990*4096)
	}
	if len(read.Errnos) != 1 || read.Errnos[0] != (Errno{Errno: 5, Count: 10}) {
		t.Errorf("read errnos %v, want [{5 10}]", read.Errnos)
	}
	if read.Overhead.ErrnoMismatch != 0 {
		t.Errorf("errno mismatches %d, want 0", read.Overhead.ErrnoMismatch)
	}
	if lookup := opOf(t, r, "m", "lookup"); lookup.Bytes != 0 || lookup.MiBps != 0 || lookup.Class != ClassMetadata {
		t.Errorf("lookup bytes %d MiB/s %v class %s", lookup.Bytes, lookup.MiBps, lookup.Class)
	}
	// Busiest op first.
	if got := r.Ops[0].Op + " " + r.Ops[1].Op + " " + r.Ops[2].Op; got != "read lookup create" {
		t.Errorf("op order %q", got)
	}
}

// Percentiles of a spread-out distribution: 1..10000 µs, each once, in
// random order.
func TestPercentilesUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var lines []measure.LogLine
	for i, v := range rng.Perm(10000) {
		lines = append(lines, measure.LogLine{TS: t0.Add(time.Duration(i) * time.Millisecond),
			Mount: "m", Op: "write", Ns: int64(v+1) * us, Len: 100})
	}
	r := aggregate(t, Options{}, encodeLog(t, lines))
	w := opOf(t, r, "m", "write")
	for _, tt := range []struct {
		name string
		got  int64
		want int64
	}{
		{"p50", w.Crypt.P50Ns, 5000 * us},
		{"p90", w.Crypt.P90Ns, 9000 * us},
		{"p99", w.Crypt.P99Ns, 9900 * us},
		{"p99.9", w.Crypt.P999Ns, 9990 * us},
		{"max", w.Crypt.MaxNs, 10000 * us},
	} {
		if !near(float64(tt.got), float64(tt.want), 1e-3) {
			t.Errorf("%s = %d, want %d ±0.1%%", tt.name, tt.got, tt.want)
		}
	}
	if w.Twin != nil || w.Overhead != nil || r.Mirror {
		t.Error("no twin data, yet the report has twin numbers")
	}
	if w.Bytes != 1000000 {
		t.Errorf("bytes %d, want 1000000", w.Bytes)
	}
}

func TestMountsAreSeparate(t *testing.T) {
	lines := []measure.LogLine{
		{TS: t0, Mount: "a", Op: "read", Ns: 10 * us},
		{TS: t0, Mount: "b", Op: "read", Ns: 20 * us},
		{TS: t0, Mount: "b", Op: "read", Ns: 20 * us},
	}
	r := aggregate(t, Options{}, encodeLog(t, lines))
	if a, b := opOf(t, r, "a", "read"), opOf(t, r, "b", "read"); a.Crypt.Count != 1 || b.Crypt.Count != 2 {
		t.Errorf("counts a=%d b=%d, want 1 and 2", a.Crypt.Count, b.Crypt.Count)
	}
	if r.SpanS != 0 || opOf(t, r, "a", "read").MiBps != 0 {
		t.Errorf("zero span must give 0 MiB/s, not Inf")
	}
}

func TestErrnoMismatchCounted(t *testing.T) {
	lines := []measure.LogLine{
		{TS: t0, Mount: "m", Op: "unlink", Ns: 10 * us, TwinNs: 5 * us, Errno: 2},
		{TS: t0, Mount: "m", Op: "unlink", Ns: 10 * us, TwinNs: 5 * us},
	}
	r := aggregate(t, Options{}, encodeLog(t, lines))
	u := opOf(t, r, "m", "unlink")
	if u.Overhead.ErrnoMismatch != 1 || u.Crypt.Errors != 1 || u.Twin.Errors != 0 {
		t.Errorf("mismatch %d, errors %d/%d; want 1, 1/0", u.Overhead.ErrnoMismatch, u.Crypt.Errors, u.Twin.Errors)
	}
}

func TestSlowestOrdering(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var lines []measure.LogLine
	for i, v := range rng.Perm(1000) {
		lines = append(lines, measure.LogLine{TS: t0.Add(time.Duration(i) * time.Second), Mount: "m",
			Op: "read", Ns: int64(v+1) * us, Path: fmt.Sprintf("/f%d", v+1)})
	}
	// Two ties with the slowest: the earlier one ranks first.
	lines = append(lines,
		measure.LogLine{TS: t0.Add(-time.Hour), Mount: "m", Op: "fsync", Ns: 1000 * us, Path: "/early"},
		measure.LogLine{TS: t0.Add(time.Hour), Mount: "m", Op: "fsync", Ns: 1000 * us, Path: "/late"})

	r := aggregate(t, Options{Top: 5}, encodeLog(t, lines))
	var got []string
	for _, s := range r.Slowest {
		got = append(got, fmt.Sprintf("%s %d", s.Path, s.Ns/us))
	}
	want := []string{"/early 1000", "/f1000 1000", "/late 1000", "/f999 999", "/f998 998"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("slowest %v, want %v", got, want)
	}
	if r.Slowest[0].Op != "fsync" || !r.Slowest[0].TS.Equal(t0.Add(-time.Hour)) {
		t.Errorf("slowest[0] = %+v", r.Slowest[0])
	}

	// Fewer ops than K: all of them, slowest first.
	r = aggregate(t, Options{Top: 50}, encodeLog(t, lines[:3]))
	if len(r.Slowest) != 3 || r.Slowest[0].Ns < r.Slowest[1].Ns || r.Slowest[1].Ns < r.Slowest[2].Ns {
		t.Errorf("slowest of 3: %+v", r.Slowest)
	}
}

func TestAddRejects(t *testing.T) {
	ok := measure.LogLine{TS: t0, Mount: "m", Op: "read", Ns: 1}
	tests := []struct {
		name string
		edit func(*measure.LogLine)
		want error
	}{
		{"no op", func(l *measure.LogLine) { l.Op = "" }, errNoOp},
		{"no ts", func(l *measure.LogLine) { l.TS = time.Time{} }, errBadTS},
		{"ts past 2262", func(l *measure.LogLine) { l.TS = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }, errBadTS},
		{"negative ns", func(l *measure.LogLine) { l.Ns = -1 }, errNegative},
		{"negative twin ns", func(l *measure.LogLine) { l.TwinNs = -1 }, errNegative},
		{"negative len", func(l *measure.LogLine) { l.Len = -1 }, errNegativeLen},
	}
	for _, tt := range tests {
		a := NewAggregator(Options{})
		l := ok
		tt.edit(&l)
		if err := a.Add(&l); !errors.Is(err, tt.want) {
			t.Errorf("%s: Add = %v, want %v", tt.name, err, tt.want)
		}
		if r := a.Report(); r.Lines != 0 || len(r.Ops) != 0 {
			t.Errorf("%s: a rejected line was recorded", tt.name)
		}
	}
}

// A log cannot make the aggregator keep histograms for an unbounded
// number of (mount, op) pairs.
func TestTooManyKeys(t *testing.T) {
	a := NewAggregator(Options{})
	for i := range maxKeys + 10 {
		l := measure.LogLine{TS: t0, Mount: "m", Op: fmt.Sprintf("op%d", i), Ns: 1}
		err := a.Add(&l)
		if (i < maxKeys) != (err == nil) {
			t.Fatalf("line %d: Add = %v", i, err)
		}
	}
	// A known key is still accepted.
	if err := a.Add(&measure.LogLine{TS: t0, Mount: "m", Op: "op0", Ns: 1}); err != nil {
		t.Errorf("known key rejected: %v", err)
	}
}

func TestClassOf(t *testing.T) {
	for op, want := range map[string]Class{
		"read": ClassData, "write": ClassData, "fsync": ClassData,
		"lookup": ClassMetadata, "getattr": ClassMetadata, "readdir": ClassMetadata,
		"create": ClassNamespace, "mkdir": ClassNamespace, "unlink": ClassNamespace, "rename": ClassNamespace,
		"frobnicate": ClassOther,
	} {
		if got := ClassOf(op); got != want {
			t.Errorf("ClassOf(%q) = %s, want %s", op, got, want)
		}
	}
}

func TestClassCDF(t *testing.T) {
	r := aggregate(t, Options{}, encodeLog(t, mirrorLog()))
	var got []string
	for _, c := range r.CDF {
		got = append(got, fmt.Sprintf("%s/%s/%d", c.Class, c.Side, c.Count))
		for i := 1; i < len(c.Points); i++ {
			if c.Points[i].Q < c.Points[i-1].Q || c.Points[i].Ns < c.Points[i-1].Ns {
				t.Errorf("%s %s: CDF not monotonic at %d: %v, %v", c.Class, c.Side, i, c.Points[i-1], c.Points[i])
			}
		}
	}
	want := "[data/crypt/1000 data/twin/1000 metadata/crypt/500 metadata/twin/500 namespace/crypt/100 namespace/twin/100]"
	if fmt.Sprint(got) != want {
		t.Errorf("CDFs %v, want %s", got, want)
	}
	// The data class holds only 100 µs reads: its median says so.
	if mid := r.CDF[0].Points[50]; mid.Q != 0.5 || !near(float64(mid.Ns), float64(100*us), 1e-3) {
		t.Errorf("data crypt median point %+v", mid)
	}
}
