package chartkit

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/vg"
)

// TestStylesDistinct: no two of up to len(Palette) series share a colour,
// and past that no two share a colour and a glyph.
func TestStylesDistinct(t *testing.T) {
	seen := map[[3]uint8]bool{}
	for _, c := range Palette {
		k := [3]uint8{c.R, c.G, c.B}
		if seen[k] {
			t.Errorf("palette repeats %v", c)
		}
		seen[k] = true
	}
	for n := 1; n <= 3*len(Palette); n++ {
		st := Styles(n)
		colours := map[any]bool{}
		pairs := map[[2]any]bool{}
		for _, s := range st {
			if n <= len(Palette) && colours[s.Color] {
				t.Fatalf("Styles(%d): colour %v used twice", n, s.Color)
			}
			colours[s.Color] = true
			k := [2]any{s.Color, reflect.TypeOf(s.Glyph)}
			if pairs[k] {
				t.Fatalf("Styles(%d): colour %v and glyph %T used twice", n, s.Color, s.Glyph)
			}
			pairs[k] = true
		}
	}
}

// TestLogTicks: 1-2-5 labels on an axis of two decades, powers of ten
// only on a wide one, and every labelled value is the exact decimal.
func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (LogTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got, want := labels(0.1, 10), []string{"0.1", "0.2", "0.5", "1", "2", "5", "10"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ticks 0.1..10: %q, want %q", got, want)
	}
	if got, want := labels(1, 1e5), []string{"1", "10", "100", "1000", "10000", "100000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ticks 1..1e5: %q, want %q", got, want)
	}
	if lo, hi := LogRange(0.3, 40); lo != 0.1 || hi != 100 {
		t.Errorf("LogRange(0.3, 40) = %v, %v", lo, hi)
	}
	if lo, hi := LogRange(1, 1); lo != 1 || hi != 10 {
		t.Errorf("LogRange(1, 1) = %v, %v", lo, hi)
	}
}

// TestRenderKeepsLegend: a chart rendered twice (SVG, then PNG, as the
// bench does) shows its legend both times, beside the data.
func TestRenderKeepsLegend(t *testing.T) {
	p := plot.New()
	p.Title.Text = "t"
	st := Styles(3)
	for i, s := range st {
		b := &Bars{Values: []float64{float64(i + 1), math.NaN(), 3}, Base: 1, Width: vg.Points(10), Offset: vg.Points(12 * float64(i)), Style: s}
		p.Add(b)
		p.Legend.Add(string(rune('a'+i)), b)
	}
	p.Y.Scale = plot.LogScale{}
	p.Y.Min, p.Y.Max = 0.1, 10
	for range 2 {
		wt, err := Render(p, []string{"a note"}, 6*vg.Inch, 3*vg.Inch, "png")
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := wt.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		// Series 0 has value 1 = Base: no bar, so its colour can only
		// come from the legend.
		if n := Pixels(img, st[0].Color); n < 20 {
			t.Errorf("legend of series 0 not drawn (%d pixels of its colour)", n)
		}
		for i := 1; i < 3; i++ {
			if n := Pixels(img, st[i].Color); n < 100 {
				t.Errorf("series %d: %d pixels of its colour", i, n)
			}
		}
	}
}

// TestRenderSVGCanvas: an SVG chart is white over the whole canvas (not
// only behind the plot), carries its font, and its legend, even one too
// wide for the panel, lies inside the canvas and right of the plot.
func TestRenderSVGCanvas(t *testing.T) {
	p := plot.New()
	p.Title.Text = "title"
	long := "a legend entry far too long for the panel beside the plot, which may take two fifths of the width"
	for i, label := range []string{"short", long} {
		b := &Bars{Values: []float64{1, 2}, Width: vg.Points(10), Style: Styles(2)[i]}
		p.Add(b)
		p.Legend.Add(label, b)
	}
	w, h := 11*vg.Inch, 5*vg.Inch
	wt, err := Render(p, []string{"a note"}, w, h, "svg")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := wt.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	full := fmt.Sprintf(`<path d="M0,0L0,%gL%g,%gL%g,0Z" style="fill:#FFFFFF"`, h.Points(), w.Points(), h.Points(), w.Points())
	if !strings.Contains(svg, full) {
		t.Errorf("no white rectangle over the whole canvas (%s) in:\n%.600s", full, svg)
	}
	if !strings.Contains(svg, "@font-face") || !strings.Contains(svg, "base64,") {
		t.Error("the SVG does not embed its font")
	}
	// The legend entry's text: x, font size, and so its right end.
	re := regexp.MustCompile(`<text x="([0-9.]+)" y="[-0-9.]+" transform="scale\(1, -1\)"\s+style="[^"]*font-size:([0-9.]+)px[^"]*">` + regexp.QuoteMeta(long) + `</text>`)
	m := re.FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("legend entry not found in the SVG")
	}
	x, _ := strconv.ParseFloat(m[1], 64)
	size, _ := strconv.ParseFloat(m[2], 64)
	face := font.DefaultCache.Lookup(plot.DefaultFont, vg.Points(size))
	right := x + face.Width(long).Points()
	if right > w.Points() {
		t.Errorf("legend entry ends at %.1f pt, past the canvas (%.1f pt)", right, w.Points())
	}
	if x < (w * 3 / 5).Points() {
		t.Errorf("legend entry starts at %.1f pt, over the plot (panel from %.1f pt)", x, (w * 3 / 5).Points())
	}
}
