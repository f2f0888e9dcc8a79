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

	"github.com/twincrypt/twincrypt/measure/chartkit"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
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
	chartWidth  = 11 * vg.Inch
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
	p, notes, err := cdfPlot(r)
	if err != nil {
		return err
	}
	return savePlot(p, notes, path, format)
}

// cdfPlot builds the chart WriteCDFChart draws and the notes beside it.
func cdfPlot(r *Report) (*plot.Plot, []string, error) {

	p := plot.New()
	title := "Latency CDF by op class"
	if r.Mirror {
		title += ": encrypted (solid) vs twin (dashed)"
	}
	p.Title.Text = title
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "fraction of ops at or below"
	p.Y.Min, p.Y.Max = 0, 1
	var yt plot.ConstantTicks
	for i := 0; i <= 10; i++ {
		yt = append(yt, plot.Tick{Value: float64(i) / 10, Label: fmt.Sprintf("%.1f", float64(i)/10)})
	}
	p.Y.Tick.Marker = yt
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
			return nil, nil, fmt.Errorf("chart %s %s: %w", cdf.Class, cdf.Side, err)
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
	notes := []string{""}
	if r.Mirror {
		notes = append(notes, "solid: the encrypted mount", "dashed: the plaintext twin", "")
	}
	return p, append(notes, ClassNotes()...), nil
}

// WriteTimeChart draws p50 and p99 latency of all ops per timeline bucket,
// the encrypted mount solid and the twin dashed, and writes it to path.
func WriteTimeChart(r *Report, path string) (err error) {
	format, err := chartFormat(path)
	if err != nil {
		return err
	}
	if len(r.Timeline.Buckets) == 0 {
		return errNoData
	}
	defer recoverPlot(&err)
	p, notes, err := timePlot(r)
	if err != nil {
		return err
	}
	return savePlot(p, notes, path, format)
}

// timePlot builds the chart WriteTimeChart draws and the notes beside it.
func timePlot(r *Report) (*plot.Plot, []string, error) {
	tl := r.Timeline

	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency over time, all ops (buckets of %v)", time.Duration(tl.BucketNs))
	p.Y.Label.Text = "latency (µs, log scale)"
	// Time runs from the log's first op, in a unit that suits its span:
	// clock-time ticks repeat one label on a log of a few seconds.
	unit, unitName := timeUnit(r.Last.Sub(r.First))
	p.X.Label.Text = fmt.Sprintf("%s since the first op (%s UTC)", unitName,
		r.First.UTC().Format("2006-01-02 15:04:05.000"))
	p.Add(plotter.NewGrid())

	type series struct {
		name   string
		value  func(Bucket) int64
		color  color.Color
		dashed bool
	}
	all := []series{
		{"p50", func(b Bucket) int64 { return b.P50Ns }, chartkit.Palette[0], false},
		{"p99", func(b Bucket) int64 { return b.P99Ns }, chartkit.Palette[1], false},
	}
	if r.Mirror {
		all[0].name, all[1].name = "encrypted p50", "encrypted p99"
		all = append(all,
			series{"twin p50", func(b Bucket) int64 { return b.TwinP50Ns }, chartkit.Palette[0], true},
			series{"twin p99", func(b Bucket) int64 { return b.TwinP99Ns }, chartkit.Palette[1], true})
	}
	mid := float64(tl.BucketNs) / 2
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		// A line joins neighbouring buckets only: across a bucket without
		// ops it would draw latencies nobody measured. Such buckets are
		// not in the timeline at all (it leaves empty ones out), so a
		// start more than one width after the last one is a gap too.
		var segs []plotter.XYs
		var cur plotter.XYs
		var last time.Time
		for _, b := range tl.Buckets {
			v := s.value(b)
			gap := len(cur) > 0 && b.Start.Sub(last) > time.Duration(tl.BucketNs)
			if (v <= 0 || gap) && len(cur) > 0 {
				segs, cur = append(segs, cur), nil
			}
			if v <= 0 {
				continue
			}
			last = b.Start
			x := (float64(b.Start.Sub(r.First)) + mid) / float64(unit)
			cur = append(cur, plotter.XY{X: x, Y: usOf(v)})
			lo, hi = math.Min(lo, usOf(v)), math.Max(hi, usOf(v))
		}
		if len(cur) > 0 {
			segs = append(segs, cur)
		}
		for i, xys := range segs {
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, nil, fmt.Errorf("chart %s: %w", s.name, err)
			}
			line.Color, points.Color = s.color, s.color
			points.Shape = draw.CircleGlyph{}
			points.Radius = vg.Points(1.5)
			if s.dashed {
				line.Dashes = twinDashes
				points.Shape = draw.RingGlyph{}
			}
			p.Add(line, points)
			if i == 0 {
				p.Legend.Add(s.name, line, points)
			}
		}
	}
	if math.IsInf(lo, 1) {
		return nil, nil, errNoData
	}
	setLogAxis(&p.Y, lo, hi)
	p.X.Min = 0
	notes := []string{"", "Each point: one bucket of " + time.Duration(tl.BucketNs).String() + ";",
		"a bucket without ops has no point", "and breaks the line.", "All op classes together."}
	return p, notes, nil
}

// timeUnit picks the unit of the time axis for a log spanning span.
func timeUnit(span time.Duration) (time.Duration, string) {
	switch {
	case span < 3*time.Minute:
		return time.Second, "seconds"
	case span < 3*time.Hour:
		return time.Minute, "minutes"
	default:
		return time.Hour, "hours"
	}
}

// usOf converts ns to µs, keeping it positive for the log scale.
func usOf(ns int64) float64 { return float64(max(ns, 1)) / 1e3 }

// setLogAxis makes a a log-scale axis spanning whole decades around
// [lo, hi] (both > 0). gonum widens an empty range by ±1, which would
// reach below zero, so the range is always set explicitly.
func setLogAxis(a *plot.Axis, lo, hi float64) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = chartkit.LogTicks{}
	a.Min, a.Max = chartkit.LogRange(lo, hi)
}

// classColor gives each class its own colour of chartkit.Palette.
func classColor(c Class) color.Color {
	for i, k := range Classes {
		if k == c {
			return chartkit.Palette[i]
		}
	}
	return chartkit.Palette[len(Classes)]
}

// savePlot renders p and only then creates path, so that a failed
// rendering leaves no truncated file behind.
func savePlot(p *plot.Plot, notes []string, path, format string) error {
	wt, err := chartkit.Render(p, notes, chartWidth, chartHeight, format)
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
