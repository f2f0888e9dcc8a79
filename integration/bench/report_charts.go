package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/twincrypt/twincrypt/measure/chartkit"
	"github.com/twincrypt/twincrypt/measure/report"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const (
	chartWidth  = 11 * vg.Inch
	chartHeight = 5.5 * vg.Inch
)

// WriteCharts draws overhead.svg/png (each target's cost relative to
// native, per workload) and latency.svg/png (per-op p50 and p99 of our
// FUSE targets) into dir and returns the files written. A chart without
// data is left out, not an error.
func WriteCharts(dir string, res *Results) ([]string, error) {
	var written []string
	var errs []error
	if ch, err := overheadPlot(res); err != nil {
		errs = append(errs, err)
	} else if ch != nil {
		for _, name := range []string{OverheadSVG, OverheadPNG} {
			if err := savePlot(ch, filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
			} else {
				written = append(written, name)
			}
		}
	}
	if ch, err := latencyPlot(res); err != nil {
		errs = append(errs, err)
	} else if ch != nil {
		for _, name := range []string{LatencySVG, LatencyPNG} {
			if err := savePlot(ch, filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
			} else {
				written = append(written, name)
			}
		}
	}
	return written, errors.Join(errs...)
}

// targetStyles gives every target but native (the baseline, never drawn
// as a series) its own colour and glyph, by its position in the results,
// so that a target looks the same on both charts and no two targets share
// a colour.
func targetStyles(res *Results) map[string]chartkit.Style {
	var names []string
	for _, n := range res.targetNames() {
		if n != "native" {
			names = append(names, n)
		}
	}
	styles := chartkit.Styles(len(names))
	m := make(map[string]chartkit.Style, len(names))
	for i, n := range names {
		m[n] = styles[i]
	}
	return m
}

// chart is a plot and the notes beside it that define its terms.
type chart struct {
	p     *plot.Plot
	notes []string
}

// groupWidth returns the width of a category's group of bars and of one
// bar, for n categories and k series.
func groupWidth(n, k int) (group, bar vg.Length) {
	group = min((chartWidth*6/10)*7/10/vg.Length(n), 1.5*vg.Inch)
	return group, group / vg.Length(k)
}

// overheadPlot is a grouped bar chart: per workload (headline metric) one
// bar per target, its cost relative to native, on a log axis standing on
// 1× so that 1.2× and 40× are both readable and a faster-than-native
// target points down; nil without native.
func overheadPlot(res *Results) (ch *chart, err error) {
	if !res.hasTarget("native") || len(res.Workloads) == 0 {
		return nil, nil
	}
	defer recoverPlot(&err)
	var others []string
	for _, n := range res.targetNames() {
		if n != "native" {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return nil, nil
	}
	styles := targetStyles(res)
	p := plot.New()
	p.Title.Text = "Cost relative to native per workload (log scale)"
	p.Y.Label.Text = "× native (paired by repeat; error bar: 95 % interval)"
	p.Add(plotter.NewGrid())
	var names []string
	for _, w := range res.Workloads {
		names = append(names, w.Name)
	}
	group, barW := groupWidth(len(names), len(others))
	lo, hi := 1.0, 1.0
	for i, tn := range others {
		vals := make([]float64, len(res.Workloads))
		errLo := make([]float64, len(res.Workloads))
		errHi := make([]float64, len(res.Workloads))
		for j, w := range res.Workloads {
			vals[j], errLo[j], errHi[j] = math.NaN(), math.NaN(), math.NaN()
			m, _ := metricFor(orDefault(w.Headline, "wall_s"))
			if r, ok := res.ratio(tn, "native", w, m); ok && r.Point > 0 && !math.IsInf(r.Point, 0) {
				vals[j] = r.Point
				lo, hi = math.Min(lo, r.Point), math.Max(hi, r.Point)
				if r.HasInterval() && r.Lo > 0 && !math.IsInf(r.Hi, 0) {
					errLo[j], errHi[j] = r.Lo, r.Hi
					lo, hi = math.Min(lo, r.Lo), math.Max(hi, r.Hi)
				}
			}
		}
		bars := &chartkit.Bars{Values: vals, ErrLo: errLo, ErrHi: errHi, Base: 1, Width: barW, Style: styles[tn],
			Offset: barW*vg.Length(i) - group/2 + barW/2}
		p.Add(bars)
		p.Legend.Add(tn, bars)
	}
	xMin, xMax := -0.5, float64(len(names))-0.5
	one, err := plotter.NewLine(plotter.XYs{{X: xMin, Y: 1}, {X: xMax, Y: 1}})
	if err != nil {
		return nil, fmt.Errorf("overhead chart: %w", err)
	}
	one.Width = vg.Points(1)
	p.Add(one)
	p.NominalX(names...)
	p.X.Min, p.X.Max = xMin, xMax
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chartkit.LogTicks{Format: chartkit.Ratio}
	p.Y.Min, p.Y.Max = chartkit.LogRange(lo, hi)
	notes := []string{"", "Bars start at 1× = as fast as native:",
		"up is slower, down is faster.", "Rates (MiB/s, ops/s) are inverted",
		"so that up is always a cost.", "Bar: geometric mean of the ratios",
		"of each repeat; error bar: its 95 %", "interval (t on the log ratios).",
		"An error bar across 1×: level.", "Missing bar: the run failed or",
		"the target has no such workload."}
	return &chart{p, notes}, nil
}

// latencyPlot is a grouped bar chart of per-op latency in the daemon of
// each target with per-op statistics: the bar is the p50, the whisker the
// p99, each the median over all its runs, on a log scale; nil when no
// target has statistics.
func latencyPlot(res *Results) (ch *chart, err error) {
	targets := res.statsTargets()
	if len(targets) == 0 {
		return nil, nil
	}
	defer recoverPlot(&err)
	styles := targetStyles(res)
	p := plot.New()
	p.Title.Text = "Per-op latency in the daemon: bar p50, whisker p99 (median over all runs)"
	p.Y.Label.Text = "latency (µs, log scale)"
	p.Add(plotter.NewGrid())
	group, barW := groupWidth(len(latencyOps), len(targets))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, tn := range targets {
		var runs []Run
		for _, r := range res.Runs {
			if r.Target == tn {
				runs = append(runs, r)
			}
		}
		p50s := make([]float64, len(latencyOps))
		p99s := make([]float64, len(latencyOps))
		any := false
		for x, op := range latencyOps {
			p50s[x], p99s[x] = math.NaN(), math.NaN()
			if a, b, ok := opLatency(runs, op); ok {
				a, b = math.Max(a, 1)/1e3, math.Max(b, 1)/1e3
				p50s[x], p99s[x] = a, b
				lo, hi = math.Min(lo, math.Min(a, b)), math.Max(hi, math.Max(a, b))
				any = true
			}
		}
		if !any {
			continue
		}
		bars := &chartkit.Bars{Values: p50s, High: p99s, Width: barW, Style: styles[tn],
			Offset: barW*vg.Length(i) - group/2 + barW/2}
		p.Add(bars)
		p.Legend.Add(tn, bars)
	}
	if math.IsInf(lo, 1) {
		return nil, nil
	}
	labels := make([]string, len(latencyOps))
	for i, op := range latencyOps {
		labels[i] = fmt.Sprintf("%s (%s)", op, report.ClassOf(op))
	}
	p.NominalX(labels...)
	p.X.Min, p.X.Max = -0.5, float64(len(latencyOps))-0.5
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = chartkit.LogTicks{}
	p.Y.Min, p.Y.Max = chartkit.LogRange(lo, hi)
	notes := append([]string{""}, report.ClassNotes()...)
	return &chart{p, notes}, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// savePlot renders p in the format of path's extension and only then
// creates the file, so that a failed rendering leaves nothing behind.
func savePlot(ch *chart, path string) (err error) {
	defer recoverPlot(&err)
	format := filepath.Ext(path)[1:]
	wt, err := chartkit.Render(ch.p, ch.notes, chartWidth, chartHeight, format)
	if err != nil {
		return fmt.Errorf("render %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// recoverPlot turns a panic inside gonum/plot (values a log axis cannot
// show, for instance) into an error: the results are worth more than a
// chart.
func recoverPlot(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("draw chart: %v", v)
	}
}
