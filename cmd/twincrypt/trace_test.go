package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

// programIDs parses the program ids of trace's ready line.
func programIDs(t *testing.T, line string) []ebpf.ProgramID {
	t.Helper()
	_, list, ok := strings.Cut(line, "(BPF program ids [")
	list, _, ok2 := strings.Cut(list, "])")
	if !ok || !ok2 {
		t.Fatalf("no program ids in %q", line)
	}
	var ids []ebpf.ProgramID
	for _, f := range strings.Fields(list) {
		n, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			t.Fatalf("program id %q in %q", f, line)
		}
		ids = append(ids, ebpf.ProgramID(n))
	}
	return ids
}

// programLoaded reports whether a program id is still loaded.
func programLoaded(t *testing.T, id ebpf.ProgramID) bool {
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
	line := lines.Text()
	if !strings.HasPrefix(line, "trace: tracing 1 target(s)") {
		if strings.Contains(line, "kernel tracing unavailable") {
			cmd.Wait()
			t.Skip(line)
		}
		t.Fatalf("trace: %s", line)
	}
	ids := programIDs(t, line)
	for _, id := range ids {
		if !programLoaded(t, id) {
			t.Errorf("program %d of the running trace is not loaded", id)
		}
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
	for _, id := range ids {
		for programLoaded(t, id) {
			if time.Now().After(deadline) {
				t.Fatalf("BPF program %d still loaded after trace exited", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestTraceMetricsScrapedByPrometheus: trace --metrics serves the kernel
// side of a mount (its FUSE round trips and the workload's syscalls) and a
// real Prometheus server, scraping it beside the daemon's own --metrics,
// holds both with the same mount label: n CREATE round trips in the
// kernel, n create spans in the daemon.
func TestTraceMetricsScrapedByPrometheus(t *testing.T) {
	requireFUSE(t)
	const promBin = "/usr/bin/prometheus"
	if _, err := os.Stat(promBin); err != nil {
		t.Skipf("skipping: a real Prometheus server is needed (apt-get install prometheus): %v", err)
	}
	m := mountWithMetrics(t, "twin")
	traceAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	cmd := exec.Command(binPath, "trace", "--interval", "1h", "--metrics", traceAddr, "--pid", strconv.Itoa(os.Getpid()), m.mnt)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) // by pid: the tracer this test started
	lines := bufio.NewScanner(stderr)
	for {
		if !lines.Scan() {
			t.Fatalf("trace ended before tracing: %v", lines.Err())
		}
		if line := lines.Text(); strings.Contains(line, "kernel tracing unavailable") {
			t.Skip(line)
		} else if strings.HasPrefix(line, "trace: tracing") {
			break
		}
	}
	go func() {
		for lines.Scan() {
		}
	}()
	const n = 17
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(m.mnt, fmt.Sprintf("p%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fams := parseExposition(t, httpGet(t, "http://"+traceAddr+"/metrics"))
	c := series(fams, "twincrypt_kernel_op_duration_seconds", map[string]string{"mount": m.mnt, "layer": "fuse", "op": "CREATE"})
	if c == nil || c.Histogram.GetSampleCount() != n {
		t.Fatalf("kernel CREATE histogram %v, want %d samples", c, n)
	}
	if s := series(fams, "twincrypt_kernel_op_duration_seconds", map[string]string{"mount": m.mnt, "layer": "syscall", "op": "openat"}); s == nil || s.Histogram.GetSampleCount() < n {
		t.Errorf("syscall openat histogram %v, want at least %d samples", s, n)
	}

	dir := tempDir(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: twincrypt\n    static_configs:\n      - targets: [%q, %q]\n", m.addr, traceAddr)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	var promOut syncBuffer
	prom := exec.Command(promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &promOut, &promOut
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() { prom.Process.Kill(); prom.Wait() }) // by pid: the server this test started

	// Both sides of the mount, joined on its label, in one query.
	q := fmt.Sprintf(`twincrypt_kernel_op_duration_seconds_count{layer="fuse",op="CREATE",mount=%q} - on(mount) twincrypt_op_duration_seconds_count{op="create",side="mount"}`, m.mnt)
	deadline := time.Now().Add(90 * time.Second)
	for {
		var ans struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value []any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		resp, err := http.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
		}
		if err == nil && ans.Status == "success" && len(ans.Data.Result) == 1 && len(ans.Data.Result[0].Value) == 2 {
			if v := ans.Data.Result[0].Value[1]; v != "0" {
				t.Fatalf("kernel CREATEs minus daemon creates = %v, want 0", v)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s never answered %s: %v %+v\n%s", promAddr, q, err, ans, lastLines(promOut.String(), 20))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
