package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const (
	chartWidth  = 10 * vg.Inch
	chartHeight = 5 * vg.Inch
)

// WriteCharts draws overhead.svg/png (each target's cost relative to
// native, per workload) and latency.svg/png (per-op p50 and p99 of our
// FUSE targets) into dir and returns the files written. A chart without
// data is left out, not an error.
func WriteCharts(dir string, res *Results) ([]string, error) {
	var written []string
	var errs []error
	if p, err := overheadPlot(res); err != nil {
		errs = append(errs, err)
	} else if p != nil {
		for _, name := range []string{OverheadSVG, OverheadPNG} {
			if err := savePlot(p, filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
			} else {
				written = append(written, name)
			}
		}
	}
	if p, err := latencyPlot(res); err != nil {
		errs = append(errs, err)
	} else if p != nil {
		for _, name := range []string{LatencySVG, LatencyPNG} {
			if err := savePlot(p, filepath.Join(dir, name)); err != nil {
				errs = append(errs, err)
			} else {
				written = append(written, name)
			}
		}
	}
	return written, errors.Join(errs...)
}

// overheadPlot is a grouped bar chart: per workload (headline metric) one
// bar per target, its cost relative to native; nil without native.
func overheadPlot(res *Results) (p *plot.Plot, err error) {
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
	p = plot.New()
	p.Title.Text = "Cost relative to native (time ratio of medians; rates inverted; 1 = as fast as native)"
	p.Y.Label.Text = "× native"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var names []string
	for _, w := range res.Workloads {
		names = append(names, w.Name)
	}
	// Groups take 70 % of the space per workload, at most 1.5 inch.
	group := min(chartWidth*7/10/vg.Length(len(names)), 1.5*vg.Inch)
	barW := group / vg.Length(len(others))
	maxY := 1.0
	for i, tn := range others {
		vals := make(plotter.Values, len(res.Workloads))
		for j, w := range res.Workloads {
			m, _ := metricFor(orDefault(w.Headline, "wall_s"))
			if r, ok := res.ratio(tn, "native", w, m); ok {
				vals[j] = r
				maxY = math.Max(maxY, r)
			}
		}
		bars, err := plotter.NewBarChart(vals, barW)
		if err != nil {
			return nil, fmt.Errorf("overhead chart: %w", err)
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = barW*vg.Length(i) - group/2 + barW/2
		p.Add(bars)
		p.Legend.Add(tn, bars)
	}
	xMin, xMax := -0.5, float64(len(names))-0.5
	one, err := plotter.NewLine(plotter.XYs{{X: xMin, Y: 1}, {X: xMax, Y: 1}})
	if err != nil {
		return nil, fmt.Errorf("overhead chart: %w", err)
	}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(one)
	p.NominalX(names...)
	p.X.Min, p.X.Max = xMin, xMax
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	// Headroom for the legend.
	p.Y.Min, p.Y.Max = 0, maxY*1.3
	return p, nil
}

// latencyPlot shows per op the p50 (solid) and p99 (dashed) latency of
// each target with per-op statistics, the median over all its runs, on a
// log scale; nil when no target has statistics.
func latencyPlot(res *Results) (p *plot.Plot, err error) {
	targets := res.statsTargets()
	if len(targets) == 0 {
		return nil, nil
	}
	defer recoverPlot(&err)
	p = plot.New()
	p.Title.Text = "Per-op latency in the daemon: p50 (solid) and p99 (dashed), median over all runs"
	p.Y.Label.Text = "latency (µs, log scale)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, tn := range targets {
		var runs []Run
		for _, r := range res.Runs {
			if r.Target == tn {
				runs = append(runs, r)
			}
		}
		var p50s, p99s plotter.XYs
		for x, op := range latencyOps {
			if a, b, ok := opLatency(runs, op); ok {
				a, b = math.Max(a, 1)/1e3, math.Max(b, 1)/1e3
				p50s = append(p50s, plotter.XY{X: float64(x), Y: a})
				p99s = append(p99s, plotter.XY{X: float64(x), Y: b})
				lo, hi = math.Min(lo, math.Min(a, b)), math.Max(hi, math.Max(a, b))
			}
		}
		if len(p50s) == 0 {
			continue
		}
		for k, xys := range []plotter.XYs{p50s, p99s} {
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("latency chart: %w", err)
			}
			line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			points.Shape = draw.CircleGlyph{}
			line.Width = vg.Points(1.5)
			if k == 1 {
				line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
			} else {
				p.Legend.Add(tn, line)
			}
			p.Add(line, points)
		}
	}
	if math.IsInf(lo, 1) {
		return nil, nil
	}
	p.NominalX(latencyOps...)
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = math.Pow10(int(math.Floor(math.Log10(lo))))
	p.Y.Max = math.Pow10(int(math.Ceil(math.Log10(hi))))
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min * 10
	}
	return p, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// savePlot renders p in the format of path's extension and only then
// creates the file, so that a failed rendering leaves nothing behind.
func savePlot(p *plot.Plot, path string) (err error) {
	defer recoverPlot(&err)
	format := filepath.Ext(path)[1:]
	wt, err := p.WriterTo(chartWidth, chartHeight, format)
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
