package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/integration/bench"
)

// scaleDefaultTargets are the targets of --scale when --targets is not given.
var scaleDefaultTargets = []string{"native", "twin", "crypt-xts", "gocryptfs", "securefs"}

// runBenchScale is `bench --scale`: the scale harness (integration/bench/scale.go).
func runBenchScale(cmd *cobra.Command, f benchFlags) (err error) {
	stderr := cmd.ErrOrStderr()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: find own executable: %w", err)
	}
	for _, n := range f.scale {
		if n < 1 {
			return usageErrorf("--scale: counts must be at least 1, got %d", n)
		}
	}
	var shapes []bench.Shape
	for _, s := range f.shapes {
		switch sh := bench.Shape(strings.TrimSpace(s)); sh {
		case bench.ShapeFlat, bench.ShapeTree:
			shapes = append(shapes, sh)
		default:
			return usageErrorf("--scale-shapes: unknown shape %q (use flat, tree)", s)
		}
	}
	names := f.targets
	if len(names) == 0 {
		names = scaleDefaultTargets
	}
	opts := bench.TargetOptions{Exe: exe, Size: bench.SizeTiny}
	targets, err := bench.SelectTargets(bench.SelectableTargets(opts), names)
	if err != nil {
		return usageErrorf("--targets: %v", err)
	}
	for _, op := range f.scaleOps {
		if !slices.Contains(bench.ScaleOps, op) {
			return usageErrorf("--scale-ops: unknown op %q (known: %s)", op, strings.Join(bench.ScaleOps, ", "))
		}
	}
	repeat := 1
	if cmd.Flags().Changed("repeat") {
		n, err := strconv.Atoi(f.repeat)
		if err != nil || n < 1 {
			return usageErrorf("--repeat with --scale must be a number of at least 1, got %q", f.repeat)
		}
		repeat = n
	}
	run, err := startBench(cmd.Context(), f, stderr)
	if err != nil {
		return err
	}
	defer func() { err = run.end(err) }()
	ctx, ws := run.ctx, run.ws
	machine := bench.DetectMachine()
	machine.Twincrypt = buildVersion()
	args := append([]string{"twincrypt"}, os.Args[1:]...)
	res, runErr := bench.RunScale(ctx, bench.ScaleConfig{
		Targets: targets, Counts: f.scale, Shapes: slices.Clip(shapes), Repeat: repeat, Ops: f.scaleOps,
		Work: ws.Dir, Lower: ws.Desc, Machine: machine, Command: strings.Join(args, " "), Log: stderr,
	})
	if f.out != "" {
		files, werr := bench.WriteScaleOutputs(f.out, res)
		for i := range files {
			files[i] = filepath.Join(f.out, files[i])
		}
		if len(files) > 0 {
			fmt.Fprintf(stderr, "wrote %s\n", strings.Join(files, ", "))
		}
		runErr = errors.Join(runErr, werr)
	} else {
		bench.WriteScaleReport(cmd.OutOrStdout(), res, nil)
	}
	if ctx.Err() != nil {
		return run.interrupted()
	}
	return runErr
}

// runBenchScaleMerge is `bench --scale-merge A.json B.json ... --out DIR`.
func runBenchScaleMerge(cmd *cobra.Command, f benchFlags, args []string) error {
	if len(args) == 0 || f.out == "" {
		return usageErrorf("--scale-merge needs scale.json files as arguments and --out DIR")
	}
	var runs []*bench.ScaleResults
	for _, a := range args {
		r, err := bench.ReadScaleResults(a)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return usageErrorf("--out: %v", err)
	}
	files, err := bench.WriteScaleOutputs(f.out, bench.MergeScaleResults(runs...))
	for i := range files {
		files[i] = filepath.Join(f.out, files[i])
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s\n", strings.Join(files, ", "))
	return err
}
