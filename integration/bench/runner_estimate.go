package bench

import (
	"fmt"
	"strings"
	"time"
)

// runCost is what one run of a workload takes at size small on one of
// our FUSE targets, mount, syncfs and unmount included: measured on 2
// cores (AMD EPYC, tmpfs below, 2026-12-06, little other load), so that
// the first estimate is of the right size; the estimate is then rescaled
// by the runs that finish. A workload not listed counts defaultRunCost.
var runCost = map[string]time.Duration{
	"seqwrite":      900 * time.Millisecond,
	"seqread":       500 * time.Millisecond,
	"smallwrite4k":  200 * time.Millisecond,
	"smallwrite512": 500 * time.Millisecond,
	"copytree":      900 * time.Millisecond,
	"gzip":          1700 * time.Millisecond,
	"srctree":       1400 * time.Millisecond,
	"bonnie":        1100 * time.Millisecond,
	"randrw":        3600 * time.Millisecond,
	"sqlite":        1300 * time.Millisecond,
	"lame":          300 * time.Millisecond,
	"git":           3500 * time.Millisecond,
	"build":         16 * time.Second,
}

const defaultRunCost = 5 * time.Second

// sizeCost scales runCost by the workload size.
var sizeCost = map[Size]float64{SizeTiny: 0.15, SizeSmall: 1, SizeDefault: 5, SizeLarge: 25}

// targetCost scales runCost by the kind of target: the plain directory
// is faster, the peers' daemons and the block-device path slower.
func targetCost(name string) float64 {
	switch {
	case name == "native":
		return 0.6
	case isPeer(name):
		return 1.6
	case strings.HasPrefix(name, "dmcrypt") || name == "ext4loop":
		return 1.3
	}
	return 1
}

// estimator predicts the time a bench has left: the cost model of the
// runs to come, scaled by how the runs so far compared with the model.
type estimator struct {
	startup time.Duration // setting up targets and preparing workloads
	cum     []float64     // model seconds of the first i runs of a repeat
}

func newEstimator(c Config, targets []Target) *estimator {
	e := &estimator{
		startup: time.Duration(len(targets))*time.Second + time.Duration(len(c.Workloads))*time.Second,
		cum:     []float64{0},
	}
	f := sizeCost[c.Size]
	if f == 0 {
		f = 1
	}
	for _, w := range c.Workloads {
		base, ok := runCost[w.Name()]
		if !ok {
			base = defaultRunCost
		}
		for _, t := range targets {
			e.cum = append(e.cum, e.cum[len(e.cum)-1]+base.Seconds()*f*targetCost(t.Name()))
		}
	}
	return e
}

// model is the model's seconds for the first n runs.
func (e *estimator) model(n int) float64 {
	per := len(e.cum) - 1
	if per == 0 {
		return 0
	}
	return float64(n/per)*e.cum[per] + e.cum[n%per]
}

// left is the time the runs after the first done of total should take,
// when those done took elapsed.
func (e *estimator) left(total, done int, elapsed time.Duration) time.Duration {
	rest := e.model(total) - e.model(done)
	scale := 1.0
	if m := e.model(done); done > 0 && m > 0 {
		scale = elapsed.Seconds() / m
	}
	return time.Duration(rest * scale * float64(time.Second))
}

// moreRepeats decides, before repeat r (> Config.Repeat), whether to run
// it; why says the rule and the reason, for the progress (more) or the
// report (no more).
func moreRepeats(c Config, res *Results, r int, took time.Duration) (more bool, why string) {
	a := c.Auto
	if a == nil {
		return false, ""
	}
	for i, w := range c.Workloads {
		if i < len(res.Workloads) {
			res.Workloads[i].Headline = chooseHeadline(w, res.Runs)
		}
	}
	base := "native"
	if !res.hasTarget(base) && len(res.Targets) > 0 {
		base = res.Targets[0].Name
	}
	rule := fmt.Sprintf("repeats added until the 95 %% interval of every headline ratio to %s is no wider than ×%.2f (hi/lo)", base, a.Spread)
	wide := res.wide(base, a.Spread)
	list := strings.Join(wide, ", ")
	if len(wide) > 4 {
		list = strings.Join(wide[:4], ", ") + fmt.Sprintf(" and %d more", len(wide)-4)
	}
	done := r - 1
	switch {
	case len(wide) == 0:
		return false, fmt.Sprintf("%s: reached after %d repeats", rule, done)
	case a.Max > 0 && r > a.Max:
		return false, fmt.Sprintf("%s: stopped at the limit of %d repeats, still wider: %s", rule, a.Max, list)
	case a.Budget > 0 && time.Since(res.Started)+took/time.Duration(done) > a.Budget:
		return false, fmt.Sprintf("%s: stopped after %d repeats, another would pass the budget of %s; still wider: %s",
			rule, done, roundDur(a.Budget), list)
	}
	return true, "still wider than ×" + fmt.Sprintf("%.2f", a.Spread) + ": " + list
}
