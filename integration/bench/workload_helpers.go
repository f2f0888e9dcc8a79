package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// scale holds one value per Size.
type scale[T any] struct{ tiny, small, dflt, large T }

// pick returns the value for size; an empty or unknown size counts as
// SizeSmall, the default run.
func (s scale[T]) pick(size Size) T {
	switch size {
	case SizeTiny:
		return s.tiny
	case SizeDefault:
		return s.dflt
	case SizeLarge:
		return s.large
	default:
		return s.small
	}
}

const oneMiB = 1 << 20

// mibps is a rate in MiB/s, 0 when d is 0.
func mibps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / oneMiB / d.Seconds()
}

// perSecond is a rate in operations per second, 0 when d is 0.
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// threadCPU is the user+system CPU time of the calling OS thread.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stopwatch adds up the wall time and the CPU time of a workload's
// measured parts.
//
// The CPU of work done in Go is the CPU of the calling OS thread
// (RUSAGE_THREAD): Run locks its goroutine to its thread, so that thread
// runs the workload's loop and every system call it makes, kernel time
// included. It is an approximation: it leaves out the Go runtime's own
// threads (garbage collector workers, which the workloads keep idle by
// reusing buffers) and it must leave out the rest of the process, since
// the FUSE daemon under test may be serving from this very process
// (its CPU is the target's DaemonCPU). The CPU of child processes is
// exact: their rusage at exit, which includes the children they waited
// for (a shell pipeline).
type stopwatch struct {
	wall, cpu time.Duration
	t0        time.Time
	c0        time.Duration
}

func (s *stopwatch) start() {
	s.c0 = threadCPU()
	s.t0 = time.Now()
}

func (s *stopwatch) stop() {
	s.wall += time.Since(s.t0)
	s.cpu += threadCPU() - s.c0
}

// lap runs f measured and returns its wall time.
func (s *stopwatch) lap(f func() error) (time.Duration, error) {
	w0 := s.wall
	s.start()
	err := f()
	s.stop()
	return s.wall - w0, err
}

// childCPU is the user+system CPU of an exited process.
func childCPU(ps *os.ProcessState) time.Duration {
	if ps == nil {
		return 0
	}
	return ps.UserTime() + ps.SystemTime()
}

// lookProgram returns the path of an installed program, or "" when it is not
// installed or when off (a workload told to use its Go implementation).
func lookProgram(name string, off bool) string {
	if off {
		return ""
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return ""
	}
	return p
}

// shellCmd is a script that /bin/sh runs in dir, where the positional
// parameters "$1"... are args; run returns its wall and CPU time.
//
// The child never starts in dir: Go forks with vfork, and a child that
// does chdir into a FUSE mount served by this very process, before exec,
// can deadlock with the parent (stopped until the exec) that the daemon
// may need. So the child is /bin/sh started in "/", and the shell, a
// separate process by then, changes into dir.
type shellCmd struct {
	dir    string
	script string
	args   []string
	stdin  io.Reader
	stdout io.Writer
	env    []string // added to the environment
}

func (c shellCmd) run(ctx context.Context) (wall, cpu time.Duration, err error) {
	argv := append([]string{"-c", `cd "$1" || exit 126; shift; ` + c.script, "sh", c.dir}, c.args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", argv...)
	cmd.Dir = "/"
	cmd.Env = append(append(os.Environ(), "LC_ALL=C", "TZ=UTC"), c.env...)
	cmd.Stdin = c.stdin
	cmd.Stdout = c.stdout
	var stderr tailBuffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 10 * time.Second
	t0 := time.Now()
	err = cmd.Run()
	wall = time.Since(t0)
	cpu = childCPU(cmd.ProcessState)
	if err != nil {
		// The command as a reader would type it, long arguments (an
		// inline script) clipped.
		args := make([]string, len(c.args))
		for i, a := range c.args {
			if len(a) > 60 || strings.Contains(a, "\n") {
				a = strings.SplitN(strings.TrimSpace(a), "\n", 2)[0]
				a = a[:min(len(a), 40)] + "…"
			}
			args[i] = a
		}
		what := c.script
		for i := len(args); i >= 1; i-- {
			what = strings.ReplaceAll(what, fmt.Sprintf(`"$%d"`, i), args[i-1])
		}
		what = strings.TrimPrefix(strings.ReplaceAll(what, `"$@"`, strings.Join(args, " ")), "exec ")
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%s: %w: %s", what, err, msg)
		} else {
			err = fmt.Errorf("%s: %w", what, err)
		}
	}
	return wall, cpu, err
}

// tailBuffer keeps the last 4 KiB written to it (a program's error output).
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	const keep = 4096
	t.b = append(t.b, p...)
	if len(t.b) > keep {
		t.b = append(t.b[:0], t.b[len(t.b)-keep:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// testVerifyHook, when set by a test, is called at named points of the
// workloads, between writing data and verifying it (point is
// "<workload>.<step>"), so that a test can corrupt what was written and
// check that the workload notices.
var testVerifyHook func(point, dir string)

func verifyHook(point, dir string) {
	if testVerifyHook != nil {
		testVerifyHook(point, dir)
	}
}

// checkDirEmpty returns an error naming what is left in dir.
func checkDirEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return fmt.Errorf("left behind in %s: %s", dir, strings.Join(names, " "))
}

// removeAndCheck removes what a workload made in dir and checks that dir is
// empty afterwards.
func removeAndCheck(dir string, names ...string) error {
	for _, n := range names {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("clean up: %w", err)
		}
	}
	return checkDirEmpty(dir)
}

// lockThread locks the calling goroutine to its thread for the stopwatch
// and returns the unlock.
func lockThread() func() {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// appendNote appends a clause to a Result's Note.
func appendNote(r *Result, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if r.Note == "" {
		r.Note = s
	} else {
		r.Note += "; " + s
	}
}

// coldCaches calls env.DropCaches and says whether the caches are cold.
func coldCaches(env *Env) bool {
	if env == nil || env.DropCaches == nil {
		return false
	}
	return env.DropCaches() == nil
}

// needCache returns env.Cache/sub, created, or an error when env has no
// cache directory.
func needCache(env *Env, sub string) (string, error) {
	if env == nil || env.Cache == "" {
		return "", errors.New("no cache directory (Env.Cache is empty)")
	}
	d := filepath.Join(env.Cache, sub)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

// cacheMeta describes an input a workload built in the cache, so that a
// later bench run reuses it and Run finds it without Prepare's state.
// It is written last: a cache directory without it is incomplete.
type cacheMeta struct {
	Version int               `json:"version"`
	Param   string            `json:"param"` // the size it was built for
	Source  string            `json:"source,omitempty"`
	Files   map[string]string `json:"files"` // name → sha256 (hex)
	Sizes   map[string]int64  `json:"sizes"`
	Count   int               `json:"count,omitempty"`
	Dirs    int               `json:"dirs,omitempty"`
	Bytes   int64             `json:"bytes,omitempty"`
	MD5     map[string]string `json:"md5,omitempty"` // srctree: file → MD5 (hex)
}

// cacheVersion changes when the content of any cached input changes.
const cacheVersion = 1

const metaName = "meta.json"

func readMeta(dir string) (*cacheMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return nil, err
	}
	var m cacheMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, metaName), err)
	}
	if m.Version != cacheVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", filepath.Join(dir, metaName), m.Version, cacheVersion)
	}
	return &m, nil
}

func writeMeta(dir string, m *cacheMeta) error {
	m.Version = cacheVersion
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, metaName+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, metaName))
}

// checkMeta rehashes the files m lists in dir and says whether they are
// all intact (a cache left by an earlier run is trusted only then).
func checkMeta(dir string, m *cacheMeta) bool {
	if m == nil || len(m.Files) == 0 {
		return false
	}
	for name, sum := range m.Files {
		got, size, err := sha256File(filepath.Join(dir, name))
		if err != nil || got != sum || size != m.Sizes[name] {
			return false
		}
	}
	return true
}

// sha256File returns the hex SHA-256 and the size of a file.
func sha256File(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// lineCounter counts the lines written to it that start with one of the
// given bytes (ls -l's type letters).
type lineCounter struct {
	counts  map[byte]int
	partial bytes.Buffer
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			c.partial.Write(p)
			break
		}
		line := p[:i]
		if c.partial.Len() > 0 {
			c.partial.Write(line)
			line = c.partial.Bytes()
		}
		if len(line) > 0 {
			c.counts[line[0]]++
		}
		c.partial.Reset()
		p = p[i+1:]
	}
	return n, nil
}

// asRoot says whether this process runs as root.
func asRoot() bool { return syscall.Geteuid() == 0 }

// cachedInputs remembers where a workload's prepared inputs are.
type cachedInputs struct {
	meta *cacheMeta
	dir  string
}

// load returns the cached inputs' description, from Prepare or, in a
// process that did not prepare them, from the cache directory.
func (c *cachedInputs) load(env *Env, cache func(*Env) (string, error)) (*cacheMeta, string, error) {
	if c.meta != nil {
		return c.meta, c.dir, nil
	}
	cdir, err := cache(env)
	if err != nil {
		return nil, "", err
	}
	m, err := readMeta(cdir)
	if err != nil {
		return nil, "", fmt.Errorf("inputs not prepared: %w", err)
	}
	c.meta, c.dir = m, cdir
	return m, cdir, nil
}

// programVersion is the first line of PROG --version (run with env added
// to the environment), which keys what a workload built with PROG in the
// cache: lame's reference MP3, git's repository, cc's reference build.
func programVersion(ctx context.Context, prog string, env []string) (string, error) {
	var out bytes.Buffer
	if _, _, err := (shellCmd{dir: "/", script: `exec "$1" --version`, args: []string{prog}, stdout: &out, env: env}).run(ctx); err != nil {
		return "", err
	}
	return strings.TrimSpace(firstLine(out.String())), nil
}
