// Package chartkit holds what the bench's and the report's charts share so
// that a reader can tell their series apart: a palette in which no two
// series share a colour, a glyph per series on top of it (for a reader who
// does not see colours well, and for grey-scale prints), bars that stand on
// a log axis, and a layout that puts the legend and the notes that define
// the chart's terms beside the plot instead of over its data.
package chartkit

import (
	"fmt"
	"image"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Palette is a set of colours far enough apart to be told from each other
// (Tableau 10 followed by darker and lighter variants); no two are equal.
var Palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0x00, 0x00, 0x00, 0xff}, // black
	{0x39, 0x3b, 0x79, 0xff}, // navy
	{0x84, 0x3c, 0x39, 0xff}, // dark red
	{0x63, 0x79, 0x39, 0xff}, // dark olive
	{0xfd, 0xd0, 0xa2, 0xff}, // light orange
	{0x9e, 0xda, 0xe5, 0xff}, // light cyan
}

// glyphs are the markers drawn on each series, in series order.
var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{},
	draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{},
	draw.PlusGlyph{}, draw.CrossGlyph{},
}

// Style is how one series is drawn.
type Style struct {
	Color color.Color
	Glyph draw.GlyphDrawer
}

// Styles returns a style for each of n series: distinct colours for up
// to len(Palette) series, and past that still a distinct colour+glyph
// pair (len(Palette) and len(glyphs) share the factor 8, so the glyph
// shifts by one every time the colours wrap around).
func Styles(n int) []Style {
	s := make([]Style, n)
	for i := range s {
		s[i] = Style{
			Color: Palette[i%len(Palette)],
			Glyph: glyphs[(i+i/len(Palette))%len(glyphs)],
		}
	}
	return s
}

// Bars is a bar series on a categorical X axis (category i at x = i) that
// stands on any Y scale, a log one included: each bar goes from Base to
// its value (downwards when the value is below Base) and carries the
// series' glyph at its end. High, when set, draws a whisker from the top
// of the bar up to High[i] (a p99 over a p50, say). ErrLo and ErrHi, when
// set, draw an error bar with caps from ErrLo[i] to ErrHi[i] (an interval
// around the value). NaN values are left out.
type Bars struct {
	Values, High []float64
	ErrLo, ErrHi []float64
	Base         float64 // where the bars start; 0 = the bottom of the axis
	Width        vg.Length
	Offset       vg.Length // of this series' bars from the category's centre
	Style        Style
}

// Plot implements plot.Plotter.
func (b *Bars) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	base := c.Min.Y
	if b.Base > 0 {
		base = ty(b.Base)
	}
	outline := draw.LineStyle{Color: color.Black, Width: vg.Points(0.5)}
	whisker := draw.LineStyle{Color: color.Black, Width: vg.Points(1)}
	for i, v := range b.Values {
		if math.IsNaN(v) || v <= 0 {
			continue
		}
		x := tx(float64(i)) + b.Offset
		y := ty(v)
		l, r := x-b.Width/2, x+b.Width/2
		box := []vg.Point{{X: l, Y: base}, {X: l, Y: y}, {X: r, Y: y}, {X: r, Y: base}}
		c.FillPolygon(b.Style.Color, c.ClipPolygonXY(box))
		c.StrokeLines(outline, c.ClipLinesXY(append(box, box[0]))...)
		if i < len(b.High) && !math.IsNaN(b.High[i]) && b.High[i] > v {
			h := ty(b.High[i])
			c.StrokeLines(whisker, c.ClipLinesXY([]vg.Point{{X: x, Y: y}, {X: x, Y: h}})...)
			c.StrokeLines(whisker, c.ClipLinesXY([]vg.Point{{X: x - b.Width/4, Y: h}, {X: x + b.Width/4, Y: h}})...)
		}
		if c.Contains(vg.Point{X: x, Y: y}) {
			c.DrawGlyph(b.glyphStyle(), vg.Point{X: x, Y: y})
		}
		if lo, hi := at(b.ErrLo, i), at(b.ErrHi, i); lo > 0 && hi > lo {
			yl, yh := ty(lo), ty(hi)
			c.StrokeLines(whisker, c.ClipLinesXY([]vg.Point{{X: x, Y: yl}, {X: x, Y: yh}})...)
			for _, cy := range []vg.Length{yl, yh} {
				c.StrokeLines(whisker, c.ClipLinesXY([]vg.Point{{X: x - b.Width/3, Y: cy}, {X: x + b.Width/3, Y: cy}})...)
			}
		}
	}
}

func (b *Bars) glyphStyle() draw.GlyphStyle {
	return draw.GlyphStyle{Color: contrast(b.Style.Color), Radius: min(b.Width/2.5, vg.Points(3.5)), Shape: b.Style.Glyph}
}

// contrast is the colour of a glyph drawn over c: white on a dark colour,
// black on a light one.
func contrast(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	if (299*r+587*g+114*b)/1000 < 0x6000 {
		return color.White
	}
	return color.Black
}

// DataRange implements plot.DataRanger: the categories on X, the values
// (and whiskers) on Y.
func (b *Bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = -0.5, float64(len(b.Values))-0.5
	ymin, ymax = math.Inf(1), math.Inf(-1)
	for i, v := range b.Values {
		for _, y := range []float64{v, at(b.High, i), at(b.ErrLo, i), at(b.ErrHi, i)} {
			if !math.IsNaN(y) && y > 0 {
				ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
			}
		}
	}
	return xmin, xmax, ymin, ymax
}

func at(v []float64, i int) float64 {
	if i < len(v) {
		return v[i]
	}
	return math.NaN()
}

// Thumbnail implements plot.Thumbnailer: a filled box with the glyph.
func (b *Bars) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	}
	c.FillPolygon(b.Style.Color, c.ClipPolygonY(pts))
	c.DrawGlyphNoClip(draw.GlyphStyle{Color: contrast(b.Style.Color), Radius: vg.Points(3), Shape: b.Style.Glyph}, c.Center())
}

// Render draws p with its legend and notes (lines of text that define the
// chart's terms) in a panel at the right of the plot, never over the data,
// and returns it in format (svg, png, pdf...). p's legend is moved into
// the panel while drawing and put back afterwards, so that p can be
// rendered again in another format.
//
// The whole canvas is painted white first: gonum paints only the plot's
// own area, and a legend drawn on a transparent panel vanishes on a dark
// page. An SVG carries its font (Liberation Serif, ~0.5 MB): SVG text is
// laid out by the viewer, and a viewer without that font substitutes a
// wider one, so that the legend, measured here with Liberation's metrics,
// ran into the plot and off the right edge. When the legend and notes are
// wider than the panel may be (two fifths of the width), their text is
// made smaller until they fit.
func Render(p *plot.Plot, notes []string, w, h vg.Length, format string) (io.WriterTo, error) {
	cw, err := newCanvas(w, h, format)
	if err != nil {
		return nil, err
	}
	c := draw.New(cw)
	c.FillPolygon(color.White, []vg.Point{{X: 0, Y: 0}, {X: 0, Y: h}, {X: w, Y: h}, {X: w, Y: 0}})
	saved := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = saved }()
	leg := saved
	leg.Top, leg.Left = true, true
	leg.XOffs, leg.YOffs = 0, 0
	note := leg.TextStyle
	note.Font.Size = leg.TextStyle.Font.Size * 0.85

	pad := vg.Points(10)
	maxPanel := w * 2 / 5
	content := func() vg.Length {
		cw := leg.Rectangle(c).Size().X
		for _, n := range notes {
			cw = max(cw, note.Rectangle(n).Size().X)
		}
		return cw
	}
	panelW := content()
	if panelW+2*pad > maxPanel {
		// Text widths scale with the font size; the thumbnails do not,
		// hence the few rounds.
		for i := 0; i < 5 && panelW+2*pad > maxPanel; i++ {
			f := float64((maxPanel - 2*pad) / panelW)
			leg.TextStyle.Font.Size = vg.Length(float64(leg.TextStyle.Font.Size) * f)
			note.Font.Size = vg.Length(float64(note.Font.Size) * f)
			panelW = content()
		}
	}
	panelW = min(panelW+2*pad, maxPanel)
	lineH := note.Rectangle("Xg").Size().Y * 1.15

	p.Draw(draw.Crop(c, 0, -panelW, 0, 0))

	panel := draw.Crop(c, w-panelW+pad, -pad, 0, -pad)
	// Leave room for the title, so that the legend starts level with the data.
	if p.Title.Text != "" {
		panel.Max.Y -= p.Title.TextStyle.Rectangle(p.Title.Text).Size().Y + p.Title.Padding
	}
	leg.Draw(panel)
	y := panel.Max.Y - leg.Rectangle(panel).Size().Y - lineH
	for _, n := range notes {
		c.FillText(note, vg.Point{X: panel.Min.X, Y: y}, n)
		y -= lineH
	}
	return cw, nil
}

// newCanvas is draw.NewFormattedCanvas, but an SVG embeds its fonts.
func newCanvas(w, h vg.Length, format string) (vg.CanvasWriterTo, error) {
	if strings.EqualFold(format, "svg") {
		return vgsvg.NewWith(vgsvg.UseWH(w, h), vgsvg.EmbedFonts(true)), nil
	}
	return draw.NewFormattedCanvas(w, h, format)
}

// LogRange returns whole decades around [lo, hi] (both > 0) for a log
// axis; at least one decade.
func LogRange(lo, hi float64) (float64, float64) {
	a := math.Pow10(int(math.Floor(math.Log10(lo))))
	b := math.Pow10(int(math.Ceil(math.Log10(hi))))
	if b <= a {
		b = a * 10
	}
	return a, b
}

// Ratio formats a ratio tick: 0.5×, 1×, 20×.
func Ratio(v float64) string { return fmt.Sprintf("%g×", v) }

// LogTicks marks a log axis at 1, 2 and 5 times each power of ten (labelled)
// and the other integer multiples (unlabelled), so that an axis spanning
// one or two decades still has several numbers on it; on an axis of more
// than three decades only the powers of ten are labelled. Format labels a
// tick (strconv's %g when nil).
type LogTicks struct {
	Format func(float64) string
}

// Ticks implements plot.Ticker.
func (t LogTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	format := t.Format
	if format == nil {
		format = func(v float64) string { return fmt.Sprintf("%g", v) }
	}
	// Past three decades 2 and 5 are no longer labelled: their labels
	// would run into each other.
	labelled := map[int]bool{1: true, 2: true, 5: true}
	if math.Log10(hi/lo) > 3 {
		labelled = map[int]bool{1: true}
	}
	var ticks []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for m := 1; m <= 9; m++ {
			v := float64(m) * math.Pow10(e)
			// Round away float noise (3*1e-1 = 0.30000000000000004).
			v, _ = parseG(fmt.Sprintf("%.6g", v))
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			label := ""
			if labelled[m] {
				label = format(v)
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: label})
		}
	}
	return ticks
}

func parseG(s string) (float64, error) {
	var v float64
	_, err := fmt.Sscan(s, &v)
	return v, err
}

// Pixels counts the pixels of img that have exactly colour c (alpha
// ignored): how tests check that each series of a rendered chart is
// there in its own colour.
func Pixels(img image.Image, c color.Color) int {
	want := color.NRGBAModel.Convert(c).(color.NRGBA)
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			got := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			if got.R == want.R && got.G == want.G && got.B == want.B && got.A == 0xff {
				n++
			}
		}
	}
	return n
}
