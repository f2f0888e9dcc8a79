package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/control"
	"github.com/twincrypt/twincrypt/measure/metrics"
	"github.com/twincrypt/twincrypt/measure/printable"
	"github.com/twincrypt/twincrypt/measure/trace"
)

func newTraceCmd() *cobra.Command {
	var interval time.Duration
	var count int
	var pids []int
	var asJSON, allowRemote bool
	var metricsAddr, metricsTokenFile string
	cmd := &cobra.Command{
		Use:   "trace [flags] TARGET...",
		Short: "Time every operation in the kernel: syscalls, FUSE round trips, block requests",
		Long: `Trace, with eBPF programs in the kernel, what applications wait for on each
TARGET (a mount point or any path on a filesystem: ours, native, dm-crypt,
eCryptfs, gocryptfs, securefs, ...):

  syscall  every filesystem system call, entry to exit (stat, openat, read,
           write, unlinkat, ...): the latency the application sees;
  fuse     every FUSE request, queued by the kernel to replied: the round
           trip through the transport and the daemon (FUSE targets only);
  block    every block request, issued to completed, on the disks below
           (block-device targets only).

Every INTERVAL it prints what happened in that interval, per operation:
count, errors, mean, p50, p99 and max. On a twincrypt mount it also asks the
daemon for its own timing of the same interval and splits each FUSE request
into where its microseconds go: round trip = daemon handler (of which crypto
and lower I/O) + transport and queueing.

By default every process's system calls are timed; --pid follows only the
given processes and the children they start after tracing begins.

--metrics ADDR serves the kernel-side histograms to Prometheus on
http://ADDR/metrics while tracing, as twincrypt_kernel_op_duration_seconds
and twincrypt_kernel_op_errors_total labelled by mount (the target), layer
(syscall, fuse, block) and op, with the buckets of the daemon's
twincrypt_op_duration_seconds ('mount --metrics'), so both sides of a
mount can be charted together. Loopback only unless --metrics-allow-remote.

Needs root (or CAP_BPF and CAP_PERFMON), kernel BTF and the raw_syscalls,
fuse and block tracepoints (the fuse ones are recent: 6.18 has them); without them it
says in one line what is missing. Cost while attached (kernel CPU, measured
on a 2-core EPYC VM, docs/tracing.md): about 0.3 µs on every system call of
every process on the machine, 1 to 1.5 µs on each timed call, about 1.2 µs on
each FUSE request of a target. Trace for distributions; compare wall times
untraced. Nothing remains attached once trace exits, killed or not.`,
		Example: `  twincrypt trace ~/vault
  twincrypt trace --interval 10s --count 1 ~/vault /srv/plain
  twincrypt trace --pid $(pgrep -x tar) ~/vault`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s needs at least one TARGET", c.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usageErrorf("--interval must be positive")
			}
			if metricsAddr != "" {
				if err := metrics.CheckAddr(metricsAddr, allowRemote); err != nil {
					return usageErrorf("--metrics: %v", err)
				}
			}
			tr, err := trace.New(trace.Options{Pids: pids, AllProcesses: len(pids) == 0})
			if err != nil {
				return err
			}
			defer tr.Close()
			var targets []string
			for _, a := range args {
				abs, err := filepath.Abs(a)
				if err != nil {
					return err
				}
				if _, err := tr.AddTarget(abs); err != nil {
					return err
				}
				targets = append(targets, abs)
			}
			if metricsAddr != "" {
				o := metrics.Options{Addr: metricsAddr}
				if metricsTokenFile != "" {
					var err error
					if o.Token, err = metrics.ReadToken(metricsTokenFile); err != nil {
						return err
					}
				}
				srv, err := metrics.ListenCollector(o, trace.NewCollector(tr.Snapshot))
				if err != nil {
					return err
				}
				defer srv.Close()
				fmt.Fprintf(cmd.ErrOrStderr(), "trace: metrics on http://%s/metrics\n", srv.Addr())
			}
			for _, n := range tr.Notes() {
				fmt.Fprintln(cmd.ErrOrStderr(), "trace: not traced:", n)
			}
			who := "every process"
			if len(pids) > 0 {
				who = fmt.Sprintf("processes %v and their new children", pids)
			}
			// Printed once the programs are attached and the first
			// snapshots taken: from here on every operation on the
			// targets is in the next interval.
			ids := tr.ProgramIDs()
			ready := func() {
				fmt.Fprintf(cmd.ErrOrStderr(), "trace: tracing %d target(s), %s, every %s (BPF program ids %v)\n", len(targets), who, interval, ids)
			}
			return runTrace(cmd.OutOrStdout(), tr, targets, interval, count, asJSON, ready)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "print every `INTERVAL`")
	cmd.Flags().IntVar(&count, "count", 0, "stop after `N` intervals (0: until interrupted)")
	cmd.Flags().IntSliceVar(&pids, "pid", nil, "time only the system calls of process `PID` and its new children (repeatable)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per interval")
	cmd.Flags().StringVar(&metricsAddr, "metrics", "", "serve the kernel-side histograms to Prometheus on `ADDR`: HOST:PORT (loopback), which every local user can read unless --metrics-token-file is given, or unix:PATH (0600, this user and root)")
	cmd.Flags().StringVar(&metricsTokenFile, "metrics-token-file", "", "require the bearer token in `FILE` (mode 0600) of every /metrics request: Prometheus' authorization: credentials_file")
	cmd.Flags().BoolVar(&allowRemote, "metrics-allow-remote", false, "let --metrics listen on an address other machines can reach")
	return cmd
}

// traceInterval is one interval of trace's output.
type traceInterval struct {
	Seconds float64          `json:"seconds"`
	Targets []traceTargetOut `json:"targets"`
}

type traceTargetOut struct {
	Target string          `json:"target"`
	Series []trace.Series  `json:"series"`
	Stats  []measure.Stats `json:"stats"` // the series' figures, in order
	Where  []trace.Where   `json:"where,omitempty"`
}

func runTrace(out io.Writer, tr *trace.Tracer, targets []string, interval time.Duration, count int, asJSON bool, ready func()) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	prev, err := tr.Snapshot()
	if err != nil {
		return err
	}
	daemonPrev := map[string]measure.Snapshot{}
	for _, t := range targets {
		if snap, err := control.Query(t); err == nil {
			daemonPrev[t] = snap
		}
	}
	ready()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := 0; count == 0 || i < count; i++ {
		stop := false
		select {
		case <-tick.C:
		case <-sigs:
			stop = true
		}
		cur, err := tr.Snapshot()
		if err != nil {
			return err
		}
		win := cur.Sub(prev)
		iv := traceInterval{Seconds: cur.Taken.Sub(prev.Taken).Seconds()}
		for _, t := range targets {
			to := traceTargetOut{Target: t}
			for _, s := range win.Series {
				if s.Target == t {
					to.Series = append(to.Series, s)
					to.Stats = append(to.Stats, s.Stats())
				}
			}
			if dp, ok := daemonPrev[t]; ok {
				if dc, err := control.Query(t); err == nil {
					to.Where = trace.WhereOf(win, t, measure.Deltas(dc.Ops, dp.Ops))
					daemonPrev[t] = dc
				}
			}
			iv.Targets = append(iv.Targets, to)
		}
		if asJSON {
			if err := json.NewEncoder(out).Encode(iv); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(out, "%s, last %.1f s\n", cur.Taken.Format("15:04:05"), iv.Seconds)
			for _, to := range iv.Targets {
				fmt.Fprintf(out, "\n%s\n", printable.String(to.Target))
				win.Table(out, to.Target)
				if len(to.Where) > 0 {
					fmt.Fprintln(out, "\nwhere the microseconds go (FUSE requests):")
					trace.WhereTable(out, to.Where)
				}
			}
			fmt.Fprintln(out)
		}
		prev = cur
		if stop {
			return nil
		}
	}
	return nil
}
