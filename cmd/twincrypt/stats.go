package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/measure/control"
)

func newStatsCmd() *cobra.Command {
	var asJSON bool
	var watch time.Duration
	cmd := &cobra.Command{
		Use:   "stats [flags] MNT",
		Short: "Show the live per-operation latency of a mounted filesystem",
		Long: `Ask the daemon serving MNT for its statistics: per operation the count,
errors, p50/p99/max latency, throughput and the share of time spent in crypto
and in the lower filesystem; in mirror mode the same for the plaintext twin
and the ratio between them; the daemon's CPU time and CPU seconds per GiB
moved.

The daemon answers on a Unix socket (mode 0600 in a 0700 directory:
/run/twincrypt as root, else $XDG_RUNTIME_DIR/twincrypt) and only to its own
user and root; stats in turn reads an answer only from a server running as
this user or root, and shows names from it with control characters quoted.`,
		Example: `  twincrypt stats ~/vault
  twincrypt stats --watch 2s ~/vault
  twincrypt stats --json ~/vault | jq '.ops[] | select(.op=="write")'`,
		Args: exactArgs(1, "MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			mnt, err := cleanMountPath(args[0])
			if err != nil {
				return err
			}
			for {
				snap, err := control.Query(mnt)
				if err != nil {
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
				out := cmd.OutOrStdout()
				if asJSON {
					enc := json.NewEncoder(out)
					enc.SetIndent("", "  ")
					if err := enc.Encode(snap); err != nil {
						return err
					}
				} else {
					if watch > 0 {
						fmt.Fprint(out, "\x1b[H\x1b[2J")
					}
					snap.Table(out)
				}
				if watch <= 0 {
					return nil
				}
				time.Sleep(watch)
			}
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&watch, "watch", 0, "refresh every `INTERVAL` (e.g. 2s) until interrupted")
	return cmd
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
