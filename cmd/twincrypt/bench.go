package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/integration/bench"
)

type benchFlags struct {
	size      string
	repeat    string
	budget    time.Duration
	full      bool
	targets   []string
	workloads []string
	out       string
	on        string
	fio       bool
	bonnie    bool
	peers     bool
	keep      bool
	compare   bool
	scale     []int
	shapes    []string
	scaleOps  []string
	merge     bool
	trace     bool
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [flags] | bench --compare OLD.json NEW.json",
		Short: "Run real workloads on plain disk, the twin, encrypted mounts, dm-crypt and peers; compare",
		Long: `Run the source articles' workloads on every layer and print what each costs.

A first bench, 'twincrypt bench' alone, takes about 5 minutes on 2 quiet
cores: native, twin, crypt-xts and gocryptfs (when installed), every workload
but build and git, size small, 5 repeats. --full runs every target and workload
below, 3 repeats (about 13 minutes with the peers installed); --targets and
--workloads name others ("all": every one). The results are always kept:
--out DIR, or a new ./twincrypt-bench-YYYYMMDD-HHMMSS (where the current
directory cannot be written, under $XDG_STATE_HOME/twincrypt), named at the
end.

Targets (in this order, interleaved: every workload runs on all of them in
turn, repeat after repeat, so that a noisy machine's drift hits all alike;
each repeat starts one target later, so that none always runs right after
the same other one, and every run starts after a syncfs of the work
filesystem):

  native             a plain directory (the baseline)
  twin               twincrypt's passthrough twin: the same FUSE code, no cipher
  crypt-xts          a twincrypt volume, AES-XTS (512-bit key)
  crypt-cbc          a twincrypt volume, AES-CBC-ESSIV over 512-byte sectors (256-bit key)
  ext4loop           ext4 on a loop device over an image file (the control for dm-crypt)
  dmcrypt-kernel     LUKS2 aes-xts-plain64 opened by the kernel (cryptsetup open),
  dmcrypt-userspace  or, without device-mapper, the same volume unlocked by
                     'twincrypt blockdev open', with a loop device and ext4 on top
  ecryptfs           the kernel's eCryptfs (mount -t ecryptfs, ecryptfs-utils), AES
                     with a 256-bit key, filenames encrypted; skipped where the
                     kernel has no ecryptfs; ecryptfs-aes128 (its default 128-bit
                     key) runs when named in --targets
  gocryptfs, encfs, cryfs, securefs, fscrypt
                     peers, included when installed (--peers=false leaves them out)

Our FUSE targets run as their own processes (this binary, 'mount
--background'), so that their CPU time is theirs; each run mounts, works in a
fresh directory and unmounts, so every run starts cold and each daemon's
statistics cover exactly one run. Targets that cannot run here (not root, a
program missing, no device-mapper) are skipped with the reason; a failed run
is shown as FAIL and the bench goes on.

Workloads: seqwrite, seqread, smallwrite4k, smallwrite512, copytree, gzip,
srctree (untar, ls -lR, md5 of every file, rm -rf), bonnie, randrw, sqlite,
lame, git (clone, status, commit, checkout, gc), build (make -j of a C
project: full, nothing to do, after a header changed); each verifies the
data it wrote. --size scales them: tiny (for tests), small (the default),
default, large (the articles' sizes). How long a bench took on 2 cores
(AMD EPYC, tmpfs below), the quick default / --full with gocryptfs and
securefs installed:
  tiny     not timed / not timed
  small    5 min / 13 min
  default  not timed / not timed
  large    not timed
(The quick 5 min is the cost model, built from the per-run times of a run
on 2 quiet cores; with others' builds holding the load at 19 it took 14
min. --full's 13 min was measured at load 2-3.)
An estimate is printed at the start, from a cost model of the workloads,
and refreshed after every run from how the runs so far compared with it
(the live line shows the ETA; a line after each repeat).

Ratios come with a 95 % interval from the repeats: each repeat's ratio
(target and base ran back to back), the geometric mean of those, and
Student's t on their logarithms. A ratio whose interval contains 1x is
printed "level": the repeats cannot tell the two apart. --repeat auto adds
repeats (from 3, at most 10) until the interval of every headline ratio to
native is no wider than x1.20 (hi/lo, about +-10 %); --budget 10m bounds the
whole bench instead (a repeat is started only if, at the average so far, it
ends within the budget).

By default all lower data goes on a tmpfs mounted for the bench (as root;
three quarters of the available memory, used only as far as written), so
that every target stands on the same, fast ground; --on DIR puts it on a
real disk instead. Everything is unmounted and removed at the end, also on
SIGINT (Ctrl-C), SIGTERM, SIGHUP and SIGPIPE (a closed pipe, as after
'bench | tail' is stopped); the tables of the runs that finished are
printed and kept. --keep keeps the data.

Printed: medians with min–max, cost ratios to native and to the twin with
their intervals, the cost of our mounts relative to the best FUSE peer of
each row (when peers ran), CPU seconds per GiB of the workload and of the
daemon, and the per-op latency of our mounts. The output directory holds
report.md, results.csv, results.json and the charts overhead.svg/png (each
target's cost relative to native per workload, log axis, bars up from 1x
when slower and down when faster, error bars: the 95 % interval) and
latency.svg/png (per-op p50 bars with p99 whiskers, ops labelled with their
class). --compare OLD.json NEW.json prints what changed between two runs.

--scale N1,N2,... runs the scale harness instead of the workloads: N empty
files in one directory (flat) and in 1000 directories (tree), then ls -f,
ls -l (twice: cold, then warm), find, du and rm -rf, each on a fresh mount,
each timed and checked to see all N files, with the daemon's VmRSS/VmHWM
after each op. --out DIR writes scale.md (µs per file, flatness, memory),
scale.json and the charts scale-flat.svg/png, scale-tree.svg/png.

Exit status 1 when any run failed (the tables are printed all the same),
130 when interrupted by any of the four signals (after cleaning up).

` + opClassHelp(),
		Example: `  twincrypt bench
  twincrypt bench --full
  twincrypt bench --repeat auto --budget 10m
  twincrypt bench --size tiny --repeat 1 --targets native,twin,crypt-xts
  twincrypt bench --workloads srctree,randrw --fio --out results/ --on /mnt/ssd
  twincrypt bench --compare before/results.json after/results.json
  twincrypt bench --scale 10000,100000,1000000 --out docs/scale`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.compare {
				if len(args) != 2 {
					return usageErrorf("bench --compare needs OLD.json and NEW.json, got %d argument(s)", len(args))
				}
				return runBenchCompare(cmd.OutOrStdout(), args[0], args[1])
			}
			if len(args) != 0 && !f.merge {
				return usageErrorf("bench takes no arguments (did you mean --compare OLD.json NEW.json?)")
			}
			if f.merge {
				return runBenchScaleMerge(cmd, f, args)
			}
			if len(f.scale) > 0 {
				return runBenchScale(cmd, f)
			}
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.BoolVar(&f.full, "full", false, "every target and workload, 3 repeats (with the peers installed: about 13 min at size small)")
	fl.StringVar(&f.size, "size", string(bench.SizeSmall), "workload size: tiny, small, default or large")
	fl.StringVar(&f.repeat, "repeat", "", "repeat every workload on every target `N` times, or \"auto\": until the intervals are narrow (default 5; 3 with --full)")
	fl.DurationVar(&f.budget, "budget", 0, "with --repeat auto (implied): add repeats only while the bench stays within `DURATION` (e.g. 10m)")
	fl.StringSliceVar(&f.targets, "targets", nil, "run only these targets (comma separated; \"dmcrypt\" and \"peers\" name groups; \"all\": every default target and peer)")
	fl.StringSliceVar(&f.workloads, "workloads", nil, "run only these workloads (comma separated; \"all\": every one)")
	fl.StringVar(&f.out, "out", "", "write report.md, results.csv, results.json and charts to `DIR` (default ./twincrypt-bench-YYYYMMDD-HHMMSS)")
	fl.StringVar(&f.on, "on", "", "keep the targets' data under `DIR` (a real disk) instead of a dedicated tmpfs")
	fl.BoolVar(&f.fio, "fio", false, "randrw: run fio when installed instead of the Go implementation")
	fl.BoolVar(&f.bonnie, "bonnie++", false, "bonnie: run bonnie++ when installed instead of the Go implementation")
	fl.BoolVar(&f.peers, "peers", true, "include the installed peers (gocryptfs, encfs, cryfs, securefs, fscrypt)")
	fl.BoolVar(&f.keep, "keep", false, "keep the work directory (the targets' data) at the end")
	fl.BoolVar(&f.compare, "compare", false, "compare two results.json files given as arguments and exit")
	fl.IntSliceVar(&f.scale, "scale", nil, "instead of the workloads, the scale run: create, ls -f, ls -l, find, du, rm -rf of `COUNTS` empty files (comma separated, e.g. 10000,100000,1000000); default targets native,twin,crypt-xts,gocryptfs,securefs, --repeat 1")
	fl.StringSliceVar(&f.shapes, "scale-shapes", []string{"flat", "tree"}, "with --scale: flat (all files in one directory), tree (1000 directories)")
	fl.StringSliceVar(&f.scaleOps, "scale-ops", nil, "with --scale: run only these listing ops of ls-f, ls-l, ls-l-warm, find, du (create and rm-rf always run)")
	fl.BoolVar(&f.trace, "trace", false, "after the repeats, run every workload once more on every target with kernel tracing (root, BPF): per-syscall p50/p99 per target in report.md, trace.csv; see 'twincrypt trace'")
	fl.BoolVar(&f.merge, "scale-merge", false, "merge the scale.json files given as arguments (runs made apart) and write the report to --out")
	return cmd
}

// benchRepeat is the number of repeats and, for --repeat auto or
// --budget, the rule that adds more.
func benchRepeat(f benchFlags) (int, *bench.AutoRepeat, error) {
	if f.budget < 0 {
		return 0, nil, usageErrorf("--budget must not be negative")
	}
	switch f.repeat {
	case "auto":
		return 3, &bench.AutoRepeat{Spread: bench.DefaultAutoSpread, Max: autoMaxRepeats, Budget: f.budget}, nil
	case "":
		n := quickRepeats
		if f.full {
			n = fullRepeats
		}
		if f.budget > 0 {
			return 3, &bench.AutoRepeat{Spread: bench.DefaultAutoSpread, Budget: f.budget}, nil
		}
		return n, nil, nil
	}
	n, err := strconv.Atoi(f.repeat)
	if err != nil || n < 1 {
		return 0, nil, usageErrorf("--repeat must be a number of at least 1, or auto; got %q", f.repeat)
	}
	if f.budget > 0 {
		return n, &bench.AutoRepeat{Spread: bench.DefaultAutoSpread, Budget: f.budget}, nil
	}
	return n, nil, nil
}

const (
	// quickRepeats: five repeats give a t-interval about 2.8 standard
	// errors wide on each side, against 4.3 with three.
	quickRepeats = 5
	fullRepeats  = 3
	// autoMaxRepeats bounds --repeat auto without --budget.
	autoMaxRepeats = 10
)

// benchPlan turns the flags into targets and workloads: the quick
// bench's, or --full's, or those named.
func benchPlan(f benchFlags, exe string) ([]bench.Target, []bench.Workload, error) {
	size := bench.Size(f.size)
	switch size {
	case bench.SizeTiny, bench.SizeSmall, bench.SizeDefault, bench.SizeLarge:
	default:
		return nil, nil, usageErrorf("unknown --size %q (use tiny, small, default or large)", f.size)
	}
	opts := bench.TargetOptions{Exe: exe, Size: size}
	targets := bench.QuickTargets(opts, f.peers)
	switch {
	case f.full && f.peers, len(f.targets) == 1 && f.targets[0] == "all":
		targets = bench.AllTargets(opts)
	case f.full:
		targets = bench.DefaultTargets(opts)
	case len(f.targets) > 0:
		// Named targets are taken from all, so that a named peer runs
		// even with --peers=false.
		var err error
		if targets, err = bench.SelectTargets(bench.SelectableTargets(opts), f.targets); err != nil {
			return nil, nil, usageErrorf("--targets: %v", err)
		}
	}
	if f.full && len(f.targets) > 0 && !(len(f.targets) == 1 && f.targets[0] == "all") {
		var err error
		if targets, err = bench.SelectTargets(bench.SelectableTargets(opts), f.targets); err != nil {
			return nil, nil, usageErrorf("--targets: %v", err)
		}
	}
	workloads := bench.QuickWorkloads()
	if f.full || (len(f.workloads) == 1 && f.workloads[0] == "all") {
		workloads = bench.Workloads()
	}
	if len(f.workloads) > 0 && !(len(f.workloads) == 1 && f.workloads[0] == "all") {
		workloads = nil
		for _, name := range f.workloads {
			w, ok := bench.WorkloadByName(strings.TrimSpace(name))
			if !ok {
				var known []string
				for _, w := range bench.Workloads() {
					known = append(known, w.Name())
				}
				return nil, nil, usageErrorf("--workloads: unknown workload %q (known: %s, all)", name, strings.Join(known, ", "))
			}
			workloads = append(workloads, w)
		}
	}
	for _, w := range workloads {
		switch w := w.(type) {
		case *bench.RandRW:
			w.FIO = f.fio
		case *bench.Bonnie:
			w.Program = f.bonnie
		}
	}
	return targets, workloads, nil
}

// defaultOutDir is where a bench without --out keeps its results: a
// dated directory in the current one, or, where that cannot be written,
// under $XDG_STATE_HOME (~/.local/state)/twincrypt.
func defaultOutDir(now time.Time) string {
	name := "twincrypt-bench-" + now.Format("20060102-150405")
	if probe, err := os.MkdirTemp(".", ".twincrypt-bench-probe-"); err == nil {
		os.Remove(probe)
		return name
	}
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(os.TempDir(), name)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "twincrypt", name)
}

func runBench(cmd *cobra.Command, f benchFlags) (err error) {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find own executable: %w", err)
	}
	targets, workloads, err := benchPlan(f, exe)
	if err != nil {
		return err
	}
	repeat, auto, err := benchRepeat(f)
	if err != nil {
		return err
	}
	if f.out == "" {
		f.out = defaultOutDir(time.Now())
	}
	run, err := startBench(cmd.Context(), f, stderr)
	if err != nil {
		return err
	}
	defer func() { err = run.end(err) }()
	ctx, ws := run.ctx, run.ws
	fmt.Fprintf(stderr, "our mounts run this binary: %s\n", exe)

	machine := bench.DetectMachine()
	machine.Twincrypt = buildVersion()
	live := false
	if fd, ok := stderr.(interface{ Fd() uintptr }); ok {
		live = term.IsTerminal(int(fd.Fd()))
	}
	progress := bench.NewProgress(stderr, live)
	res, runErr := bench.RunBench(ctx, bench.Config{
		Targets: targets, Workloads: workloads, Size: bench.Size(f.size), Repeat: repeat, Auto: auto,
		Work: ws.Dir, Lower: ws.Desc, Progress: progress, Machine: machine, Trace: f.trace,
	})
	progress.Close()
	fmt.Fprintln(stderr)
	bench.WriteSummary(stdout, res, summaryWidth(stdout))
	files, werr := bench.WriteOutputs(f.out, res)
	if len(files) > 0 {
		fmt.Fprintf(stderr, "results kept in %s: %s (took %s)\n", f.out, strings.Join(files, ", "),
			res.Finished.Sub(res.Started).Round(time.Second))
	}
	if werr != nil {
		runErr = errors.Join(runErr, fmt.Errorf("bench: write outputs: %w", werr))
	}
	if ctx.Err() != nil {
		return run.interrupted()
	}
	if runErr != nil {
		return runErr
	}
	failed, total := 0, len(res.Runs)
	for _, r := range res.Runs {
		if !r.OK() && !r.Skipped {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d runs failed (see Failures above)", failed, total)
	}
	if total == 0 {
		return errors.New("nothing ran: no target is available here (see the skipped lines above)")
	}
	return nil
}

func runBenchCompare(out io.Writer, oldPath, newPath string) error {
	old, err := bench.ReadResults(oldPath)
	if err != nil {
		return err
	}
	cur, err := bench.ReadResults(newPath)
	if err != nil {
		return err
	}
	bench.WriteCompare(out, old, cur, bench.Compare(old, cur))
	return nil
}

// summaryWidth is the width the tables are cut to: the terminal's, or 160
// columns when stdout is a file or a pipe.
func summaryWidth(w io.Writer) int {
	if f, ok := w.(interface{ Fd() uintptr }); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 40 {
			return cols
		}
	}
	return 160
}

// benchRun is what a bench and a scale run share around the runner: --out
// made before the run (an unwritable one refused now, not after it), a
// context that SIGINT, SIGTERM, SIGHUP and SIGPIPE cancel (the runner
// then unmounts and cleans up; the signals stay caught until end, so that
// a second Ctrl-C cannot kill the bench with its mounts in place), and
// the work directory.
//
// SIGPIPE is among them because `bench | tail` is how people watch a long
// run: when tail goes (Ctrl-C reaches it too), the next write to the pipe
// raises SIGPIPE, which by default kills a Go program writing to fd 1 or
// 2 at once, its mounts and its tmpfs left behind. Caught, the write
// fails with EPIPE instead and the bench stops as if interrupted.
type benchRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	sigs   chan os.Signal
	ws     *bench.Workspace
	keep   bool
	stderr io.Writer

	mu     sync.Mutex
	signal os.Signal // the first signal received, nil if none
}

// benchSignals are the signals that interrupt a bench.
var benchSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

func startBench(parent context.Context, f benchFlags, stderr io.Writer) (*benchRun, error) {
	// Caught before the first write, so that none can die of SIGPIPE.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, benchSignals...)
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			signal.Stop(sigs)
			return nil, usageErrorf("--out: %v", err)
		}
	}
	ws, err := bench.NewWorkspace(f.on)
	if err != nil {
		signal.Stop(sigs)
		return nil, err
	}
	fmt.Fprintf(stderr, "work directory %s: %s\n", ws.Dir, ws.Desc)
	ctx, cancel := context.WithCancel(parent)
	r := &benchRun{ctx: ctx, cancel: cancel, sigs: sigs, ws: ws, keep: f.keep, stderr: stderr}
	go func() {
		for sig := range r.sigs {
			if sig == syscall.SIGPIPE && !readerGone(1, 2) {
				// A pipe to one of the workloads' programs: that write
				// fails with EPIPE and its run says so; not an interrupt.
				continue
			}
			r.mu.Lock()
			first := r.signal == nil
			if first {
				r.signal = sig
			}
			r.mu.Unlock()
			if first {
				fmt.Fprintf(stderr, "\n%s: unmounting and cleaning up …\n", signalName(sig))
			}
			cancel()
		}
	}()
	return r, nil
}

// readerGone reports whether any of fds is a pipe or socket whose other
// end is closed: poll reports POLLERR on the write end of a pipe without
// reader, POLLHUP on a socket whose peer went. With SIGPIPE caught, Go
// delivers it for every fd, also for the pipes to the programs the
// workloads run, so the signal alone does not say that our output is gone.
func readerGone(fds ...int) bool {
	pfds := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		pfds[i] = unix.PollFd{Fd: int32(fd)}
	}
	if n, err := unix.Poll(pfds, 0); err != nil || n == 0 {
		return false
	}
	for _, p := range pfds {
		if p.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return true
		}
	}
	return false
}

// signalName is how the messages name a signal: SIGINT, SIGPIPE.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}

// interrupted is the error of a bench that a signal (or its parent's
// context) stopped: exit code 130 whatever the signal.
func (r *benchRun) interrupted() error {
	r.mu.Lock()
	sig := r.signal
	r.mu.Unlock()
	what := "bench interrupted"
	if sig != nil {
		what = "bench interrupted by " + signalName(sig)
	}
	return &classifiedError{class: errInterrupted, err: fmt.Errorf("%s; mounts and temporary files removed", what)}
}

// end releases the context and removes the work directory (or says where
// it was kept with --keep); err is the run's error, returned with the
// removal's joined to it. SIGPIPE stays ignored to the end: the last
// words (the error line) may go to the pipe that is gone.
func (r *benchRun) end(err error) error {
	r.cancel()
	defer func() {
		signal.Ignore(syscall.SIGPIPE)
		signal.Stop(r.sigs)
	}()
	if r.keep {
		fmt.Fprintf(r.stderr, "kept the work directory %s (%s)\n", r.ws.Dir, r.ws.Desc)
		return err
	}
	if cerr := r.ws.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: remove work directory: %w", cerr))
	}
	return err
}
