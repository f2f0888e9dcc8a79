package chartkit

import (
	"bytes"
	"image/png"
	"math"
	"reflect"
	"testing"

	"gonum.org/v1/plot"
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
