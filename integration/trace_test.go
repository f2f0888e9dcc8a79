//go:build linux && amd64

package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/trace"
)

// startTracer follows this process on the targets, or skips with the
// one line that says why this machine cannot trace.
func startTracer(t *testing.T, targets ...string) *trace.Tracer {
	t.Helper()
	tr, err := trace.New(trace.Options{Pids: []int{os.Getpid()}})
	var u *trace.Unavailable
	if errors.As(err, &u) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	for _, tg := range targets {
		if _, err := tr.AddTarget(tg); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// fuseWorkload makes files, writes, reads, stats, lists and removes them.
func fuseWorkload(t *testing.T, dir string, n int) {
	t.Helper()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 4096)
	for i := 0; i < n; i++ {
		p := filepath.Join(sub, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.ReadDir(sub); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := os.Remove(filepath.Join(sub, fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
}

// daemonOp is the daemon's name for a FUSE opcode, "" for the requests
// it has no one-to-one span for: those go-fuse answers itself (FORGET,
// INIT, ...), and directory listings, where the daemon times its batches
// of the lower directory (a READDIRPLUS at the end of a listing is
// answered from the last batch) and go-fuse keeps the handles.
func daemonOp(kernelOp string) string {
	switch kernelOp {
	case "FORGET", "BATCH_FORGET", "INIT", "DESTROY", "INTERRUPT",
		"OPENDIR", "READDIR", "READDIRPLUS", "RELEASEDIR":
		return ""
	}
	return strings.ToLower(kernelOp)
}

// countsDiffer compares the kernel's FUSE requests by opcode with the
// daemon's spans by op over the same window, and says how they differ.
func countsDiffer(k trace.Snapshot, mnt string, d0, d1 measure.Snapshot) string {
	kernel := map[string]int64{}
	for _, s := range k.Series {
		if s.Layer == trace.LayerFUSE && s.Target == mnt {
			if op := daemonOp(s.Op); op != "" {
				kernel[op] += s.Count
			}
		}
	}
	daemon := map[string]int64{}
	for _, s := range d1.Ops {
		daemon[s.Op] += s.Count
	}
	for _, s := range d0.Ops {
		daemon[s.Op] -= s.Count
	}
	delete(daemon, "readdir")
	var diff []string
	for op, n := range daemon {
		if n != 0 && kernel[op] != n {
			diff = append(diff, fmt.Sprintf("%s: kernel %d, daemon %d", op, kernel[op], n))
		}
	}
	for op, n := range kernel {
		if _, ok := daemon[op]; !ok {
			diff = append(diff, fmt.Sprintf("%s: kernel %d, daemon none", op, n))
		}
	}
	sort.Strings(diff)
	return strings.Join(diff, "; ")
}

// TestTraceFUSECountsMatchDaemon: on our mounts, the kernel's FUSE
// request count by opcode equals the daemon's own count for the same
// window, and the workload's syscalls on the mount are timed; the mount
// is unmounted mid-trace and the tracer still closes cleanly. On both
// transports: /dev/fuse and FUSE over io_uring.
func TestTraceFUSECountsMatchDaemon(t *testing.T) {
	for _, v := range []Variant{Variants[0], Variants[2]} {
		for _, transport := range []string{fs.TransportDev, fs.TransportUring} {
			t.Run(v.Name+"-"+transport, func(t *testing.T) {
				traceFUSECounts(t, v, transport)
			})
		}
	}
}

func traceFUSECounts(t *testing.T, v Variant, transport string) {
	RequireFUSE(t)
	vol := NewVolume(t, v)
	rec := measure.NewRecorder(vol.Mnt)
	srv, err := MountDir(vol.Mnt, fs.Options{Lower: vol.Lower, Config: vol.Config,
		MasterKey: vol.MasterKey, Log: zerolog.New(vol.Log), Recorder: rec, Transport: transport})
	if err != nil {
		if transport == fs.TransportUring {
			t.Skipf("no FUSE over io_uring here: %v", err)
		}
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			UnmountDir(srv, vol.Mnt)
		}
	})
	if got := fs.TransportOf(srv).Name; got != transport {
		t.Skipf("asked for %s, the mount runs on %s", transport, got)
	}
	tr := startTracer(t, vol.Mnt)
	k0, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	d0 := rec.Snapshot()
	fuseWorkload(t, vol.Mnt, 20)

	// RELEASE travels after close returns: wait for the counts to
	// meet (the event), 60 s at most.
	var diff string
	var k1 trace.Snapshot
	for deadline := time.Now().Add(60 * time.Second); ; {
		if k1, err = tr.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if diff = countsDiffer(k1.Sub(k0), vol.Mnt, d0, rec.Snapshot()); diff == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if diff != "" {
		t.Errorf("kernel and daemon counts differ: %s", diff)
	}
	w := k1.Sub(k0)
	for _, op := range []string{"LOOKUP", "CREATE", "WRITE", "UNLINK", "RELEASE"} {
		if s, ok := w.Find(trace.LayerFUSE, op, vol.Mnt); !ok || s.Count == 0 {
			t.Errorf("no FUSE %s traced", op)
		}
	}
	for _, op := range []string{"openat", "write", "read", "newfstatat", "unlinkat"} {
		s, ok := w.Find(trace.LayerSyscall, op, vol.Mnt)
		if !ok || s.Count < 20 {
			t.Errorf("syscall %s: %d samples on the mount, want at least 20", op, s.Count)
		}
	}
	if t.Failed() {
		for _, s := range w.Series {
			t.Logf("%s %s %s: %d", s.Layer, s.Target, s.Op, s.Count)
		}
	}

	// The target goes away mid-trace; the tracer notices nothing
	// and detaches everything on Close.
	mounted = false
	if err := UnmountDir(srv, vol.Mnt); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Snapshot(); err != nil {
		t.Fatal(err)
	}
	ids := tr.ProgramIDs()
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			p, err := ebpf.NewProgramFromID(id)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if err == nil {
				p.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("program %d still loaded after the target went and the tracer closed (%v)", id, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
