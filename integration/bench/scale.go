package bench

// The scale harness: how each target copes with many files. N empty files
// are created in one directory ("flat") or spread over a tree of
// directories ("tree"); then each listing op runs on a fresh mount (so
// that every op starts with a cold daemon and a cold kernel cache of the
// mount, and the daemon's memory after it is what that op made it keep),
// and finally rm -rf removes it all. Each op is timed and the daemon's
// VmRSS and VmHWM are read after it. The ops are the real programs a user
// runs (ls, find, du, rm) with their output counted, so that every target
// is also checked to show exactly the N files.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Shape is how the N files of a scale run are laid out.
type Shape string

const (
	// ShapeFlat is N files in one directory.
	ShapeFlat Shape = "flat"
	// ShapeTree is N files spread evenly over up to 1000 directories
	// (treeDirs) below one directory.
	ShapeTree Shape = "tree"
)

// Scale ops, in the order they run.
const (
	OpCreate  = "create"    // N empty files (open O_CREAT|O_EXCL + close), and the tree's directories
	OpLsF     = "ls-f"      // ls -f (ls -fR on the tree): readdir only
	OpLsL     = "ls-l"      // ls -l (ls -lR): readdir + stat and xattrs of every file
	OpLsLWarm = "ls-l-warm" // the same ls -l again on the same mount: what the caches save
	OpFind    = "find"      // find DIR
	OpDu      = "du"        // du -s --inodes DIR
	OpRm      = "rm-rf"     // rm -rf DIR
)

// ScaleOps lists the ops in the order they run.
var ScaleOps = []string{OpCreate, OpLsF, OpLsL, OpLsLWarm, OpFind, OpDu, OpRm}

// treeDirs is the number of directories of the tree shape (fewer when N
// is small: at least 10 files a directory).
func treeDirs(n int) int {
	return max(1, min(1000, n/10))
}

// ScaleConfig is one scale run.
type ScaleConfig struct {
	Targets []Target
	Counts  []int   // file counts, run in this order
	Shapes  []Shape // flat, tree
	Repeat  int     // runs of each (count, shape, target); medians are reported
	// Ops, when not empty, leaves out the listing ops not in it (create
	// and rm-rf always run: they make and remove the files).
	Ops     []string
	Work    string // where targets keep their data (the bench workspace)
	Lower   string // what Work is on, for the report
	Machine Machine
	Command string // the command line, for the report
	// Log gets one line per op as it finishes; nil for none.
	Log io.Writer
}

// ScaleStep is one op of one run.
type ScaleStep struct {
	Target string  `json:"target"`
	Shape  Shape   `json:"shape"`
	Files  int     `json:"files"`
	Repeat int     `json:"repeat"`
	Op     string  `json:"op"`
	Sec    float64 `json:"seconds"`
	// Found is how many files (and, on the tree, directories) the op
	// showed; -1 for create and rm -rf, which check themselves.
	Found int `json:"found"`
	// DaemonCPU is the user+system CPU time (s) the daemon spent during
	// the op: on a shared machine it is steadier than the wall time.
	DaemonCPU float64 `json:"daemon_cpu_s"`
	// The daemon's memory (KiB): VmRSS when the op started (just mounted,
	// or after the op before on the same mount), VmRSS and VmHWM (its
	// peak since it started) when the op ended. 0 without a daemon.
	StartRSSKiB int64  `json:"start_rss_kib"`
	RSSKiB      int64  `json:"rss_kib"`
	HWMKiB      int64  `json:"hwm_kib"`
	Err         string `json:"error,omitempty"`
}

// PerFile is the op's time per file.
func (s ScaleStep) PerFile() time.Duration {
	return time.Duration(s.Sec / float64(s.Files) * float64(time.Second))
}

// ScaleResults is everything a scale run measured.
type ScaleResults struct {
	Date    time.Time         `json:"date"`
	Machine Machine           `json:"machine"`
	Lower   string            `json:"lower"`
	Command string            `json:"command"`
	Counts  []int             `json:"counts"`
	Shapes  []Shape           `json:"shapes"`
	Targets []string          `json:"targets"`
	Skipped map[string]string `json:"skipped,omitempty"`
	Steps   []ScaleStep       `json:"steps"`
}

// daemonPIDer is a target served by a process whose memory can be read.
type daemonPIDer interface{ DaemonPID() int }

func (t *twincrypt) DaemonPID() int { return t.d.pid }
func (p *peer) DaemonPID() int      { return p.d.pid }

// procMem returns VmRSS and VmHWM of pid in KiB (0, 0 when pid is gone).
func procMem(pid int) (rss, hwm int64) {
	if pid <= 0 {
		return 0, 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm
}

func targetMem(t Target) (rss, hwm int64) {
	if d, ok := t.(daemonPIDer); ok {
		return procMem(d.DaemonPID())
	}
	return 0, 0
}

// RunScale runs every (count, shape) on every available target, the
// targets interleaved, and returns what it measured. A failed op is
// recorded with its error and ends that target's run; the others go on.
func RunScale(ctx context.Context, cfg ScaleConfig) (*ScaleResults, error) {
	res := &ScaleResults{
		Date: time.Now().UTC(), Machine: cfg.Machine, Lower: cfg.Lower, Command: cfg.Command,
		Counts: cfg.Counts, Shapes: cfg.Shapes, Skipped: map[string]string{},
	}
	logf := func(format string, a ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", a...)
		}
	}
	var targets []Target
	for _, t := range cfg.Targets {
		if err := t.Available(); err != nil {
			res.Skipped[t.Name()] = err.Error()
			logf("skip %s: %v", t.Name(), err)
			continue
		}
		targets = append(targets, t)
		res.Targets = append(res.Targets, t.Name())
	}
	repeat := max(1, cfg.Repeat)
	var errs []error
	for _, n := range cfg.Counts {
		for _, shape := range cfg.Shapes {
			for r := 0; r < repeat; r++ {
				// As RunBench: each repeat starts one target later, and
				// after a syncfs of the work filesystem.
				for _, t := range rotate(targets, r) {
					if ctx.Err() != nil {
						return res, ctx.Err()
					}
					settle(cfg.Work)
					work := filepath.Join(cfg.Work, fmt.Sprintf("scale-%s-%s-%d-%d", t.Name(), shape, n, r))
					steps, err := scaleRun(ctx, t, work, shape, n, cfg.Ops, func(s ScaleStep) {
						logf("%-10s %-4s %8d  %-9s %9.3f s %8.2f µs/file  found %-8d  daemon CPU %7.2f µs/file  RSS %7.1f MiB (peak %.1f)%s",
							s.Target, s.Shape, s.Files, s.Op, s.Sec, float64(s.PerFile())/1e3, s.Found, s.DaemonCPU/float64(s.Files)*1e6,
							float64(s.RSSKiB)/1024, float64(s.HWMKiB)/1024, errSuffix(s.Err))
					})
					for i := range steps {
						steps[i].Repeat = r
					}
					res.Steps = append(res.Steps, steps...)
					if err != nil {
						errs = append(errs, fmt.Errorf("%s %s %d: %w", t.Name(), shape, n, err))
					}
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "  ERROR " + e
}

// scaleRun is one (target, shape, count): set up, create, each listing on
// a fresh mount, rm -rf, clean up.
func scaleRun(ctx context.Context, t Target, work string, shape Shape, n int, only []string, done func(ScaleStep)) (steps []ScaleStep, err error) {
	if err := mkdirs(work); err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, t.Cleanup(), os.RemoveAll(work))
	}()
	if err := t.Setup(ctx, work); err != nil {
		return nil, fmt.Errorf("setup: %w", err)
	}
	record := func(s ScaleStep) {
		s.Target, s.Shape, s.Files = t.Name(), shape, n
		steps = append(steps, s)
		done(s)
	}
	// Each element of plan is run on its own mount; ls -l and its warm
	// repeat share one.
	plan := [][]string{{OpCreate}, {OpLsF}, {OpLsL, OpLsLWarm}, {OpFind}, {OpDu}, {OpRm}}
	for _, ops := range plan {
		if len(only) > 0 {
			ops = slices.DeleteFunc(slices.Clone(ops), func(op string) bool {
				return op != OpCreate && op != OpRm && !slices.Contains(only, op)
			})
			if len(ops) == 0 {
				continue
			}
		}
		mnt, err := t.Mount(ctx)
		if err != nil {
			return steps, fmt.Errorf("mount: %w", err)
		}
		dir := filepath.Join(mnt, "scale")
		for _, op := range ops {
			s := ScaleStep{Op: op}
			s.StartRSSKiB, _ = targetMem(t)
			cpu0 := t.DaemonCPU()
			start := time.Now()
			s.Found, err = scaleOp(ctx, op, dir, shape, n)
			s.Sec = time.Since(start).Seconds()
			s.DaemonCPU = (t.DaemonCPU() - cpu0).Seconds()
			s.RSSKiB, s.HWMKiB = targetMem(t)
			if err != nil {
				s.Err = err.Error()
			}
			record(s)
			if err != nil {
				return steps, errors.Join(fmt.Errorf("%s: %w", op, err), t.Unmount(ctx))
			}
		}
		if err := t.Unmount(ctx); err != nil {
			return steps, fmt.Errorf("unmount: %w", err)
		}
	}
	return steps, nil
}

// MergeScaleResults joins the results of scale runs made apart (in
// parallel, or one count at a time) into one: the first run's date,
// machine and command, the counts, shapes and targets of all in order.
func MergeScaleResults(runs ...*ScaleResults) *ScaleResults {
	if len(runs) == 0 {
		return &ScaleResults{}
	}
	out := *runs[0]
	out.Skipped = map[string]string{}
	out.Counts, out.Shapes, out.Targets, out.Steps = nil, nil, nil, nil
	var cmds []string
	for _, r := range runs {
		for _, n := range r.Counts {
			if !slices.Contains(out.Counts, n) {
				out.Counts = append(out.Counts, n)
			}
		}
		for _, s := range r.Shapes {
			if !slices.Contains(out.Shapes, s) {
				out.Shapes = append(out.Shapes, s)
			}
		}
		for _, t := range r.Targets {
			if !slices.Contains(out.Targets, t) {
				out.Targets = append(out.Targets, t)
			}
		}
		for k, v := range r.Skipped {
			out.Skipped[k] = v
		}
		out.Steps = append(out.Steps, r.Steps...)
		if !slices.Contains(cmds, r.Command) {
			cmds = append(cmds, r.Command)
		}
	}
	for _, t := range out.Targets {
		delete(out.Skipped, t)
	}
	slices.Sort(out.Counts)
	// Keep the targets in the harness's order (native, ours, peers).
	order := map[string]int{}
	for i, t := range SelectableTargets(TargetOptions{}) {
		order[t.Name()] = i
	}
	slices.SortStableFunc(out.Targets, func(a, b string) int { return order[a] - order[b] })
	out.Command = strings.Join(cmds, "`; `")
	return &out
}

// ScaleExpected is the count an op must find: the files, plus the tree's
// directories where the op lists those too, plus dir itself for find and
// du.
func ScaleExpected(op string, shape Shape, n int) int {
	dirs := 0
	if shape == ShapeTree {
		dirs = treeDirs(n)
	}
	switch op {
	case OpLsF:
		return n + dirs
	case OpLsL, OpLsLWarm:
		return n
	case OpFind, OpDu:
		return n + dirs + 1
	}
	return -1
}

// scaleOp runs op on dir and returns what it found, checked against what
// it must find.
func scaleOp(ctx context.Context, op, dir string, shape Shape, n int) (int, error) {
	recursive := shape == ShapeTree
	var found int
	var err error
	switch op {
	case OpCreate:
		return -1, scaleCreate(dir, shape, n)
	case OpRm:
		if _, err := runCounting(ctx, func(string) bool { return false }, "rm", "-rf", dir); err != nil {
			return -1, err
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			return -1, fmt.Errorf("%s still there after rm -rf (%v)", dir, err)
		}
		return -1, nil
	case OpLsF:
		args := []string{"-f"}
		if recursive {
			args = []string{"-f", "-R"}
		}
		// Every line but ".", "..", the blank lines and the "DIR:"
		// headers of -R is a name.
		found, err = runCounting(ctx, func(l string) bool {
			return l != "" && l != "." && l != ".." && !strings.HasSuffix(l, ":")
		}, "ls", append(args, dir)...)
	case OpLsL, OpLsLWarm:
		args := []string{"-l", "--color=never"}
		if recursive {
			args = append(args, "-R")
		}
		found, err = runCounting(ctx, func(l string) bool { return strings.HasPrefix(l, "-") }, "ls", append(args, dir)...)
	case OpFind:
		found, err = runCounting(ctx, func(l string) bool { return l != "" }, "find", dir)
	case OpDu:
		_, err = runCounting(ctx, func(l string) bool {
			f := strings.Fields(l)
			if len(f) > 0 {
				if v, perr := strconv.Atoi(f[0]); perr == nil {
					found = v
				}
			}
			return false
		}, "du", "-s", "--inodes", dir)
	default:
		return 0, fmt.Errorf("unknown scale op %q", op)
	}
	if err != nil {
		return found, err
	}
	if want := ScaleExpected(op, shape, n); found != want {
		return found, fmt.Errorf("found %d, want %d", found, want)
	}
	return found, nil
}

// scaleName is the name of file i: short, like most real names, and
// sorting as created.
func scaleName(i int) string { return fmt.Sprintf("f%07d", i) }

// scaleCreate creates dir and n empty files in it (flat) or below it in
// treeDirs(n) directories, as touch does.
func scaleCreate(dir string, shape Shape, n int) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	create := func(p string) error {
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return &os.PathError{Op: "create", Path: p, Err: err}
		}
		return unix.Close(fd)
	}
	if shape == ShapeFlat {
		for i := 0; i < n; i++ {
			if err := create(filepath.Join(dir, scaleName(i))); err != nil {
				return err
			}
		}
		return nil
	}
	dirs := treeDirs(n)
	for d := 0; d < dirs; d++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%04d", d))
		if err := os.Mkdir(sub, 0o755); err != nil {
			return err
		}
		// Directory d gets files d, d+dirs, d+2*dirs, ...: n in all.
		for i := d; i < n; i += dirs {
			if err := create(filepath.Join(sub, scaleName(i))); err != nil {
				return err
			}
		}
	}
	return nil
}

// runCounting runs a program (C locale) and counts the lines of its
// output for which count returns true.
func runCounting(ctx context.Context, count func(string) bool, name string, args ...string) (int, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if count(sc.Text()) {
			n++
		}
	}
	scanErr := sc.Err()
	if scanErr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	if err := cmd.Wait(); err != nil {
		msg := oneLine(stderr.String())
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return n, fmt.Errorf("%s: %w: %s", name, err, msg)
	}
	return n, scanErr
}

// scaleKey identifies one cell of the results.
type scaleKey struct {
	target string
	shape  Shape
	files  int
	op     string
}

// scaleCell is the median of a cell's repeats (of its successful runs).
type scaleCell struct {
	sec, cpu         float64 // wall and daemon CPU seconds
	startRSS, rss    int64   // KiB
	hwm              int64   // KiB
	failed, finished int
}

// cells aggregates the steps: the median time and memory of each cell.
func (r *ScaleResults) cells() map[scaleKey]scaleCell {
	group := map[scaleKey][]ScaleStep{}
	for _, s := range r.Steps {
		k := scaleKey{s.Target, s.Shape, s.Files, s.Op}
		group[k] = append(group[k], s)
	}
	out := map[scaleKey]scaleCell{}
	for k, ss := range group {
		var secs, cpus, start, rss, hwm []float64
		c := scaleCell{}
		for _, s := range ss {
			if s.Err != "" {
				c.failed++
				continue
			}
			c.finished++
			secs = append(secs, s.Sec)
			cpus = append(cpus, s.DaemonCPU)
			start = append(start, float64(s.StartRSSKiB))
			rss = append(rss, float64(s.RSSKiB))
			hwm = append(hwm, float64(s.HWMKiB))
		}
		if c.finished > 0 {
			c.sec, c.cpu = medianF(secs), medianF(cpus)
			c.startRSS, c.rss, c.hwm = int64(medianF(start)), int64(medianF(rss)), int64(medianF(hwm))
		}
		out[k] = c
	}
	return out
}

func medianF(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
