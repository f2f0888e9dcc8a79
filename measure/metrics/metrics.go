// Package metrics exposes a mount's statistics to Prometheus.
//
// Nothing is added to the work of an operation: the collector reads the
// recorder's existing per-operation counters and HDR histograms when
// Prometheus scrapes (a snapshot, the one `twincrypt stats` shows), and
// folds each histogram into the fixed buckets of measure.BucketBoundsNs.
// With --metrics off there is no collector, no listener and no cost.
//
// The series, labelled by mount, op and side ("mount" for the mount
// itself, "twin" for the plaintext twin of mirror mode):
//
//	twincrypt_op_duration_seconds          histogram of each operation's total latency
//	twincrypt_op_crypto_seconds_total      time spent in crypto (sum over operations)
//	twincrypt_op_lower_seconds_total       time spent in lower-filesystem calls (sum)
//	twincrypt_op_errors_total{errno}       failures by errno name
//	twincrypt_op_bytes_total               bytes read or written
//	twincrypt_oplog_lines_total            op log lines written (only with an op log)
//	twincrypt_oplog_dropped_total          op log lines dropped (only with an op log)
//	twincrypt_daemon_cpu_seconds_total{mode} the daemon's CPU time, user and system
//	twincrypt_mount_start_time_seconds     when the mount's recorder started
//
// The histograms count operations (their _count) and sum their latency
// (their _sum); crypto and lower are sums only, because the recorder keeps
// no distribution of them: rate(crypto)/rate(_sum) is their share.
//
// The HTTP endpoint also serves the standard process_* collector (CPU,
// memory, descriptors of the daemon) and go_* runtime metrics.
package metrics

import (
	"bufio"
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"

	"github.com/twincrypt/twincrypt/measure"
)

var (
	opLabels    = []string{"mount", "op", "side"}
	descLatency = prometheus.NewDesc("twincrypt_op_duration_seconds",
		"Latency of filesystem operations, from request to reply.", opLabels, nil)
	descCrypto = prometheus.NewDesc("twincrypt_op_crypto_seconds_total",
		"Time operations spent encrypting, decrypting and transforming names.", opLabels, nil)
	descLower = prometheus.NewDesc("twincrypt_op_lower_seconds_total",
		"Time operations spent in lower-filesystem system calls.", opLabels, nil)
	descErrors = prometheus.NewDesc("twincrypt_op_errors_total",
		"Operations that failed, by errno.", append(append([]string{}, opLabels...), "errno"), nil)
	descBytes = prometheus.NewDesc("twincrypt_op_bytes_total",
		"Bytes moved by read and write operations.", opLabels, nil)
	descLogLines = prometheus.NewDesc("twincrypt_oplog_lines_total",
		"Op log lines written.", []string{"mount"}, nil)
	descLogDropped = prometheus.NewDesc("twincrypt_oplog_dropped_total",
		"Op log lines dropped because the log's writer fell behind.", []string{"mount"}, nil)
	descCPU = prometheus.NewDesc("twincrypt_daemon_cpu_seconds_total",
		"CPU time of the daemon serving the mount.", []string{"mount", "mode"}, nil)
	descStart = prometheus.NewDesc("twincrypt_mount_start_time_seconds",
		"Unix time the mount's statistics started.", []string{"mount"}, nil)
)

// Collector is a prometheus.Collector over a source of snapshots: the
// daemon's recorder, or a snapshot fetched from its socket.
type Collector struct {
	snap func() measure.Snapshot
}

// NewCollector returns a collector that calls snap at every scrape.
func NewCollector(snap func() measure.Snapshot) *Collector {
	return &Collector{snap: snap}
}

// Describe sends the descriptors of every series the collector may send.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLatency, descCrypto, descLower, descErrors,
		descBytes, descLogLines, descLogDropped, descCPU, descStart} {
		ch <- d
	}
}

// Collect takes a snapshot and sends its series.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	sides := []struct {
		name string
		ops  []measure.Stats
	}{{"mount", s.Ops}, {"twin", s.Twin}}
	for _, side := range sides {
		for _, o := range side.ops {
			labels := []string{s.Mount, o.Op, side.name}
			ch <- prometheus.MustNewConstHistogram(descLatency, uint64(o.Count),
				float64(o.TotalNs)/1e9, bucketsOf(o), labels...)
			ch <- prometheus.MustNewConstMetric(descCrypto, prometheus.CounterValue, float64(o.CryptoNs)/1e9, labels...)
			ch <- prometheus.MustNewConstMetric(descLower, prometheus.CounterValue, float64(o.LowerNs)/1e9, labels...)
			ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(o.Bytes), labels...)
			names := make([]string, 0, len(o.Errnos))
			for name := range o.Errnos {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue,
					float64(o.Errnos[name]), append(labels, name)...)
			}
		}
	}
	if s.OpLog {
		ch <- prometheus.MustNewConstMetric(descLogLines, prometheus.CounterValue, float64(s.LogLines), s.Mount)
		ch <- prometheus.MustNewConstMetric(descLogDropped, prometheus.CounterValue, float64(s.LogDropped), s.Mount)
	}
	if s.CPUUserS+s.CPUSysS > 0 {
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, s.CPUUserS, s.Mount, "user")
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, s.CPUSysS, s.Mount, "system")
	}
	if !s.Since.IsZero() {
		ch <- prometheus.MustNewConstMetric(descStart, prometheus.GaugeValue,
			float64(s.Since.UnixNano())/1e9, s.Mount)
	}
}

// bucketsOf maps a Stats' cumulative buckets to Prometheus' form (upper
// bound in seconds -> cumulative count). A Stats without buckets (from an
// older daemon) gives only the +Inf bucket, which is the count.
func bucketsOf(o measure.Stats) map[float64]uint64 {
	b := make(map[float64]uint64, len(measure.BucketBoundsNs))
	if len(o.Buckets) != len(measure.BucketBoundsNs) {
		return b
	}
	for i, bound := range measure.BucketBoundsNs {
		b[float64(bound)/1e9] = uint64(o.Buckets[i])
	}
	return b
}

// WriteText writes the snapshot in Prometheus' text exposition format,
// the form node_exporter's textfile collector reads.
func WriteText(w io.Writer, s measure.Snapshot) error {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(func() measure.Snapshot { return s })); err != nil {
		return err
	}
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range families {
		if err := enc.Encode(mf); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotLoopback refuses a listen address that other machines can reach.
var ErrNotLoopback = errors.New("not a loopback address")

// UnixPrefix starts a listen address that is a Unix socket's path
// ("unix:/run/vault-metrics.sock").
const UnixPrefix = "unix:"

// CheckAddr checks a listen address (HOST:PORT, or unix:PATH). Unless
// allowRemote, the host must be a loopback address or "localhost": the
// metrics name the mount point and show its activity, which is nobody
// else's business.
func CheckAddr(addr string, allowRemote bool) error {
	if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("metrics address %q: the socket's path must be absolute", addr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w (want HOST:PORT, e.g. 127.0.0.1:9101, or unix:PATH)", addr, err)
	}
	if port == "" {
		return fmt.Errorf("metrics address %q: no port", addr)
	}
	if allowRemote {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	if host == "" {
		host = "all interfaces"
	}
	return fmt.Errorf("metrics address %q (%s): %w; use 127.0.0.1:PORT or [::1]:PORT, or --metrics-allow-remote to serve other machines", addr, host, ErrNotLoopback)
}

// ReadToken reads a bearer token from path, as Prometheus reads its
// credentials_file (surrounding white space dropped). The file must be a
// regular file (not a symlink) that neither its group nor others may
// read: the token is the key to the metrics.
func ReadToken(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("metrics token file: %w", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("metrics token file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("metrics token file %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("metrics token file %s: mode %04o lets others read it; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("metrics token file: %w", err)
	}
	tok := bytes.TrimSpace(b)
	if len(tok) == 0 {
		return nil, fmt.Errorf("metrics token file %s is empty", path)
	}
	return tok, nil
}

// Options are how Listen serves.
type Options struct {
	// Addr is HOST:PORT or unix:PATH, already checked with CheckAddr.
	Addr string
	// Token, if set, is required of every request as
	// "Authorization: Bearer TOKEN" (what Prometheus sends with
	// authorization: credentials_file or bearer_token_file).
	Token []byte
}

// Server serves /metrics over HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen starts serving /metrics as o says from snap, with the process
// and Go runtime collectors alongside. A Unix socket is made 0600 and
// admits only peers of the daemon's user and root (SO_PEERCRED), as the
// stats socket does; a TCP port any local user can reach, which a token
// closes.
func Listen(o Options, snap func() measure.Snapshot) (*Server, error) {
	return ListenCollector(o, NewCollector(snap))
}

// ListenCollector is Listen for another collector of twincrypt series
// (kernel tracing's), with the same process and Go runtime collectors.
func ListenCollector(o Options, c prometheus.Collector) (*Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	s := &Server{}
	var err error
	if path, ok := strings.CutPrefix(o.Addr, UnixPrefix); ok {
		s.ln, err = listenUnix(path)
	} else {
		s.ln, err = net.Listen("tcp", o.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "twincrypt metrics: see /metrics")
	})
	var h http.Handler = mux
	if len(o.Token) > 0 {
		h = requireToken(o.Token, mux)
	}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(s.ln)
	return s, nil
}

// requireToken answers 401 to a request without the bearer token.
func requireToken(token []byte, next http.Handler) http.Handler {
	want := append([]byte("Bearer "), token...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="twincrypt metrics"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listenUnix makes the socket at path, 0600. A socket left there by a
// daemon that was killed is replaced; anything else (a live socket, a
// symlink, a file) is refused.
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another process listens there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	// Made 0600 from the start (the umask applies at bind): no moment in
	// which others may connect.
	old := unix.Umask(0o177)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	return &peerListener{UnixListener: ln.(*net.UnixListener)}, nil
}

// peerListener admits connections of the daemon's user and root only
// (SO_PEERCRED), whatever the socket's mode has become; others get a 403
// and the connection closed.
type peerListener struct{ *net.UnixListener }

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if peerAllowed(c) {
			return c, nil
		}
		go refuse(c)
	}
}

// refuse answers a connection of a peer not admitted with 403, after
// reading its request's head (a reply to an unread request would be cut
// off by the close).
func refuse(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if req, err := http.ReadRequest(bufio.NewReader(io.LimitReader(c, 16<<10))); err == nil {
		req.Body.Close()
	}
	io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 10\r\nConnection: close\r\n\r\nforbidden\n")
	c.CloseWrite()
}

// peerAllowed admits the daemon's own user and root.
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return false
	}
	return cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// Addr is the address the server listens on (with the port chosen when
// addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server (and removes its socket).
func (s *Server) Close() error { return s.srv.Close() }
