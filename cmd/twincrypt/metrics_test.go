package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment
// ago (the kernel's choice for port 0).
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// metricsMount is one mount serving --metrics.
type metricsMount struct {
	name, mnt, addr string
}

// mountWithMetrics mounts a volume of the given kind (xts, cbc,
// plainnames, twin) in the background with --metrics on a free port and
// extra flags, and unmounts it in t.Cleanup.
func mountWithMetrics(t *testing.T, kind string, extra ...string) metricsMount {
	t.Helper()
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	args := []string{"mount", "-b", "-q", "--metrics", addr}
	args = append(args, extra...)
	var lower string
	switch kind {
	case "twin":
		lower = tempDir(t)
		args = append(args, "--passthrough")
	default:
		pf := writePassfile(t, "metrics passphrase")
		var init []string
		switch kind {
		case "cbc":
			init = []string{"--cipher", "aes-cbc"}
		case "plainnames":
			init = []string{"--plaintext-names"}
		}
		lower = initVolume(t, pf, init...)
		args = append(args, "--passfile", pf)
	}
	twincrypt(t, "", append(args, lower, mnt)...).expectExit(t, 0, "mount "+kind+" with --metrics")
	return metricsMount{name: kind, mnt: mnt, addr: addr}
}

// exercise writes, reads back, makes a directory and looks up a missing
// name (an ENOENT) on mnt.
func exercise(t *testing.T, mnt string) {
	t.Helper()
	data := bytes.Repeat([]byte("scraped "), 1<<17) // 1 MiB
	p := filepath.Join(mnt, "file")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %s: %v", p, err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stat of a missing file: %v", err)
	}
}

// parseExposition parses Prometheus text exposition.
func parseExposition(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, text)
	}
	return fams
}

// series finds the metric of family fam whose labels include want.
func series(fams map[string]*dto.MetricFamily, fam string, want map[string]string) *dto.Metric {
	f := fams[fam]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %v\n%s", u, resp.Status, err, b)
	}
	return string(b)
}

// checkExposition checks the twincrypt series of one mount after
// exercise: a write histogram with count, sum and nondecreasing buckets
// that end at or below the count, bytes written, the ENOENT of the
// lookup, and (mirror) the twin side.
func checkExposition(t *testing.T, where, text, mnt string, mirror bool) map[string]*dto.MetricFamily {
	t.Helper()
	fams := parseExposition(t, text)
	sides := []string{"mount"}
	if mirror {
		sides = append(sides, "twin")
	}
	for _, side := range sides {
		m := series(fams, "twincrypt_op_duration_seconds", map[string]string{"mount": mnt, "op": "write", "side": side})
		if m == nil || m.Histogram == nil {
			t.Fatalf("%s: no write latency histogram of side %s for %s:\n%s", where, side, mnt, text)
		}
		h := m.Histogram
		if h.GetSampleCount() == 0 || h.GetSampleSum() <= 0 {
			t.Errorf("%s: write histogram (%s) count %d sum %g", where, side, h.GetSampleCount(), h.GetSampleSum())
		}
		var last uint64
		for _, b := range h.Bucket {
			if b.GetCumulativeCount() < last || b.GetCumulativeCount() > h.GetSampleCount() {
				t.Errorf("%s: write buckets (%s) not cumulative within the count %d: %v", where, side, h.GetSampleCount(), h.Bucket)
				break
			}
			last = b.GetCumulativeCount()
		}
		if last == 0 {
			t.Errorf("%s: every write (%s) fell beyond the last bucket: %v", where, side, h.Bucket)
		}
		if b := series(fams, "twincrypt_op_bytes_total", map[string]string{"mount": mnt, "op": "write", "side": side}); b == nil || b.Counter.GetValue() < 1<<20 {
			t.Errorf("%s: bytes written (%s) %v, want at least 1 MiB", where, side, b)
		}
	}
	if e := series(fams, "twincrypt_op_errors_total", map[string]string{"mount": mnt, "op": "lookup", "side": "mount", "errno": "ENOENT"}); e == nil || e.Counter.GetValue() < 1 {
		t.Errorf("%s: no ENOENT lookup counted for %s", where, mnt)
	}
	for _, fam := range []string{"twincrypt_op_crypto_seconds_total", "twincrypt_op_lower_seconds_total", "twincrypt_daemon_cpu_seconds_total"} {
		if fams[fam] == nil {
			t.Errorf("%s: no %s", where, fam)
		}
	}
	return fams
}

// TestMetricsScrapedByPrometheus mounts aes-xts (in mirror mode, with an
// op log), aes-cbc, plaintext names and the twin, each with --metrics on
// its own loopback port, checks each /metrics (and the process collector),
// then runs a real Prometheus server scraping all four every second and
// queries its HTTP API until it holds the write latency of every mount,
// the twin side of the mirror, an ENOENT and the daemons' CPU; then runs
// every query of the Grafana dashboard in docs/ against it.
func TestMetricsScrapedByPrometheus(t *testing.T) {
	requireFUSE(t)
	const promBin = "/usr/bin/prometheus"
	if _, err := os.Stat(promBin); err != nil {
		t.Skipf("skipping: a real Prometheus server is needed (apt-get install prometheus): %v", err)
	}
	oplog := filepath.Join(tempDir(t), "op.log")
	mounts := []metricsMount{
		mountWithMetrics(t, "xts", "--mirror", tempDir(t), "--oplog", oplog),
		mountWithMetrics(t, "cbc"),
		mountWithMetrics(t, "plainnames"),
		mountWithMetrics(t, "twin"),
	}
	var targets []string
	for i, m := range mounts {
		exercise(t, m.mnt)
		text := httpGet(t, "http://"+m.addr+"/metrics")
		fams := checkExposition(t, "/metrics of "+m.name, text, m.mnt, i == 0)
		if fams["process_cpu_seconds_total"] == nil || fams["process_resident_memory_bytes"] == nil {
			t.Errorf("/metrics of %s: no process collector series", m.name)
		}
		if _, ok := fams["twincrypt_oplog_dropped_total"]; ok != (i == 0) {
			t.Errorf("/metrics of %s: op log series present %v, want %v (an op log only on xts)", m.name, ok, i == 0)
		}
		targets = append(targets, fmt.Sprintf("%q", m.addr))
	}

	dir := tempDir(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: twincrypt\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	var promOut bytes.Buffer
	prom := exec.Command(promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &promOut, &promOut
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { prom.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = prom.Process.Kill() // by pid: the server this test started
		<-exited
	})

	type result struct {
		Metric map[string]string `json:"metric"`
		Value  []any             `json:"value"`
	}
	query := func(q string) ([]result, error) {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var ans struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []result `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			return nil, err
		}
		if ans.Status != "success" {
			return nil, fmt.Errorf("query %s: %s %s", q, ans.Status, ans.Error)
		}
		return ans.Data.Result, nil
	}
	checks := []struct {
		q    string
		want func([]result) string // "" when satisfied
	}{
		{`twincrypt_op_duration_seconds_count{op="write",side="mount"} > 0`, func(rs []result) string {
			have := map[string]bool{}
			for _, r := range rs {
				have[r.Metric["mount"]] = true
			}
			for _, m := range mounts {
				if !have[m.mnt] {
					return "no write count for " + m.name + " mount " + m.mnt
				}
			}
			return ""
		}},
		{`twincrypt_op_duration_seconds_bucket{op="write",side="twin",le="+Inf"} > 0`, func(rs []result) string {
			if len(rs) != 1 || rs[0].Metric["mount"] != mounts[0].mnt {
				return fmt.Sprintf("twin-side write buckets %v, want one for the mirror mount", rs)
			}
			return ""
		}},
		{`twincrypt_op_errors_total{op="lookup",side="mount",errno="ENOENT"} > 0`, func(rs []result) string {
			if len(rs) != len(mounts) {
				return fmt.Sprintf("ENOENT lookups on %d mounts, want %d", len(rs), len(mounts))
			}
			return ""
		}},
		{`process_cpu_seconds_total{job="twincrypt"}`, func(rs []result) string {
			if len(rs) != len(mounts) {
				return fmt.Sprintf("daemon CPU of %d mounts, want %d", len(rs), len(mounts))
			}
			return ""
		}},
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, c := range checks {
		for {
			rs, err := query(c.q)
			why := ""
			if err != nil {
				why = err.Error()
			} else {
				why = c.want(rs)
			}
			if why == "" {
				break
			}
			select {
			case <-exited:
				t.Fatalf("prometheus exited: %v\n%s", prom.ProcessState, promOut.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("prometheus at %s: %s: %s\n%s", promAddr, c.q, why, lastLines(promOut.String(), 20))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	// Every query of the Grafana dashboard in docs/ is valid PromQL for
	// this Prometheus and finds series of these mounts.
	for _, q := range dashboardQueries(t) {
		for {
			rs, err := query(q.expr)
			if err == nil && len(rs) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("dashboard panel %q: %s: %d series, %v", q.panel, q.expr, len(rs), err)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

type dashboardQuery struct{ panel, expr string }

// dashboardQueries reads the PromQL of the Grafana dashboard in docs/,
// with its variables replaced as Grafana would for "all mounts" and a
// 1 s scrape interval.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile("../../docs/grafana/twincrypt-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("$mount", ".*", "$__rate_interval", "10s")
	var qs []dashboardQuery
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, dashboardQuery{p.Title, r.Replace(tg.Expr)})
		}
	}
	if len(qs) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return qs
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestStatsPrometheusText: `stats --prometheus` prints, from the stats
// socket, the twincrypt series the mount's /metrics serves (same families,
// same write count), without the process_* and go_* series of the HTTP
// endpoint, for each kind of mount.
func TestStatsPrometheusText(t *testing.T) {
	requireFUSE(t)
	for _, kind := range []string{"xts", "cbc", "plainnames", "twin"} {
		t.Run(kind, func(t *testing.T) {
			m := mountWithMetrics(t, kind)
			exercise(t, m.mnt)
			r := twincrypt(t, "", "stats", "--prometheus", m.mnt)
			r.expectExit(t, 0, "stats --prometheus")
			text := checkExposition(t, "stats --prometheus", r.stdout, m.mnt, false)
			web := checkExposition(t, "/metrics", httpGet(t, "http://"+m.addr+"/metrics"), m.mnt, false)
			for name := range web {
				if strings.HasPrefix(name, "twincrypt_") && text[name] == nil {
					t.Errorf("stats --prometheus lacks %s, which /metrics serves", name)
				}
			}
			for name := range text {
				if !strings.HasPrefix(name, "twincrypt_") {
					t.Errorf("stats --prometheus prints %s, not a series of the mount", name)
				}
			}
			// Nothing touched the mount in between: the write counts agree.
			want := map[string]string{"mount": m.mnt, "op": "write", "side": "mount"}
			a, b := series(text, "twincrypt_op_duration_seconds", want), series(web, "twincrypt_op_duration_seconds", want)
			if a.Histogram.GetSampleCount() != b.Histogram.GetSampleCount() {
				t.Errorf("write count: stats --prometheus %d, /metrics %d", a.Histogram.GetSampleCount(), b.Histogram.GetSampleCount())
			}
		})
	}
}

// TestMetricsRefusesNonLoopback: --metrics on an address other machines
// reach is a usage error before anything is mounted, unless
// --metrics-allow-remote says so; --no-stats and --metrics conflict.
func TestMetricsRefusesNonLoopback(t *testing.T) {
	requireFUSE(t)
	lower := tempDir(t)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	for _, addr := range []string{"0.0.0.0:9101", ":9101", "192.0.2.1:9101", "[::]:9101"} {
		r := twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--metrics", addr, lower, mnt)
		r.expectExit(t, exitUsage, "--metrics "+addr)
		if !strings.Contains(r.stderr, "not a loopback address") || !strings.Contains(r.stderr, "--metrics-allow-remote") {
			t.Errorf("--metrics %s: %q", addr, r.stderr)
		}
		if isMounted(t, mnt) {
			t.Fatalf("--metrics %s: mounted anyway", addr)
		}
	}
	r := twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--no-stats", "--metrics", "127.0.0.1:9101", lower, mnt)
	r.expectExit(t, exitUsage, "--no-stats --metrics")

	// Allowed explicitly: served on every interface (port chosen by the
	// kernel would not be known; take a free one).
	port := freeLoopbackPort(t)
	twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--metrics", fmt.Sprintf("0.0.0.0:%d", port),
		"--metrics-allow-remote", lower, mnt).expectExit(t, 0, "--metrics-allow-remote")
	if !strings.Contains(httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port)), "twincrypt_mount_start_time_seconds") {
		t.Errorf("--metrics-allow-remote: no twincrypt series")
	}
}

// TestMetricsPortInUse: a --metrics port that is taken fails the mount
// with a message naming it; nothing stays mounted.
func TestMetricsPortInUse(t *testing.T) {
	requireFUSE(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lower := tempDir(t)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	r := twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--metrics", ln.Addr().String(), lower, mnt)
	if r.code == 0 || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("mount with a taken metrics port: exit %d, %q", r.code, r.stderr)
	}
	if isMounted(t, mnt) {
		t.Errorf("mounted although its metrics port is taken")
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStatsWatchIntervals runs `stats --watch` on each kind of mount
// (none with an op log) and checks its screens: the first, before any
// data moved, has "-" for CPU per GiB and no op-log line; after 4 MiB are
// written a screen shows writes per second in the interval table with the
// cumulative table below; a later idle interval says "idle" while the
// cumulative table still lists the writes (interval figures do not decay
// like since-mount averages); at umount it says "mount went away" and
// exits 0.
func TestStatsWatchIntervals(t *testing.T) {
	requireFUSE(t)
	for _, kind := range []string{"xts", "cbc", "plainnames", "twin"} {
		t.Run(kind, func(t *testing.T) {
			m := mountWithMetrics(t, kind)
			var stdout, stderr syncBuffer
			w := exec.Command(binPath, "stats", "--watch", "200ms", m.mnt)
			w.Stdout, w.Stderr = &stdout, &stderr
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- w.Wait() }()
			t.Cleanup(func() {
				select {
				case <-exited:
				default:
					_ = w.Process.Kill() // by pid: the watch this test started
					<-exited
				}
			})
			screens := func() []string {
				return strings.Split(stdout.String(), "\x1b[H\x1b[2J")
			}
			waitScreen := func(what string, ok func(string) bool) string {
				t.Helper()
				deadline := time.Now().Add(30 * time.Second)
				for {
					s := screens()
					// The last screen may still be being written.
					for _, sc := range s[:len(s)-1] {
						if ok(sc) {
							return sc
						}
					}
					if time.Now().After(deadline) {
						t.Fatalf("stats --watch: no screen %s; last:\n%s\nstderr: %s", what, s[len(s)-1], stderr.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			first := waitScreen("at all", func(sc string) bool { return strings.Contains(sc, "CPU:") })
			if !strings.Contains(first, "- CPU-s per GiB moved") {
				t.Errorf("first screen, nothing moved: want '- CPU-s per GiB moved':\n%s", first)
			}
			data := bytes.Repeat([]byte("watched "), 1<<19) // 4 MiB
			if err := os.WriteFile(filepath.Join(m.mnt, "file"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			busy := waitScreen("with writes in the interval", func(sc string) bool {
				i := strings.Index(sc, "cumulative: ")
				return i > 0 && strings.Contains(sc[:i], "ops/s") && hasRow(sc[:i], "write")
			})
			if !strings.Contains(busy[strings.Index(busy, "cumulative: "):], "p99") {
				t.Errorf("no cumulative table below the interval table:\n%s", busy)
			}
			idle := waitScreen("idle after the writes, with the writes in the cumulative table", func(sc string) bool {
				i := strings.Index(sc, "cumulative: ")
				return i > 0 && strings.Contains(sc[:i], "idle: no operations in this interval") && hasRow(sc[i:], "write")
			})
			if !regexpCPU.MatchString(idle) {
				t.Errorf("after 4 MiB moved, no CPU-s per GiB figure in the cumulative table:\n%s", idle)
			}
			for _, sc := range screens() {
				if strings.Contains(sc, "op log:") {
					t.Errorf("op-log line without an op log:\n%s", sc)
					break
				}
			}
			twincrypt(t, "", "umount", m.mnt).expectExit(t, 0, "umount")
			select {
			case err := <-exited:
				exited <- err
				if err != nil {
					t.Errorf("stats --watch at unmount: %v; stderr %q", err, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("stats --watch still running after the unmount")
			}
			if !strings.Contains(stderr.String(), "mount went away") {
				t.Errorf("stats --watch at unmount: stderr %q, want 'mount went away'", stderr.String())
			}
		})
	}
}

// hasRow reports whether a table in s has a row for op.
func hasRow(s, op string) bool {
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == op {
			return true
		}
	}
	return false
}

// regexpCPU matches a CPU-per-GiB figure (not "-").
var regexpCPU = regexp.MustCompile(`\d+\.\d\d CPU-s per GiB moved`)
