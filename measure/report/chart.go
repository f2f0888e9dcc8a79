package report

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ChartFormats are the file extensions the chart writers accept.
var ChartFormats = []string{"svg", "png", "pdf"}

// ErrChartFormat is returned for a chart file name with an extension not
// in ChartFormats.
var ErrChartFormat = errors.New("chart file must end in .svg, .png or .pdf")

// errNoData is returned when there is nothing to draw.
var errNoData = errors.New("no operations to chart")

// chartFormat returns the format for path, from its extension.
func chartFormat(path string) (string, error) {
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	for _, f := range ChartFormats {
		if ext == f {
			return f, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrChartFormat, path)
}

// CheckChartPath reports whether a chart can be written to path as far as
// its name goes, so that a command can refuse it before reading logs.
func CheckChartPath(path string) error {
	_, err := chartFormat(path)
	return err
}

// twinDashes draws the twin's lines; the encrypted mount's are solid.
var twinDashes = []vg.Length{vg.Points(5), vg.Points(3)}

const (
	chartWidth  = 8 * vg.Inch
	chartHeight = 5 * vg.Inch
)

// WriteCDFChart draws the latency CDF of each op class, the encrypted
// mount solid and the twin (if the log has it) dashed, on a log-scale
// latency axis in µs, and writes it to path (.svg, .png or .pdf).
func WriteCDFChart(r *Report, path string) (err error) {
	format, err := chartFormat(path)
	if err != nil {
		return err
	}
	if len(r.CDF) == 0 {
		return errNoData
	}
	defer recoverPlot(&err)

	p := plot.New()
	title := "Latency CDF by op class"
	if r.Mirror {
		title += ": encrypted (solid) vs twin (dashed)"
	}
	p.Title.Text = title
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "fraction of ops at or below"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())

	lo, hi := math.Inf(1), math.Inf(-1)
	for _, cdf := range r.CDF {
		xys := make(plotter.XYs, len(cdf.Points))
		for i, pt := range cdf.Points {
			xys[i] = plotter.XY{X: usOf(pt.Ns), Y: pt.Q}
			lo, hi = math.Min(lo, xys[i].X), math.Max(hi, xys[i].X)
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("chart %s %s: %w", cdf.Class, cdf.Side, err)
		}
		line.Color = classColor(cdf.Class)
		line.Width = vg.Points(1.5)
		if cdf.Side == "twin" {
			line.Dashes = twinDashes
		}
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s %s (%d ops)", cdf.Class, cdf.Side, cdf.Count), line)
	}
	setLogAxis(&p.X, lo, hi)
	return savePlot(p, path, format)
}

// WriteTimeChart draws p50 and p99 latency of all ops per timeline bucket,
// the encrypted mount solid and the twin dashed, and writes it to path.
func WriteTimeChart(r *Report, path string) (err error) {
	format, err := chartFormat(path)
	if err != nil {
		return err
	}
	tl := r.Timeline
	if len(tl.Buckets) == 0 {
		return errNoData
	}
	defer recoverPlot(&err)

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency over time, all ops (buckets of %v)", time.Duration(tl.BucketNs))
	p.X.Label.Text = "time (UTC)"
	p.Y.Label.Text = "latency (µs, log scale)"
	layout := "15:04:05"
	if r.Last.Sub(r.First) >= 24*time.Hour {
		layout = "01-02 15:04"
	}
	p.X.Tick.Marker = plot.TimeTicks{Format: layout, Time: func(t float64) time.Time {
		return time.Unix(0, int64(t*1e9)).UTC()
	}}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	type series struct {
		name   string
		value  func(Bucket) int64
		color  color.Color
		dashed bool
	}
	all := []series{
		{"p50", func(b Bucket) int64 { return b.P50Ns }, plotutil.Color(0), false},
		{"p99", func(b Bucket) int64 { return b.P99Ns }, plotutil.Color(1), false},
	}
	if r.Mirror {
		all = append(all,
			series{"twin p50", func(b Bucket) int64 { return b.TwinP50Ns }, plotutil.Color(0), true},
			series{"twin p99", func(b Bucket) int64 { return b.TwinP99Ns }, plotutil.Color(1), true})
	}
	mid := float64(tl.BucketNs) / 2
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		var xys plotter.XYs
		for _, b := range tl.Buckets {
			if v := s.value(b); v > 0 {
				x := (float64(b.Start.UnixNano()) + mid) / 1e9
				xys = append(xys, plotter.XY{X: x, Y: usOf(v)})
				lo, hi = math.Min(lo, usOf(v)), math.Max(hi, usOf(v))
			}
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("chart %s: %w", s.name, err)
		}
		line.Color, points.Color = s.color, s.color
		points.Shape = draw.CircleGlyph{}
		points.Radius = vg.Points(1.5)
		if s.dashed {
			line.Dashes = twinDashes
		}
		p.Add(line, points)
		p.Legend.Add(s.name, line)
	}
	if math.IsInf(lo, 1) {
		return errNoData
	}
	setLogAxis(&p.Y, lo, hi)
	return savePlot(p, path, format)
}

// usOf converts ns to µs, keeping it positive for the log scale.
func usOf(ns int64) float64 { return float64(max(ns, 1)) / 1e3 }

// setLogAxis makes a a log-scale axis spanning whole decades around
// [lo, hi] (both > 0). gonum widens an empty range by ±1, which would
// reach below zero, so the range is always set explicitly.
func setLogAxis(a *plot.Axis, lo, hi float64) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = plot.LogTicks{Prec: -1}
	a.Min = math.Pow10(int(math.Floor(math.Log10(lo))))
	a.Max = math.Pow10(int(math.Ceil(math.Log10(hi))))
	if a.Max <= a.Min {
		a.Max = a.Min * 10
	}
}

func classColor(c Class) color.Color {
	for i, k := range Classes {
		if k == c {
			return plotutil.Color(i)
		}
	}
	return plotutil.Color(len(Classes))
}

// savePlot renders p and only then creates path, so that a failed
// rendering leaves no truncated file behind.
func savePlot(p *plot.Plot, path, format string) error {
	wt, err := p.WriterTo(chartWidth, chartHeight, format)
	if err != nil {
		return fmt.Errorf("render chart %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if _, err := wt.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write chart %s: %w", path, err)
	}
	return nil
}

// recoverPlot turns a panic inside gonum/plot (it panics on values a log
// axis cannot show, for instance) into an error: numbers read from a log
// must never crash the command.
func recoverPlot(err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("draw chart: %v", v)
	}
}
