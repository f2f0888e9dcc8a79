package bench

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/twincrypt/twincrypt/measure/chartkit"
)

// TestChartTargetStyles: every target the harness knows, drawn on one
// chart, gets a colour of its own (the old palette gave twin and cryfs
// the same red, crypt-xts and securefs the same green), and a target
// keeps its style on both charts.
func TestChartTargetStyles(t *testing.T) {
	res := &Results{}
	for _, tg := range AllTargets(TargetOptions{}) {
		res.Targets = append(res.Targets, TargetInfo{Name: tg.Name()})
	}
	if len(res.Targets) < 10 {
		t.Fatalf("only %d targets known", len(res.Targets))
	}
	styles := targetStyles(res)
	if _, ok := styles["native"]; ok {
		t.Error("native, the baseline, has a series style")
	}
	owner := map[any]string{}
	for _, ti := range res.Targets {
		if ti.Name == "native" {
			continue
		}
		s, ok := styles[ti.Name]
		if !ok {
			t.Errorf("%s has no style", ti.Name)
			continue
		}
		if o, dup := owner[s.Color]; dup {
			t.Errorf("%s and %s share colour %v", o, ti.Name, s.Color)
		}
		owner[s.Color] = ti.Name
	}
}

// TestChartsReadable renders the sample results and decodes the PNGs:
// each target's colour is on the overhead chart (a bar or at least its
// legend entry), each target with per-op statistics is on the latency
// chart, and the overhead chart has a log axis standing on 1x with
// labelled ticks between the decades.
func TestChartsReadable(t *testing.T) {
	res := sampleResults()
	dir := t.TempDir()
	if _, err := WriteCharts(dir, res); err != nil {
		t.Fatal(err)
	}
	styles := targetStyles(res)
	decode := func(name string) func(string) int {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return func(target string) int { return chartkit.Pixels(img, styles[target].Color) }
	}
	over := decode(OverheadPNG)
	for _, tn := range []string{"twin", "crypt-xts", "dmcrypt-userspace"} {
		if n := over(tn); n < 100 {
			t.Errorf("overhead.png: %d pixels of %s's colour", n, tn)
		}
	}
	lat := decode(LatencyPNG)
	for _, tn := range res.statsTargets() {
		if n := lat(tn); n < 100 {
			t.Errorf("latency.png: %d pixels of %s's colour", n, tn)
		}
	}

	ch, err := overheadPlot(res)
	if err != nil || ch == nil {
		t.Fatalf("overheadPlot: %v", err)
	}
	// On a log axis 1..2 is as tall as 2..4; on a linear one, half.
	// (The axis spans whole decades from at most 1 to at least 10.)
	y := ch.p.Y
	a := y.Scale.Normalize(y.Min, y.Max, 2) - y.Scale.Normalize(y.Min, y.Max, 1)
	b := y.Scale.Normalize(y.Min, y.Max, 4) - y.Scale.Normalize(y.Min, y.Max, 2)
	if math.Abs(a-b) > 1e-9 {
		t.Errorf("overhead axis is not logarithmic: 1..2 is %.3f, 2..4 is %.3f", a, b)
	}
	if ch.p.Y.Min > 1 || ch.p.Y.Max < 1 {
		t.Errorf("overhead axis %v..%v does not show 1x", ch.p.Y.Min, ch.p.Y.Max)
	}
	labelled := 0
	for _, tk := range ch.p.Y.Tick.Marker.Ticks(ch.p.Y.Min, ch.p.Y.Max) {
		if tk.Label != "" {
			labelled++
		}
	}
	if labelled < 4 {
		t.Errorf("overhead axis has %d labelled ticks", labelled)
	}

	lp, err := latencyPlot(res)
	if err != nil || lp == nil {
		t.Fatalf("latencyPlot: %v", err)
	}
	for _, pl := range []string{"data:", "metadata:", "namespace:"} {
		found := false
		for _, n := range lp.notes {
			if len(n) >= len(pl) && n[:len(pl)] == pl {
				found = true
			}
		}
		if !found {
			t.Errorf("latency chart does not define the op class %q: %q", pl, lp.notes)
		}
	}
}
