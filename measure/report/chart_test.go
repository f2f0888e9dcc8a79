package report

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/chartkit"
)

// TestTimeChartTicks: the over-time chart labels its time axis with at
// least three distinct labels on short logs (1.6 s and 0.1 s) as on a
// long one; clock-time labels to the second repeated one label on a log
// of a second or two.
func TestTimeChartTicks(t *testing.T) {
	short := mirrorLog()[:100] // 0.1 s
	var long []measure.LogLine
	for i := range 200 {
		long = append(long, measure.LogLine{TS: t0.Add(time.Duration(i) * 30 * time.Second), Mount: "m", Op: "read", Ns: 50 * us})
	}
	for name, lines := range map[string][]measure.LogLine{"1.6 s": mirrorLog(), "0.1 s": short, "100 min": long} {
		r := aggregate(t, Options{}, encodeLog(t, lines))
		p, _, err := timePlot(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seen := map[string]bool{}
		var labels []string
		for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
			if tk.Label == "" {
				continue
			}
			if seen[tk.Label] {
				t.Errorf("%s: time tick label %q repeats: %q", name, tk.Label, labels)
			}
			seen[tk.Label] = true
			labels = append(labels, tk.Label)
		}
		if len(labels) < 3 {
			t.Errorf("%s: only %d time tick labels: %q", name, len(labels), labels)
		}
		if !strings.Contains(p.X.Label.Text, "since the first op") {
			t.Errorf("%s: axis label %q", name, p.X.Label.Text)
		}
	}
}

// TestCDFChartColours: each op class has a colour of its own, every
// class line is on the PNG in its colour, and the chart's notes define
// the classes.
func TestCDFChartColours(t *testing.T) {
	seen := map[any]Class{}
	for _, c := range Classes {
		if o, dup := seen[classColor(c)]; dup {
			t.Errorf("classes %s and %s share a colour", o, c)
		}
		seen[classColor(c)] = c
	}
	r := aggregate(t, Options{}, encodeLog(t, mirrorLog()))
	path := tempPath(t, "cdf.png")
	if err := WriteCDFChart(r, path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []Class{ClassData, ClassMetadata, ClassNamespace} {
		if n := chartkit.Pixels(img, classColor(c)); n < 100 {
			t.Errorf("%s: %d pixels of its colour", c, n)
		}
	}
	_, notes, err := cdfPlot(r)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(notes, " ")
	for _, want := range []string{"data: move", "metadata: read", "namespace: create", "dashed: the plaintext twin"} {
		if !strings.Contains(text, want) {
			t.Errorf("CDF notes lack %q: %q", want, notes)
		}
	}
}

// TestClassDefinitions: every op with a class is named in its class's
// definition, and in no other.
func TestClassDefinitions(t *testing.T) {
	defs := ClassDefinitions()
	for op, c := range opClasses {
		for i, k := range Classes {
			named := strings.Contains(defs[i]+",", " "+op+",") || strings.Contains(defs[i], " "+op+".")
			if named != (k == c) {
				t.Errorf("op %s (class %s) named=%v in the definition of %s: %q", op, c, named, k, defs[i])
			}
		}
	}
}

// TestTimeChartBreaksAtGaps: a stretch without ops, whose buckets the
// timeline leaves out, splits each series into two lines in the SVG
// rather than bridging it.
func TestTimeChartBreaksAtGaps(t *testing.T) {
	burst := func(from time.Time) []measure.LogLine {
		var out []measure.LogLine
		for i := range 100 {
			out = append(out, measure.LogLine{TS: from.Add(time.Duration(i) * 100 * time.Millisecond), Mount: "m", Op: "read", Ns: 50 * us})
		}
		return out
	}
	// strokes counts the paths stroked in the p50 series' colour: its
	// line segments and its legend thumbnail.
	strokes := func(lines []measure.LogLine) int {
		r := aggregate(t, Options{}, encodeLog(t, lines))
		path := filepath.Join(t.TempDir(), "time.svg")
		if err := WriteTimeChart(r, path); err != nil {
			t.Fatal(err)
		}
		svg, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Count(string(svg), "stroke:#1F77B4")
	}
	// Two bursts of 10 s back to back, then two with a minute between.
	joined := strokes(append(burst(t0), burst(t0.Add(10*time.Second))...))
	gapped := strokes(append(burst(t0), burst(t0.Add(70*time.Second))...))
	if gapped != joined+1 {
		t.Errorf("p50 strokes: %d with a gap, %d without; want one line more with the gap", gapped, joined)
	}
}
