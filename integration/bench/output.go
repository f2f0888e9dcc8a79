package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// metric is one number per run that the tables show: the wall time, a
// rate derived from the Result, or one of the workload's Metrics.
type metric struct {
	Key          string `json:"key"`
	Label        string `json:"label"`
	Unit         string `json:"unit"`
	HigherBetter bool   `json:"higher_better"`
}

// The suffixes of Metrics keys that the tables understand; other metrics
// are kept in results.json and results.csv only.
var metricSuffixes = []struct {
	suffix, unit string
	higher       bool
}{
	{"_MiBps", "MiB/s", true},
	{"_iops", "IOPS", true},
	{"_per_s", "/s", true},
	{"_us", "µs", false},
	{"_s", "s", false},
}

// metricFor describes the metric key; ok is false for keys the tables do
// not show.
func metricFor(key string) (metric, bool) {
	switch key {
	case "wall_s":
		return metric{Key: key, Label: "time", Unit: "s"}, true
	case "MiBps":
		return metric{Key: key, Label: "throughput", Unit: "MiB/s", HigherBetter: true}, true
	case "iops":
		return metric{Key: key, Label: "IOPS", Unit: "IOPS", HigherBetter: true}, true
	}
	for _, s := range metricSuffixes {
		if name, ok := strings.CutSuffix(key, s.suffix); ok && name != "" {
			return metric{Key: key, Label: name, Unit: s.unit, HigherBetter: s.higher}, true
		}
	}
	return metric{}, false
}

// value is m's value in run r (false: the run has none).
func (m metric) value(r Run) (float64, bool) {
	if v, ok := r.Metrics[m.Key]; ok {
		return v, true
	}
	switch m.Key {
	case "wall_s":
		return r.WallS, r.WallS > 0
	case "MiBps":
		if r.WallS > 0 && r.Bytes > 0 {
			return float64(r.Bytes) / (1 << 20) / r.WallS, true
		}
	case "iops":
		if r.WallS > 0 && r.Ops > 0 {
			return float64(r.Ops) / r.WallS, true
		}
	}
	return 0, false
}

// cost turns a value into "bigger is worse", for ratios: a time as it is,
// a rate inverted.
func (m metric) cost(v float64) float64 {
	if m.HigherBetter {
		if v == 0 {
			return math.Inf(1)
		}
		return 1 / v
	}
	return v
}

// Summary is a metric over the repeats of one workload on one target.
type Summary struct {
	N          int     `json:"n"` // completed runs that have the metric
	Failed     int     `json:"failed,omitempty"`
	Skipped    int     `json:"skipped,omitempty"`
	Unverified int     `json:"unverified,omitempty"` // completed, not verified
	Median     float64 `json:"median"`
	Min        float64 `json:"min"`
	Max        float64 `json:"max"`
}

func summarize(runs []Run, m metric) Summary {
	var s Summary
	var vals []float64
	for _, r := range runs {
		switch {
		case r.Skipped:
			s.Skipped++
		case !r.OK():
			s.Failed++
		default:
			if !r.Verified {
				s.Unverified++
			}
			if v, ok := m.value(r); ok {
				vals = append(vals, v)
			}
		}
	}
	s.N = len(vals)
	if s.N > 0 {
		s.Median, s.Min, s.Max = median(vals), slices.Min(vals), slices.Max(vals)
	}
	return s
}

// median of vals (which it sorts); 0 for none.
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	sort.Float64s(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}

// runsOf returns the runs of workload on target.
func (res *Results) runsOf(target, workload string) []Run {
	var out []Run
	for _, r := range res.Runs {
		if r.Target == target && r.Workload == workload {
			out = append(out, r)
		}
	}
	return out
}

// targetNames lists the targets that took part, in run order.
func (res *Results) targetNames() []string {
	var out []string
	for _, t := range res.Targets {
		out = append(out, t.Name)
	}
	return out
}

func (res *Results) hasTarget(name string) bool {
	return slices.Contains(res.targetNames(), name)
}

// metricOrder ranks sub-metric names so that phases read in the order
// they run; unknown names follow alphabetically.
var metricOrder = []string{"untar", "lsR", "md5", "rm", "write", "rewrite", "read", "create", "stat", "delete"}

func metricRank(label string) int {
	for i, p := range metricOrder {
		if label == p || strings.HasPrefix(label, p+"_") {
			return i
		}
	}
	return len(metricOrder)
}

// rows returns the metrics shown for w: its headline, then every metric
// the tables understand that its runs report, in metricOrder.
func (res *Results) rows(w WorkloadInfo) []metric {
	head := w.Headline
	if head == "" {
		head = "wall_s"
	}
	h, _ := metricFor(head)
	out := []metric{h}
	seen := map[string]bool{head: true}
	var subs []metric
	for _, r := range res.Runs {
		if r.Workload != w.Name {
			continue
		}
		for k := range r.Metrics {
			if seen[k] {
				continue
			}
			seen[k] = true
			if m, ok := metricFor(k); ok && k != "wall_s" && k != "MiBps" && k != "iops" {
				subs = append(subs, m)
			}
		}
	}
	sort.Slice(subs, func(i, j int) bool {
		ri, rj := metricRank(subs[i].Label), metricRank(subs[j].Label)
		if ri != rj {
			return ri < rj
		}
		return subs[i].Key < subs[j].Key
	})
	return append(out, subs...)
}

// fmtNum prints a measurement with three significant digits (at least
// the integer part): 1234, 213, 71.1, 1.20, 0.600, 0.0123.
func fmtNum(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "-"
	}
	decimals := min(max(0, 2-int(math.Floor(math.Log10(a)))), 6)
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// cell renders a summary: "median (min–max)", "FAIL", "skip" or "-", with
// "!" when some repeats failed and "?" when some were not verified.
func (s Summary) cell() string {
	switch {
	case s.N == 0 && s.Failed > 0:
		return "FAIL"
	case s.N == 0 && s.Skipped > 0:
		return "skip"
	case s.N == 0:
		return "-"
	}
	c := fmtNum(s.Median)
	if s.N > 1 && s.Min != s.Max {
		c += " (" + fmtNum(s.Min) + "–" + fmtNum(s.Max) + ")"
	}
	if s.Failed > 0 {
		c += " !"
	}
	if s.Unverified > 0 {
		c += " ?"
	}
	return c
}

// table is the one model behind the terminal and the Markdown tables.
type table struct {
	title  string
	fixed  int // leading label columns, repeated in every panel
	header []string
	rows   [][]string
	notes  []string
}

// text writes t with aligned columns: the first left, the others right.
// A table wider than width (0: no limit) is cut into panels of columns,
// each repeating the label columns (the first t.fixed), so that eleven
// targets with their spreads stay readable on a terminal.
func (t table) text(w io.Writer, width int) {
	rows := append([][]string{t.header}, t.rows...)
	widths := make([]int, len(t.header))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	fixed := max(t.fixed, 1)
	var panels [][]int // column indexes after the fixed ones
	used := 0
	for _, wd := range widths[:fixed] {
		used += wd + 2
	}
	line := used
	for i := fixed; i < len(widths); i++ {
		if len(panels) == 0 || (width > 0 && line+widths[i]+2 > width && len(panels[len(panels)-1]) > 0) {
			panels = append(panels, nil)
			line = used
		}
		panels[len(panels)-1] = append(panels[len(panels)-1], i)
		line += widths[i] + 2
	}
	if len(panels) == 0 {
		panels = [][]int{nil}
	}
	fmt.Fprintln(w, t.title)
	for p, cols := range panels {
		if p > 0 {
			fmt.Fprintln(w)
		}
		for _, row := range rows {
			var b strings.Builder
			for i := 0; i < fixed+len(cols); i++ {
				col := i
				if i >= fixed {
					col = cols[i-fixed]
				}
				c := row[col]
				pad := strings.Repeat(" ", widths[col]-utf8.RuneCountInString(c))
				if i == 0 {
					b.WriteString(c + pad)
				} else {
					b.WriteString("  " + pad + c)
				}
			}
			fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		}
	}
	for _, n := range t.notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w)
}

// markdown writes t as a GitHub-flavoured Markdown table.
func (t table) markdown(w io.Writer) {
	fmt.Fprintf(w, "### %s\n\n", t.title)
	esc := func(c string) string {
		c = strings.ReplaceAll(c, "|", `\|`)
		if strings.HasPrefix(c, " ") {
			c = "&nbsp;&nbsp;" + strings.TrimLeft(c, " ")
		}
		return c
	}
	line := func(row []string) {
		cells := make([]string, len(row))
		for i, c := range row {
			cells[i] = esc(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	line(t.header)
	seps := make([]string, len(t.header))
	for i := range seps {
		seps[i] = "---:"
	}
	seps[0] = "---"
	fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
	for _, row := range t.rows {
		line(row)
	}
	fmt.Fprintln(w)
	for _, n := range t.notes {
		fmt.Fprintf(w, "%s\n\n", n)
	}
}

// rowLabel is the first column of a metric's row: the workload for its
// headline, the metric indented below it.
func rowLabel(w WorkloadInfo, m metric, first bool) string {
	if first {
		return w.Name
	}
	return "  " + m.Label
}

// resultsTable: medians with min–max per workload × target.
func (res *Results) resultsTable() table {
	t := table{
		title:  fmt.Sprintf("Results: median (min–max) of %d repeat(s)", res.Repeat),
		fixed:  2,
		header: append([]string{"workload", "unit"}, res.targetNames()...),
	}
	var fail, unverified bool
	for _, w := range res.Workloads {
		for i, m := range res.rows(w) {
			row := []string{rowLabel(w, m, i == 0), m.Unit}
			for _, tn := range res.targetNames() {
				s := summarize(res.runsOf(tn, w.Name), m)
				fail = fail || s.Failed > 0
				unverified = unverified || s.Unverified > 0
				row = append(row, s.cell())
			}
			t.rows = append(t.rows, row)
		}
	}
	t.notes = append(t.notes, "MiB/s, IOPS and /s: higher is better; s and µs: lower is better.")
	if fail {
		t.notes = append(t.notes, "FAIL: every repeat failed; \"!\": some did (see Failures).")
	}
	if unverified {
		t.notes = append(t.notes, "\"?\": the workload could not verify its data in some repeat.")
	}
	return t
}

// ratioTable: each target against base; false when base did not take part.
func (res *Results) ratioTable(base string) (table, bool) {
	if !res.hasTarget(base) {
		return table{}, false
	}
	var others []string
	for _, n := range res.targetNames() {
		if n != base {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return table{}, false
	}
	t := table{
		title:  fmt.Sprintf("Cost relative to %s (time ratio, paired by repeat; rates inverted; >1 = slower) [95 %% interval]", base),
		header: append([]string{"workload"}, others...),
		notes:  []string{IntervalMethod},
	}
	for _, w := range res.Workloads {
		for i, m := range res.rows(w) {
			row := []string{rowLabel(w, m, i == 0)}
			for _, tn := range others {
				if r, ok := res.ratio(tn, base, w, m); ok {
					row = append(row, r.cell())
				} else {
					row = append(row, "-")
				}
			}
			t.rows = append(t.rows, row)
		}
	}
	return t, true
}

// fusePeers are the FUSE filesystems of other projects the bench can run
// (issue #12 measures our mounts against the best of them).
var fusePeers = []string{"gocryptfs", "encfs", "cryfs", "securefs"}

// ours reports whether target tn is one of our own FUSE mounts.
func ours(tn string) bool {
	return tn == "twin" || strings.HasPrefix(tn, "twin-") || strings.HasPrefix(tn, "crypt-")
}

// bestPeer is the FUSE peer with the lowest cost on metric m of workload
// w, and that cost; false when no peer completed a run of it.
func (res *Results) bestPeer(w WorkloadInfo, m metric) (string, float64, bool) {
	best, bestCost := "", math.Inf(1)
	for _, p := range fusePeers {
		st := summarize(res.runsOf(p, w.Name), m)
		if st.N == 0 {
			continue
		}
		if c := m.cost(st.Median); c < bestCost && !math.IsInf(c, 0) {
			best, bestCost = p, c
		}
	}
	return best, bestCost, best != "" && bestCost > 0
}

// peerTable: each of our mounts against the best FUSE peer of each row
// (the peer named in its own column); false without a peer or one of ours.
func (res *Results) peerTable() (table, bool) {
	var mine []string
	peers := 0
	for _, n := range res.targetNames() {
		if ours(n) {
			mine = append(mine, n)
		}
		if slices.Contains(fusePeers, n) {
			peers++
		}
	}
	if len(mine) == 0 || peers == 0 {
		return table{}, false
	}
	t := table{
		title:  "Cost relative to the best FUSE peer of each row (time ratio, paired by repeat; rates inverted; >1 = slower) [95 % interval]",
		header: append([]string{"workload", "best peer"}, mine...),
		notes: []string{"best peer: the peer with the lowest median cost; \"level\": our mount and that peer are within the noise of the repeats, neither wins.",
			IntervalMethod},
	}
	for _, w := range res.Workloads {
		for i, m := range res.rows(w) {
			row := []string{rowLabel(w, m, i == 0)}
			peer, _, ok := res.bestPeer(w, m)
			if !ok {
				row = append(row, "-")
			} else {
				row = append(row, peer)
			}
			for _, tn := range mine {
				if r, rok := res.ratio(tn, peer, w, m); ok && rok && !math.IsInf(r.Point, 0) {
					row = append(row, r.cell())
				} else {
					row = append(row, "-")
				}
			}
			t.rows = append(t.rows, row)
		}
	}
	return t, true
}

const gib = 1 << 30

// cpuPerGiB is the median over completed runs of cpu seconds per GiB moved.
func cpuPerGiB(runs []Run, cpu func(Run) float64) (float64, bool) {
	var vals []float64
	for _, r := range runs {
		if r.OK() && r.Bytes > 0 {
			vals = append(vals, cpu(r)/(float64(r.Bytes)/gib))
		}
	}
	if len(vals) == 0 {
		return 0, false
	}
	return median(vals), true
}

// hasDaemon reports whether any run of target measured a daemon.
func (res *Results) hasDaemon(target string) bool {
	for _, r := range res.Runs {
		if r.Target == target && r.DaemonCPUS > 0 {
			return true
		}
	}
	return false
}

// cpuTable: CPU seconds per GiB moved, of the workload's own processes or
// of the target's daemon, for workloads that move data.
func (res *Results) cpuTable(daemon bool) (table, bool) {
	t := table{header: append([]string{"workload"}, res.targetNames()...)}
	get := func(r Run) float64 { return r.WorkloadCPUS }
	t.title = "Workload CPU seconds per GiB moved (the application's own CPU, kernel time of its syscalls included)"
	if daemon {
		get = func(r Run) float64 { return r.DaemonCPUS }
		t.title = "Daemon CPU seconds per GiB moved (the FUSE process serving the target)"
		t.notes = []string{"-: no daemon; kernel targets (ext4loop, dmcrypt-kernel, fscrypt) encrypt in kernel threads that no process accounts for."}
	}
	for _, w := range res.Workloads {
		row := []string{w.Name}
		any := false
		for _, tn := range res.targetNames() {
			if daemon && !res.hasDaemon(tn) {
				row = append(row, "-")
				continue
			}
			if v, ok := cpuPerGiB(res.runsOf(tn, w.Name), get); ok {
				row = append(row, fmtNum(v))
				any = any || v > 0
			} else {
				row = append(row, "-")
			}
		}
		if any {
			t.rows = append(t.rows, row)
		}
	}
	return t, len(t.rows) > 0
}

// latencyOps are the operations the latency summary shows.
var latencyOps = []string{"read", "write", "lookup", "create"}

// opLatency is the median over completed runs of an op's p50 and p99 (ns).
func opLatency(runs []Run, op string) (p50, p99 float64, ok bool) {
	var a, b []float64
	for _, r := range runs {
		if !r.OK() || r.Stats == nil {
			continue
		}
		for _, s := range r.Stats.Ops {
			if s.Op == op && s.Count > 0 {
				a, b = append(a, float64(s.P50Ns)), append(b, float64(s.P99Ns))
			}
		}
	}
	if len(a) == 0 {
		return 0, 0, false
	}
	return median(a), median(b), true
}

// transportOf is the transport the daemon of target tn reported (the first
// run that says).
func (res *Results) transportOf(tn string) string {
	for _, r := range res.Runs {
		if r.Target == tn && r.Stats != nil && r.Stats.Transport != "" {
			return r.Stats.Transport
		}
	}
	return ""
}

// statsTargets lists the targets whose runs carry per-op statistics.
func (res *Results) statsTargets() []string {
	var out []string
	for _, tn := range res.targetNames() {
		for _, r := range res.Runs {
			if r.Target == tn && r.Stats != nil {
				out = append(out, tn)
				break
			}
		}
	}
	return out
}

// latencyTable: p50 / p99 in µs of the main operations on our FUSE
// targets, per workload.
func (res *Results) latencyTable() (table, bool) {
	targets := res.statsTargets()
	if len(targets) == 0 {
		return table{}, false
	}
	t := table{
		title:  "Per-operation latency in the daemon, µs: p50 / p99 (median over repeats)",
		fixed:  2,
		header: append([]string{"workload", "op"}, targets...),
	}
	for _, tn := range targets {
		if tr := res.transportOf(tn); tr != "" {
			t.notes = append(t.notes, tn+": transport "+tr)
		}
	}
	for _, w := range res.Workloads {
		for _, op := range latencyOps {
			row := []string{w.Name, op}
			any := false
			for _, tn := range targets {
				if p50, p99, ok := opLatency(res.runsOf(tn, w.Name), op); ok {
					row = append(row, fmtNum(p50/1e3)+" / "+fmtNum(p99/1e3))
					any = true
				} else {
					row = append(row, "-")
				}
			}
			if any {
				t.rows = append(t.rows, row)
			}
		}
	}
	return t, len(t.rows) > 0
}

// failures lists every failed run, one line each.
func (res *Results) failures() []string {
	var out []string
	for _, r := range res.Runs {
		if !r.OK() && !r.Skipped {
			out = append(out, fmt.Sprintf("%s on %s, repeat %d: %s", r.Workload, r.Target, r.Repeat, oneLine(r.Error)))
		}
	}
	return out
}

// notes lists each distinct note and skip reason once, with where it came from.
func (res *Results) notes() []string {
	type key struct{ workload, note string }
	where := map[key][]string{}
	var order []key
	for _, r := range res.Runs {
		note := r.Note
		if r.Skipped {
			note = r.Error
		}
		if note == "" {
			continue
		}
		k := key{r.Workload, note}
		if _, ok := where[k]; !ok {
			order = append(order, k)
		}
		if !slices.Contains(where[k], r.Target) {
			where[k] = append(where[k], r.Target)
		}
	}
	var out []string
	all := len(res.Targets)
	for _, k := range order {
		on := strings.Join(where[k], ", ")
		if len(where[k]) == all && all > 1 {
			on = "all targets"
		}
		out = append(out, fmt.Sprintf("%s (%s): %s", k.workload, on, oneLine(k.note)))
	}
	return out
}

// dmcryptVariant is the dm-crypt target that took part, or "".
func (res *Results) dmcryptVariant() string {
	for _, n := range res.targetNames() {
		if strings.HasPrefix(n, "dmcrypt-") {
			return n
		}
	}
	for _, s := range res.Skipped {
		if strings.HasPrefix(s.Name, "dmcrypt-") {
			return s.Name + " (skipped)"
		}
	}
	return ""
}

// machineLine is the machine in one line.
func (m Machine) line() string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	path := ""
	if m.CipherPath != "" {
		path = ", cipher " + m.CipherPath
	}
	return fmt.Sprintf("%s, %d cores, %.1f GiB; AES-NI %s, VAES %s (AVX-512 %s)%s; Linux %s; %s",
		m.CPU, m.Cores, m.MemoryGiB, yes(m.AESNI), yes(m.VAES), yes(m.AVX512VAES), path, m.Kernel, m.Go)
}

// WriteSummary prints the results for a terminal: what ran where, the
// results table, the ratios to native and to the twin, CPU per GiB, the
// per-op latency of our mounts, failures and notes. Tables wider than
// width columns (0: no limit) are cut into panels.
func WriteSummary(w io.Writer, res *Results, width int) {
	fmt.Fprintf(w, "twincrypt bench: size %s, %d repeat(s), lower data on %s\n", res.Size, res.Repeat, res.Lower)
	fmt.Fprintf(w, "machine: %s\n", res.Machine.line())
	if v := res.dmcryptVariant(); v != "" {
		fmt.Fprintf(w, "dm-crypt: %s (%s, %d-bit key, %d-byte sectors)\n", v, dmCipher, dmKeyBits, dmSectorSize)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Name, s.Reason)
	}
	for _, t := range res.Targets {
		if t.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", t.Name, t.Note)
		}
	}
	if res.RepeatRule != "" {
		fmt.Fprintf(w, "repeats: %s\n", res.RepeatRule)
	}
	if res.Interrupted {
		fmt.Fprintln(w, "INTERRUPTED: the tables hold the runs that finished")
	}
	fmt.Fprintln(w)
	for _, t := range res.tables() {
		t.text(w, width)
	}
	if f := res.failures(); len(f) > 0 {
		fmt.Fprintln(w, "Failures")
		for _, l := range f {
			fmt.Fprintln(w, "  "+l)
		}
		fmt.Fprintln(w)
	}
	if n := res.notes(); len(n) > 0 {
		fmt.Fprintln(w, "Notes")
		for _, l := range n {
			fmt.Fprintln(w, "  "+l)
		}
		fmt.Fprintln(w)
	}
}

// tables are the tables of WriteSummary and report.md, in order.
func (res *Results) tables() []table {
	out := []table{res.resultsTable()}
	for _, base := range []string{"native", "twin"} {
		if t, ok := res.ratioTable(base); ok {
			out = append(out, t)
		}
	}
	if t, ok := res.peerTable(); ok {
		out = append(out, t)
	}
	for _, daemon := range []bool{false, true} {
		if t, ok := res.cpuTable(daemon); ok {
			out = append(out, t)
		}
	}
	if t, ok := res.latencyTable(); ok {
		out = append(out, t)
	}
	return out
}
