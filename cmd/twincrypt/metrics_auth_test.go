package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// asUID1000 runs a command as uid 1000 and returns its output.
func asUID1000(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	c := exec.Command(name, args...)
	c.Dir = "/"
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	out, err := c.CombinedOutput()
	return string(out), err
}

// getStatus GETs u with the Authorization header auth ("" for none) and
// returns the status code and body.
func getStatus(t *testing.T, c *http.Client, u, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	noErr(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Fixed here (issue #39, finding 7): /metrics had no authentication, so
// any local user read the mount point and exact byte and error counts
// that the stats socket refuses them. With --metrics-token-file, a
// request without the bearer token gets 401: uid 1000 with curl, and a
// real Prometheus job without credentials (up 0), while the job with
// authorization: credentials_file scrapes the series. A TCP endpoint
// without a token stays readable by every local user, as --help says.
func TestMetricsBearerToken(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user")
	}
	const promBin = "/usr/bin/prometheus"
	if _, err := os.Stat(promBin); err != nil {
		t.Skipf("skipping: a real Prometheus server is needed (apt-get install prometheus): %v", err)
	}
	const token = "s3cret-metrics-token"
	tokenFile := filepath.Join(tempDir(t), "token")
	noErr(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o644))
	r := twincrypt(t, "", "mount", "--passthrough", "--metrics", "127.0.0.1:1", "--metrics-token-file", tokenFile, tempDir(t), newMountpoint(t))
	r.expectExit(t, exitUsage, "mount with a token file others may read")
	if !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("a token file others may read: %q, want a clear refusal", r.stderr)
	}
	noErr(t, os.Chmod(tokenFile, 0o600))

	m := mountWithMetrics(t, "twin", "--metrics-token-file", tokenFile)
	open := mountWithMetrics(t, "twin")
	exercise(t, m.mnt)
	u := "http://" + m.addr + "/metrics"
	c := &http.Client{Timeout: 10 * time.Second}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
		if code, _ := getStatus(t, c, u, auth); code != http.StatusUnauthorized {
			t.Errorf("GET /metrics with Authorization %q: %d, want 401", auth, code)
		}
	}
	code, body := getStatus(t, c, u, "Bearer "+token)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics with the token: %d %s", code, body)
	}
	checkExposition(t, "/metrics with the token", body, m.mnt, false)

	// Another user, without the token: refused; on the endpoint without
	// one: served, mount point and all.
	for _, tc := range []struct {
		addr, want string
	}{{m.addr, "401"}, {open.addr, "200"}} {
		out, err := asUID1000(t, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://"+tc.addr+"/metrics")
		if err != nil || out != tc.want {
			t.Errorf("curl as uid 1000 of %s: %q %v, want %s", tc.addr, out, err, tc.want)
		}
	}

	// The real Prometheus: one job with the token, one without.
	dir := tempDir(t)
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: withtoken
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: [%q]
  - job_name: notoken
    static_configs:
      - targets: [%q]
`, tokenFile, m.addr, m.addr)
	noErr(t, os.WriteFile(cfg, []byte(conf), 0o600))
	query := startPrometheus(t, promBin, cfg, dir)
	for _, c := range []struct{ q, want string }{
		{`up{job="withtoken"}`, "1"},
		{`up{job="notoken"}`, "0"},
		{`sum(twincrypt_op_duration_seconds_count{job="withtoken",op="write",mount="` + m.mnt + `"}) > 0`, ""},
	} {
		query(c.q, c.want)
	}
}

// startPrometheus runs Prometheus with the config cfg (data in dir) until
// the test ends, and returns a function that waits (up to 90 s) until the
// instant query q has a result of value want ("": any).
func startPrometheus(t *testing.T, bin, cfg, dir string) func(q, want string) {
	t.Helper()
	promAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	var out strings.Builder
	prom := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = &out, &out
	if err := prom.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan struct{})
	go func() { prom.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = prom.Process.Kill() // by pid: the server this test started
		<-exited
	})
	deadline := time.Now().Add(90 * time.Second)
	return func(q, want string) {
		t.Helper()
		for {
			got := ""
			c := http.Client{Timeout: 5 * time.Second}
			resp, err := c.Get("http://" + promAddr + "/api/v1/query?query=" + url.QueryEscape(q))
			if err == nil {
				var ans struct {
					Data struct {
						Result []struct {
							Value []any `json:"value"`
						} `json:"result"`
					} `json:"data"`
				}
				if json.NewDecoder(resp.Body).Decode(&ans) == nil && len(ans.Data.Result) == 1 && len(ans.Data.Result[0].Value) == 2 {
					got, _ = ans.Data.Result[0].Value[1].(string)
					if want == "" || got == want {
						resp.Body.Close()
						return
					}
				}
				resp.Body.Close()
			}
			select {
			case <-exited:
				t.Fatalf("prometheus exited: %v\n%s", prom.ProcessState, out.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("prometheus: %s is %q, want %q\n%s", q, got, want, lastLines(out.String(), 20))
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// TestMetricsUnixSocket: --metrics unix:PATH serves /metrics on a Unix
// socket of mode 0600, which uid 1000 cannot connect to; made 0666 behind
// the daemon's back, the daemon still refuses uid 1000 (SO_PEERCRED, 403)
// while root gets the series. The socket goes with the mount.
func TestMetricsUnixSocket(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user")
	}
	dir := tempDir(t)
	for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
		noErr(t, os.Chmod(p, 0o755))
	}
	sock := filepath.Join(dir, "metrics.sock")
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	r := twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--metrics", "unix:relative.sock", tempDir(t), mnt)
	r.expectExit(t, exitUsage, "mount --metrics unix:relative.sock")
	twincrypt(t, "", "mount", "-b", "-q", "--passthrough", "--metrics", "unix:"+sock, tempDir(t), mnt).expectExit(t, 0, "mount --metrics unix:")
	st, err := os.Lstat(sock)
	noErr(t, err)
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("metrics socket mode %v, want a socket 0600", st.Mode())
	}
	exercise(t, mnt)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	code, body := getStatus(t, c, "http://twincrypt/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics over the socket as root: %d %s", code, body)
	}
	checkExposition(t, "/metrics over the socket", body, mnt, false)

	out, err := asUID1000(t, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "http://twincrypt/metrics")
	if err == nil {
		t.Errorf("curl as uid 1000 over the 0600 socket: %q, want no connection", out)
	}
	noErr(t, os.Chmod(sock, 0o666))
	out, err = asUID1000(t, "curl", "-s", "-w", "%{http_code}", "--unix-socket", sock, "http://twincrypt/metrics")
	if err != nil || !strings.HasSuffix(out, "403") || strings.Contains(out, "twincrypt_op") {
		t.Errorf("curl as uid 1000 over a socket made 0666: %q %v, want 403 and no metrics", lastLines(out, 1), err)
	}

	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("%s left behind after the unmount", sock)
	}
}
