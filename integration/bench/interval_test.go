package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestPairedRatio: known inputs give the known t-interval on the log
// ratios, computed by hand: logs 0.1, 0.2, 0.3 have mean 0.2 and sd 0.1,
// t(0.975, 2) = 4.302653, so the half width is 0.248414.
func TestPairedRatio(t *testing.T) {
	e := math.Exp
	r, ok := pairedRatio([][2]float64{{e(0.1), 1}, {2 * e(0.2), 2}, {0.5 * e(0.3), 0.5}})
	if !ok || r.N != 3 {
		t.Fatalf("ratio %+v %v", r, ok)
	}
	half := 4.302652729911275 * 0.1 / math.Sqrt(3)
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"point", r.Point, e(0.2)},
		{"lo", r.Lo, e(0.2 - half)},
		{"hi", r.Hi, e(0.2 + half)},
	} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s = %.6f, want %.6f", c.name, c.got, c.want)
		}
	}
	if !r.Level() {
		t.Errorf("interval [%.3f, %.3f] contains 1 but is not level", r.Lo, r.Hi)
	}

	// Every repeat 2x slower: no spread, a winner.
	r, _ = pairedRatio([][2]float64{{2, 1}, {4, 2}, {6, 3}})
	if !near(r.Point, 2) || !near(r.Lo, 2) || !near(r.Hi, 2) || r.Level() {
		t.Errorf("constant 2x: %+v level %v", r, r.Level())
	}
	// Pairing matters: the base's drift is the target's too. Unpaired,
	// the ranges 1-3 and 1.1-3.3 would overlap; paired, every repeat is
	// 1.1x slower.
	r, _ = pairedRatio([][2]float64{{1.1, 1}, {2.2, 2}, {3.3, 3}})
	if !near(r.Point, 1.1) || r.Level() {
		t.Errorf("paired 1.1x: %+v, level %v", r, r.Level())
	}
	// Two repeats: t(0.975, 1) = 12.706; logs ln 1.2 and ln 0.9.
	r, _ = pairedRatio([][2]float64{{1.2, 1}, {0.9, 1}})
	l1, l2 := math.Log(1.2), math.Log(0.9)
	m, sd := (l1+l2)/2, math.Abs(l1-l2)/math.Sqrt2
	if want := e(m + 12.706204736174707*sd/math.Sqrt2); math.Abs(r.Hi-want) > 1e-6 || !r.Level() {
		t.Errorf("two repeats: hi %.6f, want %.6f (level %v)", r.Hi, want, r.Level())
	}
	// One repeat: a figure, no interval, never level.
	r, _ = pairedRatio([][2]float64{{3, 2}})
	if r.HasInterval() || r.Level() || !near(r.Point, 1.5) || r.cell() != "1.50x" {
		t.Errorf("one repeat: %+v %q", r, r.cell())
	}
	// Unusable pairs are ignored; none left: no ratio.
	if _, ok := pairedRatio([][2]float64{{0, 1}, {1, math.Inf(1)}}); ok {
		t.Error("ratio from zero and infinite costs")
	}
}

// TestRatioCells: a decided ratio prints its figure and interval, a
// level one says "level" instead of a figure, in either direction.
func TestRatioCells(t *testing.T) {
	for _, c := range []struct {
		r    Ratio
		want string
	}{
		{Ratio{Point: 1.25, Lo: 1.10, Hi: 1.42, N: 3}, "1.25x [1.10–1.42]"},
		{Ratio{Point: 0.80, Lo: 0.70, Hi: 0.92, N: 3}, "0.80x [0.70–0.92]"},
		{Ratio{Point: 1.02, Lo: 0.95, Hi: 1.10, N: 3}, "level [0.95–1.10]"},
		{Ratio{Point: 0.9, Lo: 0.5, Hi: 1.0, N: 5}, "level [0.50–1.00]"},
		{Ratio{Point: 25, Lo: 12, Hi: 52.4, N: 3}, "25.0x [12.0–52.4]"},
		{Ratio{Point: 1525.3, Lo: 1164, Hi: 1998, N: 5}, "1525x [1164–1998]"},
		{Ratio{Point: 0.84, Lo: 0.71, Hi: 0.998, N: 5}, "0.84x [0.710–0.998]"},
		{Ratio{Point: 0.84, Lo: 0.71, Hi: 1.001, N: 5}, "level [0.71–1.00]"},
	} {
		if got := c.r.cell(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// TestPeerTableLevel: our mount against the best peer is "level" when
// the repeats do not tell them apart, and a figure when every repeat
// agrees; pairs are made by repeat number, whatever the run order.
func TestPeerTableLevel(t *testing.T) {
	run := func(target string, rep int, wall float64) Run {
		return Run{Target: target, Workload: "srctree", Repeat: rep, WallS: wall, Verified: true}
	}
	res := &Results{
		Repeat:    3,
		Targets:   []TargetInfo{{Name: "native"}, {Name: "crypt-xts"}, {Name: "twin"}, {Name: "gocryptfs"}},
		Workloads: []WorkloadInfo{{Name: "srctree", Headline: "wall_s"}},
		Runs: []Run{
			run("gocryptfs", 1, 10), run("gocryptfs", 2, 20), run("gocryptfs", 3, 15),
			// crypt-xts: 0.9x, 1.2x, 1.0x of the peer: noise.
			run("crypt-xts", 3, 15), run("crypt-xts", 1, 9), run("crypt-xts", 2, 24),
			// twin: half the peer's time in every repeat.
			run("twin", 1, 5), run("twin", 2, 10), run("twin", 3, 7.5),
			run("native", 1, 1), run("native", 2, 1), run("native", 3, 1),
		},
	}
	tab, ok := res.peerTable()
	if !ok {
		t.Fatal("no peer table")
	}
	row := tab.rows[0]
	if row[1] != "gocryptfs" || !strings.HasPrefix(row[2], "level [") || row[3] != "0.50x [0.50–0.50]" {
		t.Errorf("peer row %q, want gocryptfs, level for crypt-xts, 0.50x for twin", row)
	}
	if !strings.Contains(strings.Join(tab.notes, " "), "Student's t") {
		t.Errorf("peer table does not state the method: %q", tab.notes)
	}
}

// TestAutoRepeatRule: more repeats while a headline interval is wide,
// none once all are narrow, none past Max.
func TestAutoRepeatRule(t *testing.T) {
	mk := func(walls ...float64) *Results {
		res := &Results{
			Started:   time.Now(),
			Targets:   []TargetInfo{{Name: "native"}, {Name: "twin"}},
			Workloads: []WorkloadInfo{{Name: "gzip"}},
		}
		for i, w := range walls {
			res.Runs = append(res.Runs,
				Run{Target: "native", Workload: "gzip", Repeat: i + 1, WallS: 1, Verified: true},
				Run{Target: "twin", Workload: "gzip", Repeat: i + 1, WallS: w, Verified: true})
		}
		return res
	}
	c := Config{Workloads: []Workload{&Gzip{}}, Repeat: 3, Auto: &AutoRepeat{Spread: 1.2, Max: 5}}
	if more, why := moreRepeats(c, mk(1.5, 2.5, 1.1), 4, time.Minute); !more || !strings.Contains(why, "gzip/twin") {
		t.Errorf("wide interval: more %v (%s)", more, why)
	}
	if more, why := moreRepeats(c, mk(2, 2.02, 1.99), 4, time.Minute); more || !strings.Contains(why, "reached after 3 repeats") {
		t.Errorf("narrow interval: more %v (%s)", more, why)
	}
	if more, why := moreRepeats(c, mk(1.5, 2.5, 1.1, 2, 1.2), 6, time.Minute); more || !strings.Contains(why, "limit of 5") {
		t.Errorf("past max: more %v (%s)", more, why)
	}
	c.Auto = &AutoRepeat{Spread: 1.2, Budget: time.Minute}
	if more, why := moreRepeats(c, mk(1.5, 2.5, 1.1), 4, 3*time.Minute); more || !strings.Contains(why, "budget") {
		t.Errorf("budget spent: more %v (%s)", more, why)
	}
	if more, _ := moreRepeats(Config{Repeat: 3}, mk(1.5, 2.5, 1.1), 4, time.Minute); more {
		t.Error("more repeats without Auto")
	}
}

// TestEstimator: the first estimate is the model; later ones scale the
// model of the runs left by how the finished runs compared with it.
func TestEstimator(t *testing.T) {
	var ev events
	fakes := newFakes(&ev, "native", "twin")
	c := Config{Workloads: []Workload{&Gzip{}, &SrcTree{}}, Size: SizeSmall}
	var targets []Target
	for _, f := range fakes {
		targets = append(targets, f)
	}
	e := newEstimator(c, targets)
	near := func(got time.Duration, want float64) bool { return math.Abs(got.Seconds()-want) < 1e-6 }
	// One repeat: gzip on native (×0.6) and the twin (×1), then srctree.
	perRepeat := runCost["gzip"].Seconds()*1.6 + runCost["srctree"].Seconds()*1.6
	if got := e.left(8, 0, 0); !near(got, 2*perRepeat) {
		t.Errorf("two repeats from the model: %v, want %.3fs", got, 2*perRepeat)
	}
	// The first two runs (gzip) took twice the model: so will the rest.
	gzip := runCost["gzip"].Seconds() * 1.6
	took := time.Duration(2 * gzip * float64(time.Second))
	if got := e.left(8, 2, took); !near(got, 2*(2*perRepeat-gzip)) {
		t.Errorf("left after 2 runs: %v, want %.3fs", got, 2*(2*perRepeat-gzip))
	}
}

// TestRunnerAutoRepeat: with Auto, the runner stops at Config.Repeat when
// the intervals are narrow already, and otherwise adds repeats up to
// Auto.Max, saying why in RepeatRule and in the progress.
func TestRunnerAutoRepeat(t *testing.T) {
	for _, c := range []struct {
		name    string
		walls   map[string]float64
		repeats int
		rule    string
	}{
		// Every repeat adds a second to both: 1/1, 2/2, ... ratio 1.
		{"narrow", map[string]float64{"native": 1, "twin": 1}, 3, "reached after 3 repeats"},
		// 2/1, 3/2, 4/3, ...: the ratio drifts, the interval stays wide.
		{"wide", map[string]float64{"native": 1, "twin": 2}, 5, "limit of 5 repeats"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ev := &events{}
			fakes := newFakes(ev, "native", "twin")
			w := &fakeWorkload{name: "w", ev: ev, walls: c.walls}
			cfg := testConfig(t, targetsOf(fakes), w)
			cfg.Repeat = 3
			cfg.Auto = &AutoRepeat{Spread: 1.2, Max: 5}
			rec := &recProgress{}
			cfg.Progress = rec
			res, err := RunBench(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Repeat != c.repeats || len(res.Runs) != 2*c.repeats {
				t.Errorf("%d repeats, %d runs; want %d repeats", res.Repeat, len(res.Runs), c.repeats)
			}
			if !strings.Contains(res.RepeatRule, c.rule) || !strings.Contains(res.RepeatRule, "no wider than ×1.20") {
				t.Errorf("rule %q, want it to say %q", res.RepeatRule, c.rule)
			}
			added := 0
			for _, s := range rec.steps {
				if strings.HasPrefix(s, "repeat ") && strings.Contains(s, " added: still wider") {
					added++
				}
			}
			if added != c.repeats-3 {
				t.Errorf("%d repeats reported as added, want %d: %q", added, c.repeats-3, rec.steps)
			}
		})
	}
}

// TestTermProgressEstimate: the first estimate is a line; without a live
// line a refreshed one is printed only when the ETA moved by more than a
// fifth of the time left and a minute.
func TestTermProgressEstimate(t *testing.T) {
	var b syncBuffer
	p := NewProgress(&b, false)
	p.Estimate(10*time.Minute, "from the workloads' cost model")
	p.Estimate(10*time.Minute-20*time.Second, "")
	p.Estimate(25*time.Minute, "")
	out := b.String()
	if n := strings.Count(out, "estimated time"); n != 2 {
		t.Errorf("%d estimate lines, want 2 (the first, and the one 15 minutes later):\n%s", n, out)
	}
	if !strings.Contains(out, "estimated time: about 10m00s, ETA ") || !strings.Contains(out, "about 25m00s, ETA ") {
		t.Errorf("estimate lines:\n%s", out)
	}
}
