package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/twincrypt/twincrypt/measure/chartkit"
)

// Files a scale run writes with --out.
const (
	ScaleJSON = "scale.json"
	ScaleMD   = "scale.md"
)

// ScaleChartName is the chart of one shape and metric ("scale-flat.svg",
// "scale-flat-cpu.svg").
func ScaleChartName(shape Shape, cpu bool, ext string) string {
	if cpu {
		return "scale-" + string(shape) + "-cpu." + ext
	}
	return "scale-" + string(shape) + "." + ext
}

// ourTarget reports whether name is one of our FUSE mounts.
func ourTarget(name string) bool {
	return name == "twin" || strings.HasPrefix(name, "crypt-")
}

// WriteScaleOutputs writes scale.json, the charts and scale.md (tables
// and charts) into dir and returns the files written.
func WriteScaleOutputs(dir string, res *ScaleResults) ([]string, error) {
	var written []string
	var errs []error
	data, err := json.MarshalIndent(res, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, ScaleJSON), append(data, '\n'), 0o644)
	}
	if err != nil {
		errs = append(errs, err)
	} else {
		written = append(written, ScaleJSON)
	}
	var charts []string
	for _, shape := range res.Shapes {
		for _, cpu := range []bool{false, true} {
			for _, ext := range []string{"svg", "png"} {
				name := ScaleChartName(shape, cpu, ext)
				if err := writeScaleChart(filepath.Join(dir, name), res, shape, cpu, ext); err != nil {
					errs = append(errs, err)
					continue
				}
				written = append(written, name)
				if ext == "svg" {
					charts = append(charts, name)
				}
			}
		}
	}
	f, err := os.Create(filepath.Join(dir, ScaleMD))
	if err == nil {
		WriteScaleReport(f, res, charts)
		err = f.Close()
	}
	if err != nil {
		errs = append(errs, err)
	} else {
		written = append(written, ScaleMD)
	}
	return written, errors.Join(errs...)
}

// ReadScaleResults reads a scale.json.
func ReadScaleResults(path string) (*ScaleResults, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r ScaleResults
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func fmtCount(n int) string {
	if n >= 10 && n%10 == 0 {
		e, m := 0, n
		for m%10 == 0 {
			m /= 10
			e++
		}
		if m == 1 {
			return fmt.Sprintf("10^%d", e)
		}
	}
	return fmt.Sprint(n)
}

func fmtUS(sec float64, n int) string {
	us := sec / float64(n) * 1e6
	switch {
	case us >= 100:
		return fmt.Sprintf("%.0f", us)
	case us >= 10:
		return fmt.Sprintf("%.1f", us)
	}
	return fmt.Sprintf("%.2f", us)
}

func fmtMiB(kib int64) string { return fmt.Sprintf("%.0f", float64(kib)/1024) }

// WriteScaleReport writes the markdown report: per shape a table of time
// per file (µs) per op and target at each count, how flat it is, and how
// our mounts compare with the best peer; then the daemons' memory.
func WriteScaleReport(w io.Writer, res *ScaleResults, charts []string) {
	cells := res.cells()
	fmt.Fprintf(w, "# Scale: many files, %s\n\n", res.Date.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "- Command: `%s`\n", res.Command)
	fmt.Fprintf(w, "- CPU: %s, %d cores (AES-NI %v, VAES %v), %.1f GiB; kernel %s; %s\n",
		res.Machine.CPU, res.Machine.Cores, res.Machine.AESNI, res.Machine.VAES, res.Machine.MemoryGiB, res.Machine.Kernel, res.Machine.Go)
	fmt.Fprintf(w, "- Lower: %s\n", res.Lower)
	for _, t := range sortedKeys(res.Skipped) {
		fmt.Fprintf(w, "- Skipped %s: %s\n", t, res.Skipped[t])
	}
	fmt.Fprintln(w, "\nEach listing op runs on a fresh mount (cold daemon, cold kernel cache of the mount); "+
		"ls-l-warm is a second ls -l on the same mount. Times are µs per file (median of the repeats), "+
		"in brackets the daemon's CPU µs per file (user+system, steadier than the wall time on a shared machine); "+
		"\"flat\" is the time per file at the largest count over the smallest (1.0 = flat); "+
		"\"vs best peer\" is the best peer's time over ours at the largest count (>1: we are ahead), in brackets the same for the daemon's CPU time.")
	for _, shape := range res.Shapes {
		fmt.Fprintf(w, "\n## %s: %s\n\n", shape, shapeDesc(shape))
		hdr := "| op | target |"
		sep := "|---|---|"
		for _, n := range res.Counts {
			hdr += " " + fmtCount(n) + " |"
			sep += "---:|"
		}
		fmt.Fprintln(w, hdr+" flat | vs best peer |")
		fmt.Fprintln(w, sep+"---:|---:|")
		for _, op := range ScaleOps {
			for _, t := range res.Targets {
				row := fmt.Sprintf("| %s | %s |", op, t)
				for _, n := range res.Counts {
					row += " " + cellText(cells, scaleKey{t, shape, n, op}) + " |"
				}
				row += " " + flatness(cells, res.Counts, t, shape, op) + " |"
				row += " " + vsPeer(cells, res, t, shape, op) + " |"
				fmt.Fprintln(w, row)
			}
		}
		fmt.Fprintf(w, "\n### %s: daemon memory (MiB)\n\n", shape)
		fmt.Fprintln(w, "RSS after ls -l is VmRSS right after a cold `ls -l` of all N files; peak is the largest VmHWM over the ops; "+
			"bytes per inode is the daemon's growth while a cold listing caches every inode: the larger of "+
			"(VmHWM after ls -f − VmRSS at mount) / N and the same for ls -l (a Go daemon's peak includes its garbage, as gocryptfs's does).")
		fmt.Fprintln(w)
		hdr, sep = "| target |", "|---|"
		for _, n := range res.Counts {
			hdr += fmt.Sprintf(" RSS after ls -l %s | peak %s | bytes/inode %s |", fmtCount(n), fmtCount(n), fmtCount(n))
			sep += "---:|---:|---:|"
		}
		fmt.Fprintln(w, hdr)
		fmt.Fprintln(w, sep)
		for _, t := range res.Targets {
			if t == "native" {
				continue
			}
			row := "| " + t + " |"
			for _, n := range res.Counts {
				peak := int64(0)
				for _, op := range ScaleOps {
					peak = max(peak, cells[scaleKey{t, shape, n, op}].hwm)
				}
				perInode := math.NaN()
				for _, op := range []string{OpLsF, OpLsL} {
					if c, ok := cells[scaleKey{t, shape, n, op}]; ok && c.finished > 0 && c.hwm > 0 {
						perInode = math.Max(nanZero(perInode), float64(c.hwm-c.startRSS)*1024/float64(n))
					}
				}
				rss := "–"
				if c, ok := cells[scaleKey{t, shape, n, OpLsL}]; ok && c.finished > 0 && c.rss > 0 {
					rss = fmtMiB(c.rss)
				}
				pk, pi := "–", "–"
				if peak > 0 {
					pk = fmtMiB(peak)
				}
				if !math.IsNaN(perInode) {
					pi = fmt.Sprintf("%.0f", perInode)
				}
				row += fmt.Sprintf(" %s | %s | %s |", rss, pk, pi)
			}
			fmt.Fprintln(w, row)
		}
		for _, c := range charts {
			if strings.HasPrefix(c, "scale-"+string(shape)+".") {
				fmt.Fprintf(w, "\n![%s: time per file and daemon memory against file count](%s)\n", shape, c)
			}
		}
	}
}

func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func shapeDesc(s Shape) string {
	switch s {
	case ShapeFlat:
		return "N empty files in one directory"
	case ShapeTree:
		return "N empty files in 1000 directories (N/10 below 10^4)"
	}
	return string(s)
}

func cellText(cells map[scaleKey]scaleCell, k scaleKey) string {
	c, ok := cells[k]
	switch {
	case !ok:
		return "–"
	case c.finished == 0:
		return "FAIL"
	}
	if c.cpu > 0 {
		return fmtUS(c.sec, k.files) + " (" + fmtUS(c.cpu, k.files) + ")"
	}
	return fmtUS(c.sec, k.files)
}

// flatness is the time per file at the largest count the cell has over
// that at the smallest, wall (daemon CPU).
func flatness(cells map[scaleKey]scaleCell, counts []int, t string, shape Shape, op string) string {
	var have []int
	for _, n := range counts {
		if c, ok := cells[scaleKey{t, shape, n, op}]; ok && c.finished > 0 && c.sec > 0 {
			have = append(have, n)
		}
	}
	if len(have) < 2 {
		return "–"
	}
	lo, hi := slices.Min(have), slices.Max(have)
	a, b := cells[scaleKey{t, shape, lo, op}], cells[scaleKey{t, shape, hi, op}]
	out := fmt.Sprintf("%.2f", (b.sec/float64(hi))/(a.sec/float64(lo)))
	if a.cpu > 0 && b.cpu > 0 {
		out += fmt.Sprintf(" (%.2f)", (b.cpu/float64(hi))/(a.cpu/float64(lo)))
	}
	if hi != slices.Max(counts) {
		out += " to " + fmtCount(hi)
	}
	return out
}

// vsPeer is the best peer's time over ours at the largest count where
// ours and a peer both finished.
func vsPeer(cells map[scaleKey]scaleCell, res *ScaleResults, t string, shape Shape, op string) string {
	if !ourTarget(t) {
		return ""
	}
	for i := len(res.Counts) - 1; i >= 0; i-- {
		n := res.Counts[i]
		ours, ok := cells[scaleKey{t, shape, n, op}]
		if !ok || ours.finished == 0 {
			continue
		}
		best, bestCPU, peer := math.Inf(1), math.Inf(1), ""
		for _, p := range res.Targets {
			if !isPeer(p) {
				continue
			}
			if c, ok := cells[scaleKey{p, shape, n, op}]; ok && c.finished > 0 {
				if c.sec < best {
					best, peer = c.sec, p
				}
				if c.cpu > 0 {
					bestCPU = math.Min(bestCPU, c.cpu)
				}
			}
		}
		if peer == "" || ours.sec <= 0 {
			continue
		}
		s := fmt.Sprintf("%.2f %s", best/ours.sec, peer)
		if ours.cpu > 0 && !math.IsInf(bestCPU, 1) {
			s += fmt.Sprintf(" (CPU %.2f)", bestCPU/ours.cpu)
		}
		if n != slices.Max(res.Counts) {
			s += " at " + fmtCount(n)
		}
		return s
	}
	return "–"
}

func sortedKeys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	slices.Sort(k)
	return k
}

// writeScaleChart draws one shape: a tile per op with the time per file
// against the file count (log-log), a tile with each daemon's peak RSS,
// and the legend in the last tile.
func writeScaleChart(path string, res *ScaleResults, shape Shape, cpu bool, format string) (err error) {
	defer recoverPlot(&err)
	cells := res.cells()
	styles := chartkit.Styles(len(res.Targets))
	style := map[string]chartkit.Style{}
	for i, t := range res.Targets {
		style[t] = styles[i]
	}
	const cols, rows = 3, 3
	w, h := 13*vg.Inch, 11*vg.Inch
	cw, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	dc := draw.New(cw)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(12),
		PadTop: vg.Points(30), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6)}
	title := plot.New().Title.TextStyle
	title.XAlign, title.YAlign = draw.XCenter, draw.YTop
	title.Font.Size = vg.Points(14)
	what, ylabel := "time per file", "µs per file"
	if cpu {
		what, ylabel = "the daemon's CPU time per file", "daemon CPU µs per file"
	}
	dc.FillText(title, vg.Point{X: w / 2, Y: h - vg.Points(6)},
		fmt.Sprintf("Scale, %s: %s and daemon peak RSS against file count (log-log) — %s", shape, what, shapeDesc(shape)))
	legend := plot.NewLegend()
	inLegend := map[string]bool{}
	tile := 0
	type panel struct {
		title, ylabel string
		value         func(t string, n int) float64
	}
	var panels []panel
	for _, op := range ScaleOps {
		op := op
		panels = append(panels, panel{op, ylabel, func(t string, n int) float64 {
			c, ok := cells[scaleKey{t, shape, n, op}]
			v := c.sec
			if cpu {
				v = c.cpu
			}
			if !ok || c.finished == 0 || v <= 0 {
				return math.NaN()
			}
			return v / float64(n) * 1e6
		}})
	}
	panels = append(panels, panel{"daemon peak RSS", "MiB", func(t string, n int) float64 {
		peak := int64(0)
		for _, op := range ScaleOps {
			peak = max(peak, cells[scaleKey{t, shape, n, op}].hwm)
		}
		if peak == 0 {
			return math.NaN()
		}
		return float64(peak) / 1024
	}})
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "files"
		p.Y.Label.Text = pn.ylabel
		p.Add(plotter.NewGrid())
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, t := range res.Targets {
			var xys plotter.XYs
			for _, n := range res.Counts {
				if v := pn.value(t, n); !math.IsNaN(v) && v > 0 {
					xys = append(xys, plotter.XY{X: float64(n), Y: v})
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, s, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			l.Color = style[t].Color
			l.Width = vg.Points(1.5)
			s.Shape, s.Color, s.Radius = style[t].Glyph, style[t].Color, vg.Points(3.5)
			p.Add(l, s)
			if !inLegend[t] {
				legend.Add(t, l, s)
				inLegend[t] = true
			}
		}
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker = chartkit.LogTicks{Format: func(v float64) string { return fmtCount(int(math.Round(v))) }}
		p.Y.Tick.Marker = chartkit.LogTicks{}
		if len(res.Counts) > 0 {
			p.X.Min, p.X.Max = float64(slices.Min(res.Counts))/1.5, float64(slices.Max(res.Counts))*1.5
		}
		if !math.IsInf(lo, 1) {
			p.Y.Min, p.Y.Max = chartkit.LogRange(lo, hi)
		} else {
			p.Y.Min, p.Y.Max = 1, 10
		}
		p.Draw(tiles.At(dc, tile%cols, tile/cols))
		tile++
	}
	last := tiles.At(dc, tile%cols, tile/cols)
	legend.Top, legend.Left = true, true
	legend.Draw(last)
	note := legend.TextStyle
	note.Font.Size = legend.TextStyle.Font.Size * 0.85
	y := last.Max.Y - legend.Rectangle(last).Size().Y - vg.Points(20)
	for _, n := range []string{
		"Each op on a fresh mount (cold caches);",
		"ls-l-warm: a second ls -l on that mount.",
		"Flat lines: the cost per file does not",
		"grow with the number of files.",
		"Native has no daemon: no RSS line.",
		"Daemon CPU: user+system of the FUSE",
		"process, 10 ms resolution.",
		res.Machine.CPU,
		res.Date.Format("2006-01-02"),
	} {
		dc.FillText(note, vg.Point{X: last.Min.X, Y: y}, n)
		y -= note.Rectangle("Xg").Size().Y * 1.2
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := cw.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
