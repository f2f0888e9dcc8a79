package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/trace"
)

// TraceFile is the per-operation kernel latency of the traced pass.
const TraceFile = "trace.csv"

// TracedRun is one workload run on one target with kernel tracing on: the
// latency of every filesystem system call of the bench process and its
// children (the workload) on the target, the FUSE round trips and the
// block requests below, and for our mounts where each request's time
// goes. Traced runs are a pass of their own after the repeats: their wall
// times are not in Runs and no ratio comes from them.
type TracedRun struct {
	Target   string         `json:"target"`
	Workload string         `json:"workload"`
	WallS    float64        `json:"wall_s"`
	Error    string         `json:"error,omitempty"`
	Series   []TracedSeries `json:"series,omitempty"`
	Where    []trace.Where  `json:"where,omitempty"`
	// SharesInputs: the target is on the filesystem of the bench's
	// inputs (Env.Cache), so its counts include reading them.
	SharesInputs bool `json:"shares_inputs,omitempty"`
}

// TracedSeries is one layer/op of a traced run.
type TracedSeries struct {
	Layer string        `json:"layer"`
	Stats measure.Stats `json:"stats"` // Op is the series' op
}

// runTraced is the traced pass: every workload once on every target,
// with a fresh tracer attached from the mount to the unmount. Without
// BPF it records the one line that says why, and the bench goes on.
func runTraced(ctx context.Context, targets []Target, workloads []Workload, env *Env, res *Results, setupErr map[string]string, p Progress) {
	probe, err := trace.New(trace.Options{})
	if err != nil {
		res.TraceNote = err.Error()
		p.Warn("traced pass skipped: " + err.Error())
		return
	}
	probe.Close()
	p.Phase("traced pass")
	for wi, w := range workloads {
		if wi >= len(res.Workloads) || res.Workloads[wi].PrepareError != "" {
			continue
		}
		for _, t := range targets {
			if ctx.Err() != nil {
				return
			}
			if setupErr[t.Name()] != "" {
				continue
			}
			tr := TracedRun{Target: t.Name(), Workload: w.Name()}
			runTracedOne(ctx, t, w, env, &tr)
			res.Traced = append(res.Traced, tr)
			line := fmt.Sprintf("traced %s on %s", w.Name(), t.Name())
			if tr.Error != "" {
				line += ": " + oneLine(tr.Error)
			}
			p.Step(line)
		}
	}
}

func runTracedOne(ctx context.Context, t Target, w Workload, env *Env, tr *TracedRun) {
	settle(env.Cache)
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	mnt, err := t.Mount(ctx)
	if err != nil {
		tr.Error = "mount: " + err.Error()
		_ = t.Unmount(cleanupCtx)
		return
	}
	var st1, st2 unix.Stat_t
	if unix.Stat(mnt, &st1) == nil && unix.Stat(env.Cache, &st2) == nil && st1.Dev == st2.Dev {
		tr.SharesInputs = true
	}
	snap, err := tracedWorkload(ctx, mnt, w, env, tr)
	if uerr := t.Unmount(cleanupCtx); uerr != nil && tr.Error == "" {
		tr.Error = "unmount: " + uerr.Error()
	}
	if err != nil {
		tr.Error = joinNote(tr.Error, "trace: "+err.Error())
		return
	}
	for _, s := range snap.Series {
		if s.Target == mnt {
			tr.Series = append(tr.Series, TracedSeries{Layer: s.Layer, Stats: s.Stats()})
		}
	}
	// The daemon's spans cover the same mount: the tracer was attached
	// before the first request of the run and read after the last.
	if d := t.Stats(); d != nil {
		tr.Where = trace.WhereOf(snap, mnt, d.Ops)
	}
}

// tracedWorkload runs w in a fresh directory of mnt under a tracer that
// follows this process and its children on mnt's filesystem.
func tracedWorkload(ctx context.Context, mnt string, w Workload, env *Env, tr *TracedRun) (trace.Snapshot, error) {
	tc, err := trace.New(trace.Options{Pids: []int{os.Getpid()}})
	if err != nil {
		return trace.Snapshot{}, err
	}
	defer tc.Close()
	if _, err := tc.AddTarget(mnt); err != nil {
		return trace.Snapshot{}, err
	}
	dir := filepath.Join(mnt, "bench-traced-"+w.Name())
	if err := os.Mkdir(dir, 0o755); err != nil {
		tr.Error = err.Error()
	} else {
		result, err := safeRun(ctx, w, dir, env)
		tr.WallS = result.Wall.Seconds()
		if err != nil {
			tr.Error = err.Error()
		}
		_ = os.RemoveAll(dir)
	}
	return tc.Snapshot()
}

// tracedOps orders the ops of a layer across the traced runs of a
// workload by their total count, most frequent first.
func tracedOps(runs []TracedRun, layer string) []string {
	total := map[string]int64{}
	for _, r := range runs {
		for _, s := range r.Series {
			if s.Layer == layer {
				total[s.Stats.Op] += s.Stats.Count
			}
		}
	}
	ops := make([]string, 0, len(total))
	for op := range total {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		if total[ops[i]] != total[ops[j]] {
			return total[ops[i]] > total[ops[j]]
		}
		return ops[i] < ops[j]
	})
	return ops
}

// WriteTraceReport writes the traced pass's section of report.md: per
// workload, the p50/p99 of each system call on each target (the most
// frequent calls), and the FUSE round trips of the FUSE targets.
func WriteTraceReport(w io.Writer, res *Results) {
	if res.TraceNote == "" && len(res.Traced) == 0 {
		return
	}
	fmt.Fprint(w, "## Kernel tracing (traced pass)\n\n")
	if res.TraceNote != "" {
		fmt.Fprintf(w, "No traced pass: %s.\n\n", res.TraceNote)
		return
	}
	fmt.Fprint(w, "One extra run of every workload on every target with the tracer attached "+
		"(docs/tracing.md): latency of each filesystem system call of the workload as the "+
		"application saw it, p50 / p99 (count). These figures are traced; the wall times "+
		"and ratios above come from the untraced repeats.\n\n")
	byWorkload := map[string][]TracedRun{}
	var order []string
	for _, r := range res.Traced {
		if _, ok := byWorkload[r.Workload]; !ok {
			order = append(order, r.Workload)
		}
		byWorkload[r.Workload] = append(byWorkload[r.Workload], r)
	}
	const maxRows = 12
	for _, wl := range order {
		runs := byWorkload[wl]
		for _, layer := range []string{trace.LayerSyscall, trace.LayerFUSE} {
			ops := tracedOps(runs, layer)
			if len(ops) == 0 {
				continue
			}
			if len(ops) > maxRows {
				ops = ops[:maxRows]
			}
			what := "system calls"
			if layer == trace.LayerFUSE {
				what = "FUSE round trips"
			}
			fmt.Fprintf(w, "### %s: %s\n\n| op |", wl, what)
			var cols []TracedRun
			for _, r := range runs {
				if r.Error == "" && (layer == trace.LayerSyscall || hasLayer(r, layer)) {
					cols = append(cols, r)
					fmt.Fprintf(w, " %s |", r.Target)
				}
			}
			fmt.Fprint(w, "\n|---|"+strings.Repeat("---|", len(cols))+"\n")
			for _, op := range ops {
				fmt.Fprintf(w, "| %s |", op)
				for _, r := range cols {
					fmt.Fprintf(w, " %s |", tracedCell(r, layer, op))
				}
				fmt.Fprintln(w)
			}
			fmt.Fprintln(w)
		}
	}
	var shared, failed []string
	for _, r := range res.Traced {
		if r.SharesInputs && !slices.Contains(shared, r.Target) {
			shared = append(shared, r.Target)
		}
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%s on %s: %s", r.Workload, r.Target, oneLine(r.Error)))
		}
	}
	if len(shared) > 0 {
		fmt.Fprintf(w, "- %s: on the filesystem of the bench's inputs, so the counts include reading them.\n", strings.Join(shared, ", "))
	}
	for _, f := range failed {
		fmt.Fprintf(w, "- traced run failed: %s\n", f)
	}
	fmt.Fprintf(w, "\nEvery traced series is in %s; where each FUSE request's time goes (round trip, daemon handler, transport) is in %s.\n\n", TraceFile, JSONFile)
}

func hasLayer(r TracedRun, layer string) bool {
	for _, s := range r.Series {
		if s.Layer == layer {
			return true
		}
	}
	return false
}

func tracedCell(r TracedRun, layer, op string) string {
	for _, s := range r.Series {
		if s.Layer == layer && s.Stats.Op == op {
			return fmt.Sprintf("%s / %s (%d)", measure.HumanNs(s.Stats.P50Ns), measure.HumanNs(s.Stats.P99Ns), s.Stats.Count)
		}
	}
	return "-"
}

// TraceCSVHeader is the header of trace.csv: one row per traced series.
var TraceCSVHeader = []string{"target", "workload", "layer", "op", "count", "errors",
	"mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"}

// WriteTraceCSV writes trace.csv.
func WriteTraceCSV(w io.Writer, res *Results) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(TraceCSVHeader); err != nil {
		return err
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range res.Traced {
		for _, s := range r.Series {
			st := s.Stats
			if err := cw.Write([]string{r.Target, r.Workload, s.Layer, st.Op, i64(st.Count), i64(st.Errors),
				strconv.FormatFloat(st.MeanNs, 'f', 0, 64), i64(st.P50Ns), i64(st.P90Ns), i64(st.P99Ns), i64(st.MaxNs)}); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
