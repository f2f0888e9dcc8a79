package bench

import (
	"fmt"
	"math"
	"sort"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// IntervalMethod says in one sentence how a ratio and its interval are
// computed; the report and the summary print it under the ratio tables.
const IntervalMethod = "Ratios are paired by repeat (target and base of the same repeat ran back to back): " +
	"the figure is the geometric mean of the per-repeat ratios, the interval in brackets its 95 % confidence " +
	"interval (Student's t on the logarithms of the per-repeat ratios, n-1 degrees of freedom); " +
	"\"level\": the interval contains 1x, the difference is within the noise of the repeats."

// intervalLevel is the confidence of the intervals.
const intervalLevel = 0.95

// Ratio is the cost of a target relative to a base with its confidence
// interval from the repeats.
type Ratio struct {
	Point float64 `json:"point"`
	// Lo and Hi bound the interval; equal to Point when N < 2.
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
	// N is the number of repeats in which both ran.
	N int `json:"n"`
}

// HasInterval reports whether there were repeats enough for an interval.
func (r Ratio) HasInterval() bool { return r.N >= 2 }

// Level reports whether the difference is inside the interval: 1x (as
// costly as the base) is a value the repeats cannot rule out, so neither
// side wins.
func (r Ratio) Level() bool { return r.HasInterval() && r.Lo <= 1 && r.Hi >= 1 }

// Spread is Hi/Lo, the width of the interval as a factor (1 = none).
func (r Ratio) Spread() float64 {
	if !r.HasInterval() || r.Lo <= 0 {
		return math.Inf(1)
	}
	return r.Hi / r.Lo
}

// pairedRatio is the ratio of costs target/base over the repeats, given
// as pairs {target cost, base cost} of the same repeat. Ratios of costs
// multiply, so the interval is computed on their logarithms (where a
// 2x-slower and a 2x-faster repeat cancel out) and mapped back: a
// t-interval, because with 3 to 10 repeats a bootstrap or percentile
// interval is too narrow (the range of 3 values covers the median only
// 75 % of the time). Pairs with a non-positive or infinite cost are
// ignored; false when none is left.
func pairedRatio(pairs [][2]float64) (Ratio, bool) {
	var logs []float64
	for _, p := range pairs {
		t, b := p[0], p[1]
		if !(t > 0) || !(b > 0) || math.IsInf(t, 0) || math.IsInf(b, 0) {
			continue
		}
		logs = append(logs, math.Log(t/b))
	}
	n := len(logs)
	if n == 0 {
		return Ratio{}, false
	}
	mean := 0.0
	for _, l := range logs {
		mean += l
	}
	mean /= float64(n)
	r := Ratio{Point: math.Exp(mean), N: n}
	r.Lo, r.Hi = r.Point, r.Point
	if n < 2 {
		return r, true
	}
	ss := 0.0
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	half := tQuantile(n-1) * sd / math.Sqrt(float64(n))
	r.Lo, r.Hi = math.Exp(mean-half), math.Exp(mean+half)
	return r, true
}

// tQuantile is the two-sided intervalLevel quantile of Student's t with
// df degrees of freedom (12.7 for 1, 4.30 for 2, 1.96 as df grows).
func tQuantile(df int) float64 {
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(1 - (1-intervalLevel)/2)
}

// pairs collects, repeat by repeat, the costs on metric m of target and
// base for workload w: only repeats in which both completed.
func (res *Results) pairs(target, base, workload string, m metric) [][2]float64 {
	costs := func(tn string) map[int]float64 {
		out := map[int]float64{}
		for _, r := range res.runsOf(tn, workload) {
			if !r.OK() {
				continue
			}
			if v, ok := m.value(r); ok {
				out[r.Repeat] = m.cost(v)
			}
		}
		return out
	}
	ct, cb := costs(target), costs(base)
	var reps []int
	for rep := range ct {
		if _, ok := cb[rep]; ok {
			reps = append(reps, rep)
		}
	}
	sort.Ints(reps)
	out := make([][2]float64, 0, len(reps))
	for _, rep := range reps {
		out = append(out, [2]float64{ct[rep], cb[rep]})
	}
	return out
}

// ratio is the paired ratio cost(target)/cost(base) on metric m of
// workload w (>1: target is slower), with its interval; false when no
// repeat has both.
func (res *Results) ratio(target, base string, w WorkloadInfo, m metric) (Ratio, bool) {
	return pairedRatio(res.pairs(target, base, w.Name, m))
}

// cell renders a ratio for a table: "1.25x [1.10–1.42]", "level
// [0.95–1.10]" when the interval contains 1x, "1.25x" without interval.
func (r Ratio) cell() string {
	if !r.HasInterval() {
		return fmtRatio(r.Point) + "x"
	}
	lo, hi := fmtRatio(r.Lo), fmtRatio(r.Hi)
	if !r.Level() && (lo == "1.00" || hi == "1.00") {
		// A bound just off 1x: say on which side, not "1.00" beside a
		// winner.
		lo, hi = fmt.Sprintf("%.3f", r.Lo), fmt.Sprintf("%.3f", r.Hi)
	}
	span := "[" + lo + "–" + hi + "]"
	if r.Level() {
		return "level " + span
	}
	return fmtRatio(r.Point) + "x " + span
}

// fmtRatio prints a ratio with two decimals, or three significant digits
// (at least the integer part) from 10x on.
func fmtRatio(v float64) string {
	if v >= 10 {
		return fmtNum(v)
	}
	return fmt.Sprintf("%.2f", v)
}

// AutoRepeat is when the runner adds repeats beyond Config.Repeat.
type AutoRepeat struct {
	// Spread: stop once the interval of every headline ratio to the base
	// (native) is no wider than this factor, Hi/Lo (1.20: about ±10 %
	// around the figure).
	Spread float64
	// Max repeats in all (0: no limit but the budget).
	Max int
	// Budget bounds the whole bench: no repeat is started that would, at
	// the average repeat so far, end past it (0: none).
	Budget time.Duration
}

// DefaultAutoSpread is AutoRepeat.Spread for --repeat auto.
const DefaultAutoSpread = 1.20

// wide lists the headline ratios to base whose interval is wider than
// spread (or that have none yet), as "workload/target ×spread"; nil when
// all are narrow enough, or without base.
func (res *Results) wide(base string, spread float64) []string {
	if !res.hasTarget(base) {
		return nil
	}
	var out []string
	for _, w := range res.Workloads {
		m, _ := metricFor(orDefault(w.Headline, "wall_s"))
		for _, tn := range res.targetNames() {
			if tn == base {
				continue
			}
			r, ok := res.ratio(tn, base, w, m)
			if !ok {
				continue
			}
			if s := r.Spread(); s > spread {
				out = append(out, fmt.Sprintf("%s/%s ×%.2f", w.Name, tn, s))
			}
		}
	}
	return out
}
