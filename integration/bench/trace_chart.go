package bench

import (
	"math"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/chartkit"
	"github.com/twincrypt/twincrypt/measure/trace"
)

// The traced pass's chart.
const (
	SyscallsSVG = "syscalls.svg"
	SyscallsPNG = "syscalls.png"
)

// chartSyscalls are the system calls the chart shows, where traced.
var chartSyscalls = []string{"newfstatat", "statx", "openat", "read", "write", "close", "getdents64", "unlinkat", "mkdirat", "fsync"}

// pooledQuantile estimates the q quantile of the samples of all stats
// from their cumulative buckets at measure.BucketBoundsNs, interpolating
// within a bucket; false when there are none.
func pooledQuantile(stats []measure.Stats, q float64) (float64, bool) {
	cum := make([]float64, len(measure.BucketBoundsNs))
	var n float64
	for _, s := range stats {
		if len(s.Buckets) != len(cum) {
			continue
		}
		for i, c := range s.Buckets {
			cum[i] += float64(c)
		}
		n += float64(s.Count)
	}
	if n == 0 {
		return 0, false
	}
	rank := q * n
	var lowBound, lowCount float64
	for i, c := range cum {
		bound := float64(measure.BucketBoundsNs[i])
		if c >= rank && c > 0 {
			return lowBound + (bound-lowBound)*(rank-lowCount)/(c-lowCount), true
		}
		lowBound, lowCount = bound, c
	}
	return lowBound, true
}

// syscallsPlot is a grouped bar chart of the traced pass: per system call
// one bar per target, p50 with a p99 whisker, over every workload's calls
// pooled, on a log axis; nil without traced runs.
func syscallsPlot(res *Results) (ch *chart, err error) {
	var targets []string
	for _, r := range res.Traced {
		if r.Error == "" && !slices.Contains(targets, r.Target) {
			targets = append(targets, r.Target)
		}
	}
	var ops []string
	for _, op := range chartSyscalls {
		for _, r := range res.Traced {
			if tracedCell(r, trace.LayerSyscall, op) != "-" && !slices.Contains(ops, op) {
				ops = append(ops, op)
			}
		}
	}
	if len(targets) == 0 || len(ops) == 0 {
		return nil, nil
	}
	defer recoverPlot(&err)
	styles := chartkit.Styles(len(targets))
	p := plot.New()
	p.Title.Text = "System calls as the workloads saw them (traced pass): bar p50, whisker p99, all workloads pooled"
	p.Y.Label.Text = "latency (µs, log scale)"
	p.Add(plotter.NewGrid())
	group, barW := groupWidth(len(ops), len(targets))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, tn := range targets {
		p50s := make([]float64, len(ops))
		p99s := make([]float64, len(ops))
		for x, op := range ops {
			p50s[x], p99s[x] = math.NaN(), math.NaN()
			var stats []measure.Stats
			for _, r := range res.Traced {
				if r.Target != tn || r.Error != "" {
					continue
				}
				for _, s := range r.Series {
					if s.Layer == trace.LayerSyscall && s.Stats.Op == op {
						stats = append(stats, s.Stats)
					}
				}
			}
			a, ok1 := pooledQuantile(stats, 0.5)
			b, ok2 := pooledQuantile(stats, 0.99)
			if ok1 && ok2 {
				a, b = math.Max(a, 1)/1e3, math.Max(b, 1)/1e3
				p50s[x], p99s[x] = a, b
				lo, hi = math.Min(lo, a), math.Max(hi, b)
			}
		}
		bars := &chartkit.Bars{Values: p50s, High: p99s, Width: barW, Style: styles[i],
			Offset: barW*vg.Length(i) - group/2 + barW/2}
		p.Add(bars)
		p.Legend.Add(tn, bars)
	}
	if math.IsInf(lo, 1) {
		return nil, nil
	}
	p.NominalX(ops...)
	p.X.Min, p.X.Max = -0.5, float64(len(ops))-0.5
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chartkit.LogTicks{}
	p.Y.Min, p.Y.Max = chartkit.LogRange(lo, hi)
	notes := []string{"", "Percentiles from latency buckets", "(1, 2.5, 5 per decade), interpolated.", "Traced figures: the wall times", "and ratios come from the untraced", "repeats."}
	return &chart{p, notes}, nil
}

// writeSyscallsChart draws syscalls.svg/png into dir; nothing without a
// traced pass.
func writeSyscallsChart(dir string, res *Results) ([]string, error) {
	ch, err := syscallsPlot(res)
	if err != nil || ch == nil {
		return nil, err
	}
	var written []string
	for _, name := range []string{SyscallsSVG, SyscallsPNG} {
		if err := savePlot(ch, filepath.Join(dir, name)); err != nil {
			return written, err
		}
		written = append(written, name)
	}
	return written, nil
}
