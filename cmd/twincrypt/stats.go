package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/control"
	"github.com/twincrypt/twincrypt/measure/metrics"
	"github.com/twincrypt/twincrypt/measure/printable"
)

func newStatsCmd() *cobra.Command {
	var asJSON, asProm bool
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "stats [flags] MNT",
		Short: "Show the live per-operation latency of a mounted filesystem",
		Long: `Ask the daemon serving MNT for its statistics: per operation the count,
errors, p50/p99/max latency, throughput and the share of time spent in crypto
and in the lower filesystem; in mirror mode the same for the plaintext twin
and the ratio between them; the daemon's CPU time and CPU seconds per GiB
moved ("-" while less than 1 MiB has moved: the figure would be start-up
CPU over a few bytes).

--watch refreshes every INTERVAL and shows what happened in the last
interval: operations per second, errors, mean latency, p50 and p99 estimated
from latency buckets (1, 2.5, 5 per decade, interpolated: hence "~"),
throughput, crypto and lower shares, CPU use; then the cumulative table since
the mount. When the mount goes away, it says so and exits 0.

--prometheus prints the same statistics in Prometheus' text format (the
series 'mount --metrics' serves, without the process_* and go_* ones), for
node_exporter's textfile collector:
  twincrypt stats --prometheus MNT > /var/lib/node_exporter/twincrypt.prom.$$ &&
    mv /var/lib/node_exporter/twincrypt.prom.$$ /var/lib/node_exporter/twincrypt.prom

The daemon answers on a Unix socket (mode 0600 in a 0700 directory:
/run/twincrypt as root, else $XDG_RUNTIME_DIR/twincrypt) and only to its own
user and root; stats in turn reads an answer only from a server running as
this user or root, and shows names from it with control characters quoted.`,
		Example: `  twincrypt stats ~/vault
  twincrypt stats --watch 2s ~/vault
  twincrypt stats --json ~/vault | jq '.ops[] | select(.op=="write")'
  twincrypt stats --prometheus ~/vault`,
		Args: exactArgs(1, "MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asProm && (asJSON || watch > 0) {
				return usageErrorf("--prometheus prints one exposition; it goes with neither --json nor --watch")
			}
			mnt, err := cleanMountPath(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var prev measure.Snapshot
			seen := false
			for {
				snap, err := control.Query(mnt)
				if err != nil {
					if seen && (errors.Is(err, control.ErrNoDaemon) || !stillMounted(mnt)) {
						// Unmounted while watched: the normal end of a watch.
						fmt.Fprintf(cmd.ErrOrStderr(), "mount went away: %s is no longer served (unmounted)\n", printable.String(args[0]))
						return nil
					}
					if errors.Is(err, control.ErrNoDaemon) {
						if uid, ok := otherUsersMount(mnt); ok {
							// Its socket is in that user's directory, which
							// we may not reach (nor even name).
							return fmt.Errorf("stats of %s: mounted by uid %d: %w", args[0], uid, control.ErrPermission)
						}
						return &classifiedError{class: errMountpoint, err: fmt.Errorf("%s: %w", args[0], err)}
					}
					return fmt.Errorf("stats of %s: %w", args[0], err)
				}
				switch {
				case asProm:
					return metrics.WriteText(out, snap)
				case asJSON:
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(snap); err != nil {
						return err
					}
				case watch > 0:
					fmt.Fprint(out, "\x1b[H\x1b[2J")
					if seen {
						snap.IntervalTable(out, prev)
						fmt.Fprintln(out)
						fmt.Fprint(out, "cumulative: ")
					}
					snap.Table(out)
				default:
					snap.Table(out)
				}
				if watch <= 0 {
					return nil
				}
				prev, seen = snap, true
				time.Sleep(watch)
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&asProm, "prometheus", false, "print Prometheus text exposition (for node_exporter's textfile collector)")
	cmd.Flags().DurationVar(&watch, "watch", 0, "refresh every `INTERVAL` (e.g. 2s), showing that interval's rates and latencies, until interrupted or unmounted")
	return cmd
}

// stillMounted reports whether a filesystem is mounted at mnt (a watch
// whose query failed halfway through an unmount gets EOF or a reset, not
// "no daemon").
func stillMounted(mnt string) bool {
	_, mounted, err := findMount(mnt)
	return err != nil || mounted
}

// otherUsersMount returns the uid of the user who mounted the FUSE
// filesystem at mnt when that is neither us nor are we root.
func otherUsersMount(mnt string) (int, bool) {
	if os.Geteuid() == 0 {
		return 0, false
	}
	m, mounted, err := findMount(mnt)
	if err != nil || !mounted {
		return 0, false
	}
	uid, ok := m.fuseOwner()
	return uid, ok && uid != os.Geteuid()
}
