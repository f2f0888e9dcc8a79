package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// Config is one bench run.
type Config struct {
	Targets   []Target
	Workloads []Workload
	Size      Size
	// Repeat is the number of repeats; with Auto, the least.
	Repeat int
	// Auto, when set, adds repeats after Repeat until the intervals are
	// narrow enough, Auto.Max is reached or Auto.Budget would be spent.
	Auto *AutoRepeat
	// Work is a directory on the lower filesystem (see Workspace): the
	// targets' state goes to Work/targets/NAME, Env.Cache is Work/cache.
	Work string
	// Lower describes the filesystem under Work, for the report.
	Lower string
	// DropCaches is Env.DropCaches (default: DropCaches).
	DropCaches func() error
	// Progress is told what happens (nil: nothing is shown).
	Progress Progress
	Machine  Machine
	// Trace adds a traced pass after the repeats (trace.go).
	Trace bool
}

// Results is everything a bench run found; results.json is this document.
type Results struct {
	Version     int            `json:"version"`
	Started     time.Time      `json:"started"`
	Finished    time.Time      `json:"finished"`
	Size        Size           `json:"size"`
	Repeat      int            `json:"repeat"`
	Lower       string         `json:"lower"`
	Machine     Machine        `json:"machine"`
	Targets     []TargetInfo   `json:"targets"`
	Skipped     []Skipped      `json:"skipped,omitempty"`
	Workloads   []WorkloadInfo `json:"workloads"`
	Runs        []Run          `json:"runs"`
	Interrupted bool           `json:"interrupted,omitempty"`
	// RepeatRule says, for --repeat auto or --budget, the rule and why
	// the repeats stopped where they did.
	RepeatRule string `json:"repeat_rule,omitempty"`
	// Traced are the runs of the traced pass (Config.Trace); TraceNote
	// says why there was none where tracing is unavailable.
	Traced    []TracedRun `json:"traced,omitempty"`
	TraceNote string      `json:"trace_note,omitempty"`
}

// ResultsVersion is the version of the results.json layout.
const ResultsVersion = 1

// TargetInfo is a target that took part.
type TargetInfo struct {
	Name       string `json:"name"`
	SetupError string `json:"setup_error,omitempty"`
	// Note says how the target departs from the plan (see Noter).
	Note string `json:"note,omitempty"`
}

// Noter may be implemented by a target that departs from the runner's
// plan (a peer that stays mounted across runs, say); Note says how.
type Noter interface {
	Note() string
}

// Skipped is a target left out, with the one-line reason.
type Skipped struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// WorkloadInfo describes a workload of the run.
type WorkloadInfo struct {
	Name     string `json:"name"`
	Describe string `json:"describe"`
	// Headline is the metric the tables lead with: "wall_s", "MiBps"
	// or "iops" (see Headliner).
	Headline     string `json:"headline"`
	PrepareError string `json:"prepare_error,omitempty"`
}

// Run is one workload run on one target.
type Run struct {
	Target   string    `json:"target"`
	Workload string    `json:"workload"`
	Repeat   int       `json:"repeat"` // 1-based
	Start    time.Time `json:"start"`
	// From the workload's Result.
	WallS        float64            `json:"wall_s"`
	Bytes        int64              `json:"bytes"`
	Ops          int64              `json:"ops"`
	WorkloadCPUS float64            `json:"workload_cpu_s"`
	Metrics      map[string]float64 `json:"metrics,omitempty"`
	Verified     bool               `json:"verified"`
	Note         string             `json:"note,omitempty"`
	// DaemonCPUS is the CPU time of the target's daemon during the run.
	DaemonCPUS float64 `json:"daemon_cpu_s"`
	// Error is why the run failed ("" = it did not).
	Error string `json:"error,omitempty"`
	// Skipped: the workload cannot run on this machine at all (its
	// error wraps ErrSkipped); Error says why. Not a failure.
	Skipped bool `json:"skipped,omitempty"`
	// Stats is the per-operation latency of the mount during the run
	// (our FUSE targets).
	Stats *measure.Snapshot `json:"stats,omitempty"`
}

// OK reports whether the run completed.
func (r Run) OK() bool { return r.Error == "" }

// Headliner may be implemented by a workload whose natural figure is not
// its wall time. Headline returns "MiBps" (Bytes over Wall), "iops"
// (Metrics["iops"], else Ops over Wall) or "wall_s".
type Headliner interface {
	Headline() string
}

// DropCaches writes back dirty pages and empties the page cache, dentries
// and inodes (sync; echo 3 > /proc/sys/vm/drop_caches). It needs root.
func DropCaches() error {
	if os.Geteuid() != 0 {
		return errors.New("dropping the page cache needs root")
	}
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	return nil
}

// cleanupTimeout bounds each unmount and cleanup, which run even after
// the bench was interrupted.
const cleanupTimeout = 2 * time.Minute

// RunBench runs every workload on every target, c.Repeat times, targets
// interleaved within each workload (A B C A B C …) so that a noisy
// machine's drift hits all of them alike, each repeat starting one target
// further on (A B C, then B C A, C A B) so that no target always runs
// right after the same other one: on a disk-backed LOWER a run's figures
// depend on what the run before left the filesystem doing
// (docs/bench-2026-12-03-ext4). Each run also starts after a syncfs of
// the work filesystem, untimed. Every run mounts, runs in a fresh
// directory and unmounts: each starts cold, and our daemons'
// summaries cover exactly one run. A run that fails is recorded with its
// error and the bench goes on. Whatever happens, every target is cleaned
// up before RunBench returns; when ctx is cancelled it returns the results
// so far (Interrupted) and ctx's error.
func RunBench(ctx context.Context, c Config) (res *Results, err error) {
	if c.Repeat < 1 {
		c.Repeat = 1
	}
	if c.DropCaches == nil {
		c.DropCaches = DropCaches
	}
	p := c.Progress
	if p == nil {
		p = nopProgress{}
	}
	res = &Results{
		Version: ResultsVersion, Started: time.Now(), Size: c.Size, Repeat: c.Repeat,
		Lower: c.Lower, Machine: c.Machine,
	}
	env := &Env{Size: c.Size, Cache: filepath.Join(c.Work, "cache"), DropCaches: c.DropCaches}
	if err := mkdirs(env.Cache); err != nil {
		return res, err
	}

	var targets []Target
	for _, t := range c.Targets {
		if err := t.Available(); err != nil {
			res.Skipped = append(res.Skipped, Skipped{Name: t.Name(), Reason: err.Error()})
			p.Skip(t.Name(), err.Error())
			continue
		}
		targets = append(targets, t)
	}
	if len(c.Targets) > 0 {
		var names []string
		for _, t := range targets {
			names = append(names, t.Name())
		}
		line := fmt.Sprintf("targets: %d of %d available", len(targets), len(c.Targets))
		if len(names) > 0 {
			line += ": " + strings.Join(names, ", ")
		}
		p.Step(line)
	}
	est := newEstimator(c, targets)
	p.Estimate(est.startup+est.left(c.Repeat*len(c.Workloads)*len(targets), 0, 0),
		"from the workloads' cost model; refreshed as runs finish")
	// From here on every target may hold mounts, loop devices or volumes.
	defer func() {
		for i := len(targets) - 1; i >= 0; i-- {
			if cerr := targets[i].Cleanup(); cerr != nil {
				p.Warn(fmt.Sprintf("clean up %s: %v", targets[i].Name(), cerr))
				err = errors.Join(err, fmt.Errorf("clean up %s: %w", targets[i].Name(), cerr))
			}
		}
		for i, w := range c.Workloads {
			if i < len(res.Workloads) {
				res.Workloads[i].Headline = chooseHeadline(w, res.Runs)
			}
		}
		res.Finished = time.Now()
	}()

	setupErr := map[string]string{}
	for _, t := range targets {
		info := TargetInfo{Name: t.Name()}
		if n, ok := t.(Noter); ok {
			info.Note = n.Note()
		}
		p.Phase("setting up " + t.Name())
		t0 := time.Now()
		work := filepath.Join(c.Work, "targets", t.Name())
		serr := mkdirs(work)
		if serr == nil {
			serr = t.Setup(ctx, work)
		}
		if ctx.Err() != nil {
			res.Interrupted = true
			return res, ctx.Err()
		}
		if serr != nil {
			info.SetupError = serr.Error()
			setupErr[t.Name()] = serr.Error()
			p.Warn(fmt.Sprintf("setup of %s failed: %v", t.Name(), serr))
		} else {
			line := fmt.Sprintf("%s set up in %s", t.Name(), roundDur(time.Since(t0)))
			if info.Note != "" {
				line += " (" + info.Note + ")"
			}
			p.Step(line)
		}
		res.Targets = append(res.Targets, info)
	}
	prep := time.Now()
	for _, w := range c.Workloads {
		info := WorkloadInfo{Name: w.Name(), Describe: w.Describe()}
		p.Phase("preparing " + w.Name())
		if perr := w.Prepare(ctx, env); perr != nil {
			if ctx.Err() != nil {
				res.Interrupted = true
				return res, ctx.Err()
			}
			info.PrepareError = perr.Error()
			p.Warn(fmt.Sprintf("preparing %s failed: %v", w.Name(), perr))
		}
		res.Workloads = append(res.Workloads, info)
	}
	if len(c.Workloads) > 0 {
		p.Step(fmt.Sprintf("%d workload(s) prepared in %s", len(c.Workloads), roundDur(time.Since(prep))))
	}

	perRepeat := len(c.Workloads) * len(targets)
	total := c.Repeat * perRepeat
	n := 0
	runsStart := time.Now()
	for r := 1; ; r++ {
		if r > c.Repeat {
			more, why := moreRepeats(c, res, r, time.Since(runsStart))
			if !more {
				res.RepeatRule = why
				break
			}
			total += perRepeat
			p.Step(fmt.Sprintf("repeat %d added: %s", r, why))
		}
		if r > 1 {
			took := time.Since(runsStart)
			p.ETA(r-1, total/max(perRepeat, 1), took, took/time.Duration(r-1)*time.Duration(total/max(perRepeat, 1)-r+1))
		}
		order := rotate(targets, r-1)
		for wi, w := range c.Workloads {
			for _, t := range order {
				if ctx.Err() != nil {
					res.Interrupted = true
					return res, ctx.Err()
				}
				n++
				run := Run{Target: t.Name(), Workload: w.Name(), Repeat: r, Start: time.Now()}
				p.Start(run, n, total)
				switch {
				case setupErr[t.Name()] != "":
					run.Error = "setup: " + setupErr[t.Name()]
				case res.Workloads[wi].PrepareError != "":
					run.Error = "prepare: " + res.Workloads[wi].PrepareError
				default:
					runOne(ctx, t, w, env, &run)
				}
				if ctx.Err() != nil && !run.OK() {
					// Cut short by the interrupt: not a result.
					res.Interrupted = true
					return res, ctx.Err()
				}
				res.Runs = append(res.Runs, run)
				p.Done(run, n, total)
				p.Estimate(est.left(total, n, time.Since(runsStart)), "")
			}
		}
		res.Repeat = r
	}
	if c.Trace {
		runTraced(ctx, targets, c.Workloads, env, res, setupErr, p)
	}
	return res, nil
}

// rotate returns ts starting at index k (mod its length), wrapping around.
func rotate[T any](ts []T, k int) []T {
	if len(ts) == 0 {
		return ts
	}
	k %= len(ts)
	return append(slices.Clone(ts[k:]), ts[:k]...)
}

// settle writes back what earlier runs left dirty on the filesystem of
// dir (syncfs(2); nothing to do on tmpfs), so that a run on a disk-backed
// LOWER does not pay for the writeback and the journal commits of the run
// before it. Best effort: a run is not refused for it.
func settle(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.Syncfs(fd)
}

// runOne mounts t, runs w in a fresh directory, unmounts, and fills in run.
func runOne(ctx context.Context, t Target, w Workload, env *Env, run *Run) {
	settle(env.Cache)
	// Unmounting must happen even when ctx was cancelled mid-run.
	cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	mnt, err := t.Mount(ctx)
	if err != nil {
		run.Error = "mount: " + err.Error()
		_ = t.Unmount(cleanupCtx)
		return
	}
	dir := filepath.Join(mnt, fmt.Sprintf("bench-%s-%d", w.Name(), run.Repeat))
	if err := os.Mkdir(dir, 0o755); err != nil {
		run.Error = err.Error()
	} else {
		cpu0 := t.DaemonCPU()
		result, err := safeRun(ctx, w, dir, env)
		run.DaemonCPUS = (t.DaemonCPU() - cpu0).Seconds()
		run.WallS = result.Wall.Seconds()
		run.Bytes, run.Ops = result.Bytes, result.Ops
		run.WorkloadCPUS = result.WorkloadCPU.Seconds()
		run.Metrics, run.Verified, run.Note = result.Metrics, result.Verified, result.Note
		if err != nil {
			run.Error = err.Error()
			run.Skipped = errors.Is(err, ErrSkipped)
			run.Verified = false
		}
		// Untimed: the workload should have left dir empty already.
		if rerr := os.RemoveAll(dir); rerr != nil && run.OK() {
			run.Note = joinNote(run.Note, "could not remove the run's directory: "+rerr.Error())
		}
	}
	if uerr := t.Unmount(cleanupCtx); uerr != nil && run.OK() {
		run.Error = "unmount: " + uerr.Error()
	}
	run.Stats = t.Stats()
}

// safeRun runs w, turning a panic into that run's error: one broken
// workload must not take the mounts of the others down with it.
func safeRun(ctx context.Context, w Workload, dir string, env *Env) (res Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("workload panicked: %v", v)
		}
	}()
	return w.Run(ctx, dir, env)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// chooseHeadline picks the metric a workload's rows lead with: what the
// workload says (Headliner), else the rate it reports as Metrics["MiBps"]
// or ["iops"], MiB/s for the sequential-transfer workloads ("seq…") that
// moved bytes, else time.
func chooseHeadline(w Workload, runs []Run) string {
	if h, ok := w.(Headliner); ok {
		switch h := h.Headline(); h {
		case "MiBps", "iops", "wall_s":
			return h
		}
	}
	for _, r := range runs {
		if r.Workload != w.Name() || !r.OK() {
			continue
		}
		if _, ok := r.Metrics["MiBps"]; ok {
			return "MiBps"
		}
		if _, ok := r.Metrics["iops"]; ok {
			return "iops"
		}
		if strings.HasPrefix(w.Name(), "seq") && r.Bytes > 0 {
			return "MiBps"
		}
	}
	return "wall_s"
}
