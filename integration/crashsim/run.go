package crashsim

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	tcfs "github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/fs/fsck"
	"github.com/twincrypt/twincrypt/integration"
)

// Variant is one kind of volume the workloads run on.
type Variant struct {
	Name           string
	Cipher         string
	KeyBytes       int
	PlaintextNames bool
}

// Variants: both ciphers with encrypted (and long) names, and plaintext
// names.
var Variants = []Variant{
	{Name: "xts", Cipher: "aes-xts", KeyBytes: 64},
	{Name: "cbc", Cipher: "aes-cbc", KeyBytes: 32},
	{Name: "xts-plainnames", Cipher: "aes-xts", KeyBytes: 64, PlaintextNames: true},
}

// Workload is an application pattern. Everything it changes is under its
// directory WorkDir, which Setup creates (before recording); Run is
// recorded.
type Workload struct {
	Name  string
	Setup func(e *Env) error
	Run   func(e *Env) error
}

// WorkDir is the workloads' directory, relative to the mount.
const WorkDir = "w"

// Options size a run.
type Options struct {
	// MaxStates is the number of crash states checked per workload and
	// variant at most.
	MaxStates int
	Subsets   int
	Seed      int64
	// Out receives progress lines (nil: none).
	Out io.Writer
	// Only, if set, runs only the workloads and variants it names.
	Only func(workload, variant string) bool
	// StateFilter, if set, checks only the states it accepts (regression
	// tests replay one state).
	StateFilter func(i int, s State) bool
	// KeepDir, if set, receives a copy of every state with a violation
	// (its lower directory as materialised, before the checks touched
	// it), the violations and the log up to the crash.
	KeepDir string
}

// Violation is one broken promise in one crash state.
type Violation struct {
	Workload, Variant string
	State             int
	Desc              string
	Msg               string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s/%s state %d (%s): %s", v.Workload, v.Variant, v.State, v.Desc, v.Msg)
}

// Result counts states and violations per workload and variant.
type Result struct {
	Explored map[string]int // "workload/variant"
	// Distinct is how many distinct states the generator found (Explored
	// is a sample of them).
	Distinct   map[string]int
	Ops        map[string]int
	Violations []Violation
}

// Total is the number of states explored.
func (r *Result) Total() int {
	n := 0
	for _, v := range r.Explored {
		n += v
	}
	return n
}

// Summary is the closing line.
func (r *Result) Summary() string {
	return fmt.Sprintf("crash states: %d explored, %d violations", r.Total(), len(r.Violations))
}

var passphrase = integration.TestPass

// Run runs every workload on every variant under base (a scratch
// directory) and checks its crash states.
func Run(base string, workloads []Workload, opt Options) (*Result, error) {
	res := &Result{Explored: map[string]int{}, Distinct: map[string]int{}, Ops: map[string]int{}}
	for _, w := range workloads {
		for _, v := range Variants {
			if opt.Only != nil && !opt.Only(w.Name, v.Name) {
				continue
			}
			t0 := time.Now()
			n, distinct, nops, viol, err := runOne(filepath.Join(base, w.Name+"-"+v.Name), w, v, opt)
			key := w.Name + "/" + v.Name
			res.Explored[key] += n
			res.Distinct[key] += distinct
			res.Ops[key] += nops
			res.Violations = append(res.Violations, viol...)
			if err != nil {
				return res, fmt.Errorf("%s: %w", key, err)
			}
			if opt.Out != nil {
				fmt.Fprintf(opt.Out, "%-32s %5d ops %6d states (of %6d) %3d violations  %v\n", key, nops, n, distinct, len(viol), time.Since(t0).Round(time.Millisecond))
				for _, x := range viol {
					fmt.Fprintf(opt.Out, "  VIOLATION %s\n", x)
				}
			}
		}
	}
	return res, nil
}

// recorded is one workload's recording.
type recorded struct {
	env     *Env
	start   *Tree
	ops     []Op
	view    map[string]entry // the plaintext tree before the workload
	conf    []byte
	cfg     *config.Config
	master  []byte
	modelOK string // "" or how the replay differs from the real end state
}

func record(dir string, w Workload, v Variant) (*recorded, error) {
	backing, recMnt, mnt := filepath.Join(dir, "backing"), filepath.Join(dir, "lower"), filepath.Join(dir, "mnt")
	scratch := filepath.Join(dir, "scratch")
	for _, d := range []string{backing, recMnt, mnt, scratch} {
		if err := os.MkdirAll(d, 0755); err != nil {
			return nil, err
		}
	}
	cfg, master, err := config.Create(backing, passphrase, config.Options{
		Cipher: v.Cipher, KeyBytes: v.KeyBytes, PlaintextNames: v.PlaintextNames,
		KDF: integration.CheapKDF(), Creator: "twincrypt crashsim",
	})
	if err != nil {
		return nil, err
	}
	rec, err := NewRecorder(backing, recMnt)
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	log := &integration.SyncBuffer{}
	srv, err := integration.MountDir(mnt, tcfs.Options{Lower: recMnt, Config: cfg, MasterKey: master, Log: zerolog.New(log)})
	if err != nil {
		return nil, err
	}
	mounted := true
	defer func() {
		if mounted {
			integration.UnmountDir(srv, mnt)
		}
	}()
	e := &Env{Mnt: mnt, Scratch: scratch, rec: rec}
	if err := makeBystanders(e); err != nil {
		return nil, fmt.Errorf("bystanders: %w", err)
	}
	if err := os.Mkdir(e.Path(WorkDir), 0755); err != nil {
		return nil, err
	}
	if w.Setup != nil {
		if err := w.Setup(e); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	view, err := readView(mnt)
	if err != nil {
		return nil, err
	}
	start, err := rec.Start()
	if err != nil {
		return nil, err
	}
	runErr := w.Run(e)
	ops := rec.Stop()
	mounted = false
	if err := integration.UnmountDir(srv, mnt); err != nil {
		return nil, err
	}
	if runErr != nil {
		return nil, fmt.Errorf("run: %w\n%s", runErr, log.String())
	}
	r := &recorded{env: e, start: start, ops: ops, view: view, cfg: cfg, master: master}
	if r.conf, err = os.ReadFile(filepath.Join(backing, config.FileName)); err != nil {
		return nil, err
	}
	// The recorder and the model against the real end state: replaying
	// the whole log on the snapshot must give the backing directory.
	end := start.Clone()
	for _, o := range ops {
		end.Apply(o)
	}
	r.modelOK = Diff(end, backing)
	return r, nil
}

func runOne(dir string, w Workload, v Variant, opt Options) (n, distinct, nops int, viol []Violation, err error) {
	defer os.RemoveAll(dir)
	r, err := record(dir, w, v)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	if r.modelOK != "" {
		viol = append(viol, Violation{Workload: w.Name, Variant: v.Name, State: -1, Desc: "full replay", Msg: "the log replayed does not give the real end state: " + r.modelOK})
	}
	states, distinct := Generate(r.ops, GenOptions{Max: opt.MaxStates, Seed: opt.Seed, Subsets: opt.Subsets}, r.env.promiseKey)
	for i, s := range states {
		if opt.StateFilter != nil && !opt.StateFilter(i, s) {
			continue
		}
		n++
		msgs, err := r.check(filepath.Join(dir, "state"), s)
		if len(msgs) > 0 && opt.KeepDir != "" {
			r.keep(filepath.Join(opt.KeepDir, fmt.Sprintf("%s-%s-%d", w.Name, v.Name, i)), s, msgs)
		}
		if err != nil {
			return n, distinct, len(r.ops), viol, fmt.Errorf("state %d (%s): %w", i, s.Desc, err)
		}
		for _, m := range msgs {
			viol = append(viol, Violation{Workload: w.Name, Variant: v.Name, State: i, Desc: s.Desc, Msg: m})
		}
	}
	return n, distinct, len(r.ops), viol, nil
}

// check materialises s and checks every promise on it. The error is for
// failures of the harness itself.
func (r *recorded) check(dir string, s State) (msgs []string, err error) {
	os.RemoveAll(dir)
	lower, mnt := filepath.Join(dir, "lower"), filepath.Join(dir, "mnt")
	for _, d := range []string{lower, mnt} {
		if err := os.MkdirAll(d, 0755); err != nil {
			return nil, err
		}
	}
	defer os.RemoveAll(dir)
	tree := s.Build(r.start, r.ops)
	paths, err := tree.Materialise(lower)
	if err != nil {
		return nil, fmt.Errorf("materialise: %w", err)
	}
	inflight := s.InFlight(r.ops)
	bad := func(f string, a ...any) { msgs = append(msgs, fmt.Sprintf(f, a...)) }

	// The config: byte for byte, and it unlocks.
	conf, err := os.ReadFile(filepath.Join(lower, config.FileName))
	if err != nil || !bytes.Equal(conf, r.conf) {
		bad("config changed or gone (%v)", err)
		return msgs, nil
	}
	cfg, err := config.Load(lower)
	if err != nil {
		bad("config does not load: %v", err)
		return msgs, nil
	}
	master, err := cfg.Unlock(passphrase)
	if err != nil || !bytes.Equal(master, r.master) {
		bad("config does not unlock to the master key: %v", err)
		return msgs, nil
	}

	// fsck: findings only on what was in flight.
	rep, err := fsck.Check(lower, cfg, master, fsck.Options{})
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	for _, p := range rep.Problems {
		id, ok := paths[p.Lower]
		pid, pok := paths[filepath.Dir(p.Lower)]
		if (ok && inflight[id]) || (pok && inflight[pid]) {
			continue
		}
		bad("fsck %s on %s (%s), not in flight", p.Kind, p.Lower, p.Plain)
	}

	// The mount: promises, the untouched, the applications' checks.
	log := &integration.SyncBuffer{}
	srv, err := integration.MountDir(mnt, tcfs.Options{Lower: lower, Config: cfg, MasterKey: master, Log: zerolog.New(log)})
	if err != nil {
		bad("mount: %v", err)
		return msgs, nil
	}
	view, verr := readView(mnt)
	if verr != nil {
		// Damage inside the workload's directory is allowed; read what
		// is outside it.
		view = map[string]entry{}
		ents, _ := os.ReadDir(mnt)
		for _, de := range ents {
			if de.Name() == WorkDir {
				view[WorkDir] = entry{mode: os.ModeDir | 0755}
				continue
			}
			sub, err := readView(filepath.Join(mnt, de.Name()))
			if err != nil {
				bad("reading %s: %v", de.Name(), err)
			}
			fi, _ := os.Lstat(filepath.Join(mnt, de.Name()))
			if fi != nil {
				view[de.Name()] = entry{mode: fi.Mode()}
				if fi.Mode().IsRegular() {
					c, _ := os.ReadFile(filepath.Join(mnt, de.Name()))
					view[de.Name()] = entry{mode: fi.Mode(), content: c}
				}
			}
			for k, v := range sub {
				view[filepath.Join(de.Name(), k)] = v
			}
		}
	}
	for _, m := range compareUntouched(r.view, view, WorkDir) {
		bad("%s", m)
	}
	for _, m := range r.env.checkPromises(mnt, s.Crash) {
		bad("%s", m)
	}
	for _, c := range r.env.checks {
		if err := c.f(mnt, s.Crash); err != nil {
			bad("%s: %v", c.name, err)
		}
	}
	if uerr := integration.UnmountDir(srv, mnt); uerr != nil {
		return msgs, uerr
	}
	if len(msgs) > 0 && strings.TrimSpace(log.String()) != "" {
		bad("(mount log: %s)", truncate(log.String(), 2000))
	}

	// fsck --repair, then clean; the untouched lower files as they were.
	if _, err := fsck.Check(lower, cfg, master, fsck.Options{Repair: true}); err != nil {
		return nil, fmt.Errorf("fsck --repair: %w", err)
	}
	rep, err = fsck.Check(lower, cfg, master, fsck.Options{})
	if err != nil {
		return nil, fmt.Errorf("fsck after repair: %w", err)
	}
	for _, p := range rep.Problems {
		if !p.Quarantined {
			bad("after fsck --repair: %s on %s (%s)", p.Kind, p.Lower, p.Plain)
		}
	}
	for rel, id := range paths {
		n := tree.Inodes[id]
		if inflight[id] || n.Type != syscall.S_IFREG {
			continue
		}
		b, err := os.ReadFile(filepath.Join(lower, rel))
		if err != nil || !bytes.Equal(b, n.Content()) {
			bad("untouched lower file %s changed by fsck --repair (%v)", rel, err)
		}
	}
	return msgs, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// keep writes state s (materialised again), msgs and the log to dir.
func (r *recorded) keep(dir string, s State, msgs []string) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "lower"), 0755); err != nil {
		return
	}
	s.Build(r.start, r.ops).Materialise(filepath.Join(dir, "lower"))
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", s.Desc)
	for _, m := range msgs {
		fmt.Fprintf(&b, "%s\n", m)
	}
	b.WriteString("\nlog (K: kept in this state):\n")
	for i, o := range r.ops {
		mark := " "
		if i < s.Crash && s.Keep[i] {
			mark = "K"
		}
		if i == s.Crash {
			b.WriteString("---- crash ----\n")
		}
		fmt.Fprintf(&b, "%s %4d %s\n", mark, i, o)
	}
	os.WriteFile(filepath.Join(dir, "README"), []byte(b.String()), 0644)
	os.WriteFile(filepath.Join(dir, "master.hex"), []byte(fmt.Sprintf("%x\n", r.master)), 0600)
}
