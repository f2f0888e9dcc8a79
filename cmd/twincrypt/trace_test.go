package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// tracePrograms counts the loaded BPF programs the tracer names (tc_*).
func tracePrograms(t *testing.T) int {
	t.Helper()
	n := 0
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		if info, err := p.Info(); err == nil && strings.HasPrefix(info.Name, "tc_") {
			n++
		}
		p.Close()
	}
}

// TestTraceCLI: twincrypt trace on a mount, following this test's
// process, counts exactly the CREATEs it makes, times its syscalls, splits
// the requests with the daemon's handler time, and leaves no program
// attached when interrupted.
func TestTraceCLI(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "trace passphrase")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")

	cmd := exec.Command(binPath, "trace", "--json", "--interval", "1h", "--pid", strconv.Itoa(os.Getpid()), mnt)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stderr)
	if !lines.Scan() {
		cmd.Wait()
		t.Fatalf("trace said nothing: %v", lines.Err())
	}
	if line := lines.Text(); !strings.HasPrefix(line, "trace: tracing 1 target(s)") {
		if strings.Contains(line, "kernel tracing unavailable") {
			cmd.Wait()
			t.Skip(line)
		}
		t.Fatalf("trace: %s", line)
	}
	go func() {
		for lines.Scan() {
			t.Log("trace stderr:", lines.Text())
		}
	}()

	const n = 25
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%d", i)), []byte("traced"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("trace: %v\n%s", err, stdout.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("trace did not end on SIGINT")
	}

	var iv traceInterval
	if err := json.Unmarshal(stdout.Bytes(), &iv); err != nil {
		t.Fatalf("trace --json: %v\n%s", err, stdout.String())
	}
	if len(iv.Targets) != 1 || iv.Targets[0].Target != mnt {
		t.Fatalf("trace targets: %+v", iv.Targets)
	}
	got := map[string]int64{}
	for _, s := range iv.Targets[0].Series {
		got[s.Layer+" "+s.Op] = s.Count
	}
	if got["fuse CREATE"] != n || got["syscall openat"] != n || got["syscall write"] != n {
		t.Errorf("trace counts %v; want %d CREATE, openat and write", got, n)
	}
	var create bool
	for _, w := range iv.Targets[0].Where {
		if w.Op == "CREATE" {
			create = true
			if w.Spans != n || w.HandlerNs <= 0 || w.RoundTripNs <= 0 {
				t.Errorf("where CREATE: %+v", w)
			}
		}
	}
	if !create {
		t.Errorf("no CREATE in the where table: %+v", iv.Targets[0].Where)
	}
	// The programs go with the process (their links are its descriptors).
	deadline := time.Now().Add(30 * time.Second)
	for tracePrograms(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("BPF programs still loaded after trace exited")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
