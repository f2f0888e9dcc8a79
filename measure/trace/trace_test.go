//go:build linux && amd64

package trace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The workload child: the test binary run again with workloadEnv set. It
// waits for a byte on stdin (sent once the tracer follows it), then makes
// exactly n calls of each kind on the directory in workloadEnv.
const workloadEnv = "TWINCRYPT_TRACE_WORKLOAD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(workloadEnv); spec != "" {
		if err := workload(spec); err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(unavailableEnv) != "" {
		_, err := New(Options{Pids: []int{os.Getpid()}})
		fmt.Println(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workload: "DIR N". Absolute paths for stat and open (attributed by the
// st_dev stat returns and by the new descriptor) and rmdir (by the
// target's path), relative ones for mkdir and the failing stats (by the
// working directory, which is DIR).
func workload(spec string) error {
	dir, ns, _ := strings.Cut(spec, " ")
	n, err := strconv.Atoi(ns)
	if err != nil {
		return err
	}
	// Ready: the runtime's start-up is done (it reads the executable,
	// on the same filesystem as a temporary directory).
	if _, err := os.Stdout.Write([]byte{'r'}); err != nil {
		return err
	}
	if _, err := io.ReadFull(os.Stdin, make([]byte, 1)); err != nil {
		return err
	}
	file := filepath.Join(dir, "f")
	var st unix.Stat_t
	buf := make([]byte, 1)
	for i := 0; i < n; i++ {
		if err := unix.Stat(file, &st); err != nil {
			return err
		}
		fd, err := unix.Open(file, unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		if _, err := unix.Read(fd, buf); err != nil {
			return err
		}
		if err := unix.Close(fd); err != nil {
			return err
		}
		if err := unix.Mkdir("d"+strconv.Itoa(i), 0o755); err != nil {
			return err
		}
		if err := unix.Rmdir(filepath.Join(dir, "d"+strconv.Itoa(i))); err != nil {
			return err
		}
		if err := unix.Stat("missing", &st); err != unix.ENOENT {
			return fmt.Errorf("stat missing: %v", err)
		}
	}
	return nil
}

// requireTracing skips with the one line New gives when this machine
// cannot trace.
func requireTracing(t *testing.T) {
	t.Helper()
	tr, err := New(Options{})
	var u *Unavailable
	if errors.As(err, &u) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}

// runWorkload starts the child in dir, waits until it is ready, makes tr
// follow it, lets it run and waits for it.
func runWorkload(t *testing.T, tr *Tracer, dir string, n int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), workloadEnv+"="+dir+" "+strconv.Itoa(n))
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	gate, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ready, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(ready, make([]byte, 1)); err != nil {
		t.Fatalf("workload never got ready: %v", err)
	}
	if err := tr.AddProcess(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
}

// TestSyscallCounts: a program making exactly n stat, open, read, close,
// mkdir and rmdir calls on a native directory gives n samples of each, the n
// failing stats are n errors, and the native target has no FUSE events.
func TestSyscallCounts(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{}) // follow only the child
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.AddTarget(dir); err != nil {
		t.Fatal(err)
	}
	const n = 37
	runWorkload(t, tr, dir, n)
	snap, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		op           string
		count, errno int64
	}{{"newfstatat", 2 * n, n}, {"openat", n, 0}, {"read", n, 0}, {"close", n, 0}, {"mkdirat", n, 0}, {"unlinkat", n, 0}} {
		s, ok := snap.Find(LayerSyscall, c.op, dir)
		if !ok || s.Count != c.count || s.Errors != c.errno {
			t.Errorf("%s: %d samples, %d errors; want %d, %d", c.op, s.Count, s.Errors, c.count, c.errno)
			continue
		}
		st := s.Stats()
		if st.P50Ns <= 0 || st.P99Ns < st.P50Ns || st.Buckets[len(st.Buckets)-1] > st.Count {
			t.Errorf("%s: implausible stats %+v", c.op, st)
		}
	}
	for _, s := range snap.Series {
		if s.Layer == LayerFUSE {
			t.Errorf("native target has FUSE events: %+v", s)
		}
		if s.Layer == LayerSyscall && s.Target != dir {
			t.Errorf("a syscall on an untraced device: %+v", s)
		}
	}
	if t.Failed() {
		for _, s := range snap.Series {
			t.Logf("%s %s %s: %d (%d errors)", s.Layer, s.Target, s.Op, s.Count, s.Errors)
		}
	}
}

// TestUntracedProcess: the same workload, not followed, leaves nothing.
func TestUntracedProcess(t *testing.T) {
	requireTracing(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.AddTarget(dir); err != nil {
		t.Fatal(err)
	}
	other, err := New(Options{}) // a second tracer follows the child
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.AddTarget(dir); err != nil {
		t.Fatal(err)
	}
	runWorkload(t, other, dir, 5)
	for name, tt := range map[string]*Tracer{"follower": other, "bystander": tr} {
		snap, err := tt.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := snap.Find(LayerSyscall, "openat", dir)
		if want := map[string]int64{"follower": 5, "bystander": 0}[name]; s.Count != want {
			t.Errorf("%s: %d openat samples, want %d", name, s.Count, want)
		}
	}
}

// loaded reports whether a program id is still loaded.
func loaded(t *testing.T, id ebpf.ProgramID) bool {
	t.Helper()
	p, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	return true
}

// TestCloseDetaches: while a tracer runs its programs are loaded (by the
// ids the kernel gave them: other tests' tracers may run meanwhile);
// after Close none of them is, within 30 s (the kernel frees a program's
// id when its last reference, the link's included, goes).
func TestCloseDetaches(t *testing.T) {
	requireTracing(t)
	tr, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	ids := tr.ProgramIDs()
	if len(ids) < 7 {
		t.Errorf("a running tracer has %d programs: %v", len(ids), ids)
	}
	for _, id := range ids {
		if !loaded(t, id) {
			t.Errorf("program %d of a running tracer is not loaded", id)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for loaded(t, id) {
			if time.Now().After(deadline) {
				t.Fatalf("program %d still loaded after Close", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if _, err := tr.Snapshot(); err == nil {
		t.Error("Snapshot of a closed tracer succeeded")
	}
}

// TestBuckets: the log-linear buckets cover every value once, and a
// bucket's width is at most 1/16 of its values.
func TestBuckets(t *testing.T) {
	prevHi := int64(-1)
	last := uint32((62-3)*16 + 15) // values below 2^63
	for b := uint32(0); b <= last; b++ {
		lo, hi := bucketRange(b)
		if lo != prevHi+1 || hi < lo {
			t.Fatalf("bucket %d = [%d, %d] after %d", b, lo, hi, prevHi)
		}
		if lo >= 16 && (hi-lo+1)*16 > lo {
			t.Fatalf("bucket %d = [%d, %d] wider than 1/16", b, lo, hi)
		}
		for _, v := range []int64{lo, hi, lo + (hi-lo)/2} {
			if got := bucketOf(uint64(v)); got != b {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, b)
			}
		}
		prevHi = hi
	}
	if prevHi != 1<<63-1 {
		t.Errorf("the last bucket ends at %d", prevHi)
	}
}

const unavailableEnv = "TWINCRYPT_TRACE_UNPRIVILEGED"

// TestUnprivileged: as an unprivileged user New fails with one line that
// says what is missing.
func TestUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start a process as nobody")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary may sit in a directory nobody cannot enter.
	copyExe := filepath.Join(t.TempDir(), "trace.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyExe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(copyExe), filepath.Dir(filepath.Dir(copyExe))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(copyExe)
	cmd.Env = append(os.Environ(), unavailableEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	line := strings.TrimSpace(string(out))
	if strings.Count(line, "\n") != 0 || !strings.Contains(line, "kernel tracing unavailable: bpf() not permitted") {
		t.Errorf("unprivileged New said %q", line)
	}
}
