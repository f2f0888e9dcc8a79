package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/control"
	"github.com/twincrypt/twincrypt/measure/metrics"
	"github.com/twincrypt/twincrypt/measure/privfile"
)

// instrFlags choose what a mount measures.
type instrFlags struct {
	noStats     bool
	oplog       string
	oplogPaths  bool
	oplogSample int
	oplogMaxMB  int64
	mirror      string
	summary     string
	// metrics is the HOST:PORT or unix:PATH of the Prometheus endpoint
	// ("" for none).
	metrics            string
	metricsAllowRemote bool
	// metricsTokenFile holds the bearer token /metrics requires.
	metricsTokenFile string
}

func (f *instrFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.oplog, "oplog", "", "write one JSON line per operation to `FILE` (asynchronous; never slows an op)")
	fl.BoolVar(&f.oplogPaths, "oplog-paths", false, "include plaintext paths in the op log (they are sensitive)")
	fl.IntVar(&f.oplogSample, "oplog-sample", 1, "keep 1 in `N` operations in the op log")
	fl.Int64Var(&f.oplogMaxMB, "oplog-max-mb", 1024, "rotate the op log to FILE.1 past `MiB` (0: no cap)")
	fl.StringVar(&f.mirror, "mirror", "", "mirror mode: apply every operation also to the plaintext twin `TWINDIR` and time both (writes PLAINTEXT to TWINDIR; it must start as a copy of the volume's plaintext, empty for an empty volume)")
	fl.StringVar(&f.summary, "summary", "", "write the statistics at unmount to `FILE` (JSON if it ends in .json)")
	fl.BoolVar(&f.noStats, "no-stats", false, "turn timing off (no histograms, no stats socket, no op log)")
	fl.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics: HOST:PORT (loopback only, e.g. 127.0.0.1:9101), which every local user can read (the mount point, counts of operations, bytes and errors by errno) unless --metrics-token-file is given; or unix:PATH, a socket only this user and root may use")
	fl.BoolVar(&f.metricsAllowRemote, "metrics-allow-remote", false, "let --metrics listen on an address other machines can reach")
	fl.StringVar(&f.metricsTokenFile, "metrics-token-file", "", "require the bearer token in `FILE` (mode 0600) of every /metrics request: Prometheus' authorization: credentials_file")
}

// args returns the flags for the background child.
func (f *instrFlags) args() []string {
	var a []string
	if f.noStats {
		a = append(a, "--no-stats")
	}
	if f.oplog != "" {
		a = append(a, "--oplog", f.oplog, "--oplog-sample", strconv.Itoa(f.oplogSample),
			"--oplog-max-mb", strconv.FormatInt(f.oplogMaxMB, 10))
		if f.oplogPaths {
			a = append(a, "--oplog-paths")
		}
	}
	if f.mirror != "" {
		a = append(a, "--mirror", f.mirror)
	}
	if f.summary != "" {
		a = append(a, "--summary", f.summary)
	}
	if f.metrics != "" {
		a = append(a, "--metrics", f.metrics)
		if f.metricsAllowRemote {
			a = append(a, "--metrics-allow-remote")
		}
		if f.metricsTokenFile != "" {
			a = append(a, "--metrics-token-file", f.metricsTokenFile)
		}
	}
	return a
}

// check validates the flags and makes their paths absolute (the
// background child runs in "/").
func (f *instrFlags) check(lower, mnt string) error {
	if f.noStats && (f.oplog != "" || f.mirror != "" || f.summary != "" || f.metrics != "") {
		return usageErrorf("--no-stats turns off what --oplog, --mirror, --summary and --metrics need")
	}
	if f.metrics != "" {
		if err := metrics.CheckAddr(f.metrics, f.metricsAllowRemote); err != nil {
			return usageErrorf("%v", err)
		}
	}
	if sock, ok := strings.CutPrefix(f.metrics, metrics.UnixPrefix); ok && (sock == mnt || isWithin(sock, mnt)) {
		return usageErrorf("the metrics socket %s is inside the mount point", sock)
	}
	if f.metricsTokenFile != "" {
		if f.metrics == "" {
			return usageErrorf("--metrics-token-file goes with --metrics")
		}
		abs, err := filepath.Abs(f.metricsTokenFile)
		if err != nil {
			return err
		}
		f.metricsTokenFile = abs
		// Read now, so that a bad file fails the command that was
		// given it, not only the background daemon.
		if _, err := metrics.ReadToken(abs); err != nil {
			return usageErrorf("%v", err)
		}
	}
	if f.oplogSample < 1 {
		return usageErrorf("--oplog-sample must be at least 1")
	}
	for _, p := range []*string{&f.oplog, &f.summary} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
			if isWithin(abs, mnt) {
				return usageErrorf("%s is inside the mount point: the daemon would log into itself", abs)
			}
		}
	}
	if f.mirror != "" {
		real, err := realDir(f.mirror, "mirror directory")
		if err != nil {
			return usageErrorf("%v", err)
		}
		if real == lower || real == mnt || isWithin(real, lower) || isWithin(real, mnt) || isWithin(lower, real) || isWithin(mnt, real) {
			return usageErrorf("the mirror directory %s must be apart from LOWER and MNT", real)
		}
		f.mirror = real
	}
	return nil
}

// instrument is the measuring apparatus of one running mount.
type instrument struct {
	f      instrFlags
	rec    *measure.Recorder
	oplog  *measure.OpLog
	socket *control.Server
	prom   *metrics.Server
	log    zerolog.Logger
	// transport names the mount's transport (set once mounted).
	transport string
	// kernelPassthrough labels a twin whose reads and writes the
	// kernel serves.
	kernelPassthrough bool
}

// startInstrument builds the recorder and op log (before the mount).
func startInstrument(f instrFlags, mnt string, log zerolog.Logger) (*instrument, error) {
	in := &instrument{f: f, log: log}
	if f.noStats {
		return in, nil
	}
	in.rec = measure.NewRecorder(mnt)
	if f.summary != "" {
		// Written at unmount; a planted symlink or another user's file
		// is refused now, before anything is mounted.
		sf, err := privfile.Open(f.summary, false)
		if err != nil {
			return nil, fmt.Errorf("summary: %w", err)
		}
		sf.Close()
	}
	if f.oplog != "" {
		maxBytes := f.oplogMaxMB << 20
		if f.oplogMaxMB == 0 {
			maxBytes = -1
		}
		l, err := measure.OpenOpLog(f.oplog, measure.OpLogOptions{
			Mount: mnt, Sample: f.oplogSample, Paths: f.oplogPaths, MaxBytes: maxBytes,
		})
		if err != nil {
			return nil, fmt.Errorf("op log: %w", err)
		}
		in.oplog = l
		in.rec.SetOpLog(l)
	}
	if f.metrics != "" {
		// Listening before the mount: a port in use fails the mount
		// rather than leaving it unwatched.
		o := metrics.Options{Addr: f.metrics}
		var err error
		if f.metricsTokenFile != "" {
			o.Token, err = metrics.ReadToken(f.metricsTokenFile)
		}
		var srv *metrics.Server
		if err == nil {
			srv, err = metrics.Listen(o, in.snapshot)
		}
		if err != nil {
			if in.oplog != nil {
				in.oplog.Close()
			}
			return nil, err
		}
		in.prom = srv
	}
	return in, nil
}

// snapshot is the recorder's state plus the daemon's CPU time.
func (in *instrument) snapshot() measure.Snapshot {
	s := in.rec.Snapshot()
	s.Transport = in.transport
	s.KernelPassthrough = in.kernelPassthrough
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.CPUUserS = float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6
		s.CPUSysS = float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
	}
	return s
}

// listen opens the stats socket once the mount is up. A socket that
// cannot be made is a warning, not a failed mount.
func (in *instrument) listen(mnt string) {
	if in.rec == nil {
		return
	}
	s, err := control.Listen(mnt, in.snapshot)
	if errors.Is(err, control.ErrUnsafeDir) {
		// The message says it all: "... is a symlink ...: refusing it;
		// live stats off".
		in.log.Warn().Msg(err.Error())
		return
	}
	if err != nil {
		in.log.Warn().Err(err).Msg("no live stats for this mount")
		return
	}
	in.socket = s
}

// stop closes the socket and the op log and reports the summary to w
// (unless quiet) and to --summary.
func (in *instrument) stop(w io.Writer, quiet bool) error {
	if in.rec == nil {
		return nil
	}
	if in.socket != nil {
		in.socket.Close()
	}
	if in.prom != nil {
		in.prom.Close()
	}
	var errs []error
	if in.oplog != nil {
		if err := in.oplog.Close(); err != nil {
			errs = append(errs, fmt.Errorf("op log: %w", err))
		}
	}
	snap := in.snapshot()
	if !quiet {
		snap.Table(w)
	}
	if in.f.summary != "" {
		var buf bytes.Buffer
		if strings.HasSuffix(in.f.summary, ".json") {
			enc := json.NewEncoder(&buf)
			enc.SetIndent("", "  ")
			enc.Encode(snap)
		} else {
			snap.Table(&buf)
		}
		if err := privfile.WriteFile(in.f.summary, buf.Bytes()); err != nil {
			errs = append(errs, fmt.Errorf("summary: %w", err))
		}
	}
	return errors.Join(errs...)
}
