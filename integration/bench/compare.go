package bench

import (
	"fmt"
	"io"
	"math"
)

// Change is one metric of one workload on one target in two bench runs.
type Change struct {
	Target   string  `json:"target"`
	Workload string  `json:"workload"`
	Metric   metric  `json:"metric"`
	Old      Summary `json:"old"`
	New      Summary `json:"new"`
	// Ratio is new/old of the medians (of the values as they are: for a
	// rate above 1 is better, for a time worse).
	Ratio float64 `json:"ratio"`
	// Flagged: the change is beyond the spread of the repeats — the two
	// min–max ranges do not overlap — and at least minChange.
	Flagged bool `json:"flagged"`
	// Worse is the direction of a flagged change.
	Worse bool `json:"worse"`
}

// minChange is the smallest relative change that is flagged: with one
// repeat, ranges are points and would flag every last digit.
const minChange = 0.03

// Compare pairs every target × workload × metric present in both runs.
func Compare(old, cur *Results) []Change {
	var out []Change
	for _, w := range cur.Workloads {
		var ow *WorkloadInfo
		for i := range old.Workloads {
			if old.Workloads[i].Name == w.Name {
				ow = &old.Workloads[i]
			}
		}
		if ow == nil {
			continue
		}
		for _, m := range cur.rows(w) {
			for _, tn := range cur.targetNames() {
				if !old.hasTarget(tn) {
					continue
				}
				c := Change{Target: tn, Workload: w.Name, Metric: m,
					Old: summarize(old.runsOf(tn, w.Name), m), New: summarize(cur.runsOf(tn, w.Name), m)}
				if c.Old.N == 0 && c.New.N == 0 {
					continue
				}
				if c.Old.N > 0 && c.New.N > 0 && c.Old.Median != 0 {
					c.Ratio = c.New.Median / c.Old.Median
					apart := c.New.Min > c.Old.Max || c.New.Max < c.Old.Min
					c.Flagged = apart && math.Abs(c.Ratio-1) >= minChange
					c.Worse = (c.Ratio > 1) != m.HigherBetter
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// WriteCompare prints the changes as a table, flagged ones marked, then
// the targets and workloads present in only one of the runs.
func WriteCompare(w io.Writer, old, cur *Results, changes []Change) {
	fmt.Fprintf(w, "old: %s, size %s, %d repeat(s), %s\n", old.Started.Format("2006-01-02 15:04"), old.Size, old.Repeat, old.Machine.CPU)
	fmt.Fprintf(w, "new: %s, size %s, %d repeat(s), %s\n", cur.Started.Format("2006-01-02 15:04"), cur.Size, cur.Repeat, cur.Machine.CPU)
	if old.Size != cur.Size {
		fmt.Fprintln(w, "warning: the sizes differ; only ratios between targets are comparable")
	}
	fmt.Fprintln(w)
	t := table{
		title:  "Changes, new/old of the medians (flagged: the min–max ranges do not overlap and the change is at least 3%)",
		fixed:  3,
		header: []string{"workload", "target", "unit", "old", "new", "new/old", ""},
	}
	flagged := 0
	for _, c := range changes {
		label := c.Workload
		if m, _ := metricFor(orDefault(headlineOf(cur, c.Workload), "wall_s")); m.Key != c.Metric.Key {
			label += " " + c.Metric.Label
		}
		ratio, flag := "-", ""
		if c.Ratio != 0 {
			ratio = fmt.Sprintf("%.2fx", c.Ratio)
		}
		if c.Flagged {
			flagged++
			flag = "BETTER"
			if c.Worse {
				flag = "WORSE"
			}
		}
		t.rows = append(t.rows, []string{label, c.Target, c.Metric.Unit, c.Old.cell(), c.New.cell(), ratio, flag})
	}
	t.notes = []string{fmt.Sprintf("%d of %d flagged.", flagged, len(changes))}
	t.text(w, 0)
	for _, tn := range cur.targetNames() {
		if !old.hasTarget(tn) {
			fmt.Fprintf(w, "only in new: target %s\n", tn)
		}
	}
	for _, tn := range old.targetNames() {
		if !cur.hasTarget(tn) {
			fmt.Fprintf(w, "only in old: target %s\n", tn)
		}
	}
}

func headlineOf(res *Results, workload string) string {
	for _, w := range res.Workloads {
		if w.Name == workload {
			return w.Headline
		}
	}
	return ""
}
