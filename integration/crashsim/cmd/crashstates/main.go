// Command crashstates runs the crash-state exploration of
// integration/crashsim (make crash-states, make crash-states-long): every
// workload on every variant, its crash states checked, one line per
// workload and variant, and last the line
//
//	crash states: N explored, M violations
//
// It exits 1 when there is a violation, 2 when the harness fails. It needs
// root (the recording layer and the mounts are FUSE mounts) and the
// sqlite3, git and tar commands.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twincrypt/twincrypt/integration/crashsim"
)

func main() {
	size := flag.String("size", "short", "short (a few minutes, CI) or long (nightly)")
	states := flag.Int("states", 0, "crash states per workload and variant (0: as -size says)")
	seed := flag.Int64("seed", 1, "seed of the sampling")
	only := flag.String("only", "", "run only workload/variant pairs containing this substring")
	keep := flag.String("keep", "", "directory that receives every state with a violation (lower directory, log, violations)")
	flag.Parse()

	opt := crashsim.Options{Seed: *seed, Subsets: 2, Out: os.Stdout, KeepDir: *keep}
	switch *size {
	case "short":
		opt.MaxStates = 40
	case "long":
		opt.MaxStates, opt.Subsets = 2000, 6
	default:
		fmt.Fprintf(os.Stderr, "crashstates: -size %q: want short or long\n", *size)
		os.Exit(2)
	}
	if *states > 0 {
		opt.MaxStates = *states
	}
	if *only != "" {
		opt.Only = func(w, v string) bool { return strings.Contains(w+"/"+v, *only) }
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "crashstates: needs root (FUSE mounts with DirectMount); skipped")
		os.Exit(0)
	}
	for _, tool := range []string{"sqlite3", "git", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "crashstates: %s is missing (Debian package %s)\n", tool, tool)
			os.Exit(2)
		}
	}
	base, err := os.MkdirTemp("", "crashstates-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer os.RemoveAll(base)
	t0 := time.Now()
	fmt.Printf("crash-state exploration: %s (%d states per workload and variant at most, seed %d)\n", *size, opt.MaxStates, *seed)
	res, err := crashsim.Run(base, crashsim.Workloads, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashstates:", err)
		fmt.Println(res.Summary())
		os.RemoveAll(base)
		os.Exit(2)
	}
	fmt.Printf("%v\n", time.Since(t0).Round(time.Second))
	fmt.Println(res.Summary())
	if len(res.Violations) > 0 {
		os.RemoveAll(base)
		os.Exit(1)
	}
}
