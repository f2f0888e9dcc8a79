package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/measure/printable"
	"github.com/twincrypt/twincrypt/measure/report"
)

type reportFlags struct {
	top       int
	buckets   int
	csv, json bool
	chart     string
	chartTime string
	rotated   bool
}

func newReportCmd() *cobra.Command {
	var f reportFlags
	cmd := &cobra.Command{
		Use:   "report [flags] LOG...",
		Short: "Summarise op logs: latency per op, twin overhead, slowest ops, charts",
		Long: `Summarise one or more op logs (the JSON lines a mount writes with its op
log on) as a latency table per op: count, errors, p50/p90/p99/p99.9/max,
MiB/s over the log's time span, and the share of op time spent in crypto
and in the lower filesystem. Logs written in mirror mode also carry the
latency of each op on the passthrough twin; the report then compares the
two side by side (crypt/twin ratios of p50 and of the mean, and the
differences in µs). Then come the slowest ops and latency over time.

Logs are streamed, so they may be of any size. A LOG ending in .gz is
decompressed; "-" reads standard input. An op log that was rotated keeps
its older part in LOG.1, which is read too unless --rotated=false.
Malformed lines are counted and skipped.

--chart draws the latency CDF of each op class (on a log axis; in mirror
mode the twin dashed beside the encrypted mount); --chart-time draws p50
and p99 of all ops per time bucket, against the time since the log's
first op.

` + opClassHelp(),
		Example: `  twincrypt report /var/log/twincrypt/ops.log
  twincrypt report --json ops.log > ops.json
  twincrypt report --chart cdf.svg --chart-time time.png ops.log.1 ops.log`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s needs at least one LOG", c.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.csv && f.json {
				return usageErrorf("--csv and --json exclude each other")
			}
			if f.top < 0 {
				return usageErrorf("--top must not be negative")
			}
			if f.buckets < 2 {
				return usageErrorf("--buckets must be at least 2")
			}
			for _, c := range []string{f.chart, f.chartTime} {
				if c == "" {
					continue
				}
				if err := report.CheckChartPath(c); err != nil {
					return &classifiedError{class: errUsage, err: err}
				}
			}
			return runReport(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.top, "top", report.DefaultTop, "show the `N` slowest ops (0: none)")
	fl.IntVar(&f.buckets, "buckets", report.DefaultBuckets, "at most `N` buckets in the latency-over-time series")
	fl.BoolVar(&f.csv, "csv", false, "print one CSV row per mount and op instead of the table")
	fl.BoolVar(&f.json, "json", false, "print the whole report as JSON instead of the table")
	fl.StringVar(&f.chart, "chart", "", "also draw latency CDFs per op class to `FILE` (.svg, .png or .pdf)")
	fl.StringVar(&f.chartTime, "chart-time", "", "also draw p50/p99 latency over time to `FILE` (.svg, .png or .pdf)")
	fl.BoolVar(&f.rotated, "rotated", true, "also read LOG.1, the rotated older part of each LOG, when it exists")
	return cmd
}

// opClassHelp defines the op classes the charts and tables group ops by,
// for the commands' help.
func opClassHelp() string {
	var b strings.Builder
	b.WriteString("Op classes:\n")
	for _, d := range report.ClassDefinitions() {
		line := "  "
		for _, w := range strings.Fields(d) {
			if len(line)+1+len(w) > 78 {
				b.WriteString(line + "\n")
				line = "      "
			}
			if line != "  " && line != "      " {
				line += " "
			}
			line += w
		}
		b.WriteString(line + "\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func runReport(w, stderr io.Writer, logs []string, f reportFlags) error {
	if f.rotated {
		logs = report.WithRotated(logs)
	}
	// Top 0 means none; the aggregator's zero means the default.
	agg := report.NewAggregator(report.Options{Top: max(f.top, 1), Buckets: f.buckets})
	for _, l := range logs {
		if err := agg.ReadFile(l); err != nil {
			return err
		}
	}
	r := agg.Report()
	if f.top == 0 {
		r.Slowest = nil
	}
	if r.Lines == 0 && r.Malformed > 0 {
		return fmt.Errorf("no op log lines in %s: all %d line(s) are malformed (first: %s)",
			joinLogs(r.Files), r.Malformed, r.MalformedExamples[0])
	}
	if f.chart != "" {
		if err := report.WriteCDFChart(r, f.chart); err != nil {
			return fmt.Errorf("--chart: %w", err)
		}
	}
	if f.chartTime != "" {
		if err := report.WriteTimeChart(r, f.chartTime); err != nil {
			return fmt.Errorf("--chart-time: %w", err)
		}
	}
	switch {
	case f.json:
		return report.WriteJSON(w, r)
	case f.csv:
		// CSV has no place for it; the table and JSON carry the count.
		if r.Malformed > 0 {
			fmt.Fprintf(stderr, "twincrypt: report: skipped %d malformed line(s) (first: %s)\n",
				r.Malformed, printable.String(r.MalformedExamples[0]))
		}
		return report.WriteCSV(w, r)
	}
	return report.WriteTable(w, r)
}

func joinLogs(files []string) string {
	if len(files) == 1 {
		return files[0]
	}
	return fmt.Sprintf("%d logs", len(files))
}
