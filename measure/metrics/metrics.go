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
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"time"

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

// CheckAddr checks a listen address (HOST:PORT). Unless allowRemote, the
// host must be a loopback address or "localhost": the metrics name the
// mount point and show its activity, which is nobody else's business.
func CheckAddr(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: %w (want HOST:PORT, e.g. 127.0.0.1:9101)", addr, err)
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

// Server serves /metrics over HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen starts serving /metrics on addr (already checked with CheckAddr)
// from snap, with the process and Go runtime collectors alongside.
func Listen(addr string, snap func() measure.Snapshot) (*Server, error) {
	return ListenCollector(addr, NewCollector(snap))
}

// ListenCollector is Listen for another collector of twincrypt series
// (kernel tracing's), with the same process and Go runtime collectors.
func ListenCollector(addr string, c prometheus.Collector) (*Server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	ln, err := net.Listen("tcp", addr)
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
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go s.srv.Serve(ln)
	return s, nil
}

// Addr is the address the server listens on (with the port chosen when
// addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }
