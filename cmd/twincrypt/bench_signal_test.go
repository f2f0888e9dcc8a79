package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountsBelow lists the mounts at or below dir with their filesystem
// type, from this process's mount table.
func mountsBelow(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint opts... - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mnt := strings.ReplaceAll(fields[4], `\040`, " ")
		if mnt == dir || strings.HasPrefix(mnt, dir+"/") {
			out[mnt] = fields[sep+1]
		}
	}
	return out
}

// TestBenchSignals: a bench stopped by SIGINT, SIGTERM, SIGHUP, or by
// SIGPIPE when the reader of its output goes away (as `bench 2>&1 | tail`
// stopped by Ctrl-C), while one of its FUSE targets is mounted, unmounts
// everything, removes its tmpfs and work directory, keeps the report of
// the runs that finished and exits 130.
func TestBenchSignals(t *testing.T) {
	requireFUSE(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE} {
		t.Run(unix.SignalName(sig), func(t *testing.T) {
			// The workspace goes to os.MkdirTemp("", …): TMPDIR puts it
			// where the test can watch it.
			tmp, out := tempDir(t), tempDir(t)
			t.Cleanup(func() {
				// Only if the bench failed its job: leave no mount behind
				// for t.TempDir's removal to reach into.
				for m := range mountsBelow(t, tmp) {
					_ = unix.Unmount(m, unix.MNT_DETACH)
				}
			})
			cmd := exec.Command(binPath, "bench", "--size", "tiny", "--repeat", "3",
				"--targets", "native,twin", "--workloads", "seqwrite,srctree", "--out", out)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = w, w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			var output bytes.Buffer
			var mu sync.Mutex
			drained := make(chan struct{})
			go func() {
				defer close(drained)
				buf := make([]byte, 4096)
				for {
					n, err := r.Read(buf)
					mu.Lock()
					output.Write(buf[:n])
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
			got := func() string {
				mu.Lock()
				defer mu.Unlock()
				return output.String()
			}

			// The event: a FUSE mount of the bench's below TMPDIR.
			deadline := time.Now().Add(90 * time.Second)
			for {
				fuse := ""
				for m, fstype := range mountsBelow(t, tmp) {
					if strings.HasPrefix(fstype, "fuse") {
						fuse = m
					}
				}
				if fuse != "" {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("bench ended (%v) before mounting anything:\n%s", err, got())
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("no FUSE mount below %s after 90 s:\n%s", tmp, got())
				}
			}

			if sig == syscall.SIGPIPE {
				// The reader goes: the bench's next line of progress
				// meets a pipe without reader.
				r.Close()
				<-drained
			} else if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(3 * time.Minute):
				t.Fatalf("bench still running 3 min after %s:\n%s", unix.SignalName(sig), got())
			}
			if sig != syscall.SIGPIPE {
				<-drained
			}
			var ee *exec.ExitError
			if !errors.As(werr, &ee) || ee.ExitCode() != exitInterrupted {
				t.Errorf("exit after %s: %v, want exit status %d\n%s", unix.SignalName(sig), werr, exitInterrupted, got())
			}
			if m := mountsBelow(t, tmp); len(m) > 0 {
				t.Errorf("still mounted after %s: %v", unix.SignalName(sig), m)
			}
			if left, err := os.ReadDir(tmp); err != nil || len(left) > 0 {
				t.Errorf("TMPDIR after %s: %v %v, want it empty", unix.SignalName(sig), left, err)
			}
			report, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil || !bytes.Contains(report, []byte("**Interrupted**")) {
				t.Errorf("report.md of the interrupted bench: %v\n%s", err, report)
			}
			if sig != syscall.SIGPIPE {
				if s := got(); !strings.Contains(s, unix.SignalName(sig)+": unmounting and cleaning up") ||
					!strings.Contains(s, "twincrypt: bench interrupted by "+unix.SignalName(sig)) {
					t.Errorf("output does not say what happened:\n%s", s)
				}
			}
		})
	}
}

// TestReaderGone: the write end of a pipe counts as gone once its reader
// has closed, not before; a SIGPIPE from a workload's own pipe must not
// stop the bench.
func TestReaderGone(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if readerGone(int(w.Fd())) {
		t.Error("a pipe with its reader open counts as gone")
	}
	r.Close()
	if !readerGone(int(w.Fd())) {
		t.Error("a pipe whose reader closed does not count as gone")
	}
}
