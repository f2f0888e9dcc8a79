package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/integration/bench"
)

type benchFlags struct {
	size      string
	repeat    int
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
data it wrote. --size scales them: tiny (for tests),
small (the default), default, large (the articles' sizes). How long a bench
of 3 repeats took on 2 shared cores with tmpfs below, with the six targets
that need nothing installed / with the five peers installed too:
  tiny     1 min 15 s / 3 min 20 s
  small    2 min 45 s / 7 min 40 s
  default  15 min / not timed
  large    not timed
Once the first repeat is done, the progress shows the time left and an ETA.

By default all lower data goes on a tmpfs mounted for the bench (as root;
three quarters of the available memory, used only as far as written), so
that every target stands on the same, fast ground; --on DIR puts it on a
real disk instead. Everything is unmounted and removed at the end, also on
Ctrl-C (--keep keeps the data).

Printed: medians with min–max, cost ratios to native and to the twin, the
cost of our mounts relative to the best FUSE peer of each row (when peers
ran), CPU seconds per GiB of the workload and of the daemon, and the per-op
latency of our mounts. --out DIR also writes report.md, results.csv, results.json and
the charts overhead.svg/png (each target's cost relative to native per
workload, log axis, bars up from 1x when slower and down when faster) and
latency.svg/png (per-op p50 bars with p99 whiskers, ops labelled with their
class). --compare OLD.json NEW.json prints what changed between two runs.

--scale N1,N2,... runs the scale harness instead of the workloads: N empty
files in one directory (flat) and in 1000 directories (tree), then ls -f,
ls -l (twice: cold, then warm), find, du and rm -rf, each on a fresh mount,
each timed and checked to see all N files, with the daemon's VmRSS/VmHWM
after each op. --out DIR writes scale.md (µs per file, flatness, memory),
scale.json and the charts scale-flat.svg/png, scale-tree.svg/png.

Exit status 1 when any run failed (the tables are printed all the same).

` + opClassHelp(),
		Example: `  twincrypt bench
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
	fl.StringVar(&f.size, "size", string(bench.SizeSmall), "workload size: tiny, small, default or large")
	fl.IntVar(&f.repeat, "repeat", 3, "repeat every workload on every target `N` times")
	fl.StringSliceVar(&f.targets, "targets", nil, "run only these targets (comma separated; \"dmcrypt\" and \"peers\" name groups)")
	fl.StringSliceVar(&f.workloads, "workloads", nil, "run only these workloads (comma separated)")
	fl.StringVar(&f.out, "out", "", "write report.md, results.csv, results.json and charts to `DIR`")
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

// benchPlan turns the flags into targets and workloads.
func benchPlan(f benchFlags, exe string) ([]bench.Target, []bench.Workload, error) {
	size := bench.Size(f.size)
	switch size {
	case bench.SizeTiny, bench.SizeSmall, bench.SizeDefault, bench.SizeLarge:
	default:
		return nil, nil, usageErrorf("unknown --size %q (use tiny, small, default or large)", f.size)
	}
	if f.repeat < 1 {
		return nil, nil, usageErrorf("--repeat must be at least 1")
	}
	opts := bench.TargetOptions{Exe: exe, Size: size}
	targets := bench.DefaultTargets(opts)
	if f.peers {
		targets = bench.AllTargets(opts)
	}
	if len(f.targets) > 0 {
		// Named targets are taken from all, so that a named peer runs
		// even with --peers=false.
		var err error
		if targets, err = bench.SelectTargets(bench.SelectableTargets(opts), f.targets); err != nil {
			return nil, nil, usageErrorf("--targets: %v", err)
		}
	}
	workloads := bench.Workloads()
	if len(f.workloads) > 0 {
		workloads = nil
		for _, name := range f.workloads {
			w, ok := bench.WorkloadByName(strings.TrimSpace(name))
			if !ok {
				var known []string
				for _, w := range bench.Workloads() {
					known = append(known, w.Name())
				}
				return nil, nil, usageErrorf("--workloads: unknown workload %q (known: %s)", name, strings.Join(known, ", "))
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
		Targets: targets, Workloads: workloads, Size: bench.Size(f.size), Repeat: f.repeat,
		Work: ws.Dir, Lower: ws.Desc, Progress: progress, Machine: machine, Trace: f.trace,
	})
	progress.Close()
	fmt.Fprintln(stderr)
	bench.WriteSummary(stdout, res, summaryWidth(stdout))
	if f.out != "" {
		files, werr := bench.WriteOutputs(f.out, res)
		for i := range files {
			files[i] = filepath.Join(f.out, files[i])
		}
		if len(files) > 0 {
			fmt.Fprintf(stderr, "wrote %s\n", strings.Join(files, ", "))
		}
		if werr != nil {
			runErr = errors.Join(runErr, fmt.Errorf("bench: write outputs: %w", werr))
		}
	}
	if ctx.Err() != nil {
		return errors.New("bench interrupted; mounts and temporary files removed")
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
// context that Ctrl-C and SIGTERM cancel (the runner then unmounts and
// cleans up; the signals stay caught until end, so that a second Ctrl-C
// cannot kill the bench with its mounts in place), and the work directory.
type benchRun struct {
	ctx    context.Context
	cancel context.CancelFunc
	sigs   chan os.Signal
	ws     *bench.Workspace
	keep   bool
	stderr io.Writer
}

func startBench(parent context.Context, f benchFlags, stderr io.Writer) (*benchRun, error) {
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return nil, usageErrorf("--out: %v", err)
		}
	}
	ws, err := bench.NewWorkspace(f.on)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "work directory %s: %s\n", ws.Dir, ws.Desc)
	ctx, cancel := context.WithCancel(parent)
	r := &benchRun{ctx: ctx, cancel: cancel, sigs: make(chan os.Signal, 1), ws: ws, keep: f.keep, stderr: stderr}
	signal.Notify(r.sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for range r.sigs {
			if ctx.Err() == nil {
				fmt.Fprintln(stderr, "\ninterrupted: unmounting and cleaning up …")
			}
			cancel()
		}
	}()
	return r, nil
}

// end releases the signals and the context, and removes the work
// directory (or says where it was kept with --keep); err is the run's
// error, returned with the removal's joined to it.
func (r *benchRun) end(err error) error {
	signal.Stop(r.sigs)
	r.cancel()
	if r.keep {
		fmt.Fprintf(r.stderr, "kept the work directory %s (%s)\n", r.ws.Dir, r.ws.Desc)
		return err
	}
	if cerr := r.ws.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("bench: remove work directory: %w", cerr))
	}
	return err
}
