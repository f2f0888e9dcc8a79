package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/twincrypt/twincrypt/measure/printable"
)

// WriteTable prints r for a terminal: the per-op latency table, in mirror
// mode the comparison with the twin, the slowest operations and a coarse
// latency timeline.
func WriteTable(w io.Writer, r *Report) error {
	ew := &errWriter{w: w}
	writeHeader(ew, r)
	if len(r.Ops) == 0 {
		ew.printf("\nno operations\n")
		return ew.err
	}
	multiMount := false
	for _, o := range r.Ops {
		multiMount = multiMount || o.Mount != r.Ops[0].Mount
	}

	ew.printf("\nlatency per op (crypto%% and lower%%: share of op time)\n")
	t := newTable("mount", "op", "count", "errors", "p50", "p90", "p99", "p99.9", "max", "MiB/s", "crypto%", "lower%")
	for _, o := range r.Ops {
		c := o.Crypt
		mibps := "-"
		if o.Bytes > 0 && r.SpanS > 0 {
			mibps = fmt.Sprintf("%.1f", o.MiBps)
		}
		t.row(o.Mount, o.Op, count(c.Count), count(c.Errors), fmtNs(c.P50Ns), fmtNs(c.P90Ns),
			fmtNs(c.P99Ns), fmtNs(c.P999Ns), fmtNs(c.MaxNs), mibps, pct(c.CryptoPct), pct(c.LowerPct))
	}
	t.write(ew, !multiMount)

	if r.Mirror {
		ew.printf("\nencrypted vs twin (×: crypt/twin, above 1 is slower; Δ: crypt-twin; errno≠: sides disagreed)\n")
		t := newTable("mount", "op", "paired", "p50", "twin p50", "p99", "twin p99", "×p50", "×mean", "Δp50", "Δmean", "errno≠")
		for _, o := range r.Ops {
			if o.Twin == nil {
				continue
			}
			ov := o.Overhead
			t.row(o.Mount, o.Op, count(o.Twin.Count), fmtNs(o.Crypt.P50Ns), fmtNs(o.Twin.P50Ns),
				fmtNs(o.Crypt.P99Ns), fmtNs(o.Twin.P99Ns), ratio(ov.RatioP50), ratio(ov.RatioMean),
				fmtDiffUs(ov.DiffP50Us), fmtDiffUs(ov.DiffMeanUs), count(ov.ErrnoMismatch))
		}
		t.write(ew, !multiMount)
	}

	if len(r.Slowest) > 0 {
		ew.printf("\nslowest %d ops\n", len(r.Slowest))
		cols := []string{"ts", "mount", "op", "latency"}
		if r.Mirror {
			cols = append(cols, "twin")
		}
		cols = append(cols, "errno", "ino", "off", "len", "path")
		t := newTable(cols...)
		for _, s := range r.Slowest {
			cells := []string{s.TS.Format("2006-01-02 15:04:05.000000"), s.Mount, s.Op, fmtNs(s.Ns)}
			if r.Mirror {
				cells = append(cells, fmtNs(s.TwinNs))
			}
			cells = append(cells, strconv.Itoa(s.Errno), strconv.FormatUint(s.Ino, 10),
				strconv.FormatInt(s.Off, 10), strconv.FormatInt(s.Len, 10), s.Path)
			t.row(cells...)
		}
		t.leftAlign("ts", "path")
		t.write(ew, !multiMount)
	}

	if tl := r.Timeline; len(tl.Coarse) > 0 {
		ew.printf("\nlatency over time, all ops (rows of %v; fine series of %v in --json and --chart-time)\n",
			time.Duration(tl.CoarseBucketNs), time.Duration(tl.BucketNs))
		cols := []string{"from", "count", "errors", "p50", "p99"}
		if r.Mirror {
			cols = append(cols, "twin p50", "twin p99")
		}
		t := newTable(cols...)
		layout := "15:04:05.000"
		if r.Last.Sub(r.First) >= 24*time.Hour {
			layout = "2006-01-02 15:04:05"
		}
		for _, b := range tl.Coarse {
			cells := []string{b.Start.In(r.First.Location()).Format(layout), count(b.Count),
				count(b.Errors), fmtNs(b.P50Ns), fmtNs(b.P99Ns)}
			if r.Mirror {
				cells = append(cells, fmtNs(b.TwinP50Ns), fmtNs(b.TwinP99Ns))
			}
			t.row(cells...)
		}
		t.leftAlign("from")
		t.write(ew, false)
	}
	return ew.err
}

func writeHeader(ew *errWriter, r *Report) {
	files := fmt.Sprintf("%d files", len(r.Files))
	if len(r.Files) == 1 {
		files = r.Files[0]
	}
	ew.printf("%s: %s %s", files, count(r.Lines), plural(r.Lines, "line", "lines"))
	if r.Malformed > 0 {
		ew.printf(", %s malformed %s skipped", count(r.Malformed), plural(r.Malformed, "line", "lines"))
	}
	if r.Lines > 0 {
		ew.printf(", %s .. %s (%.1f s)", r.First.Format(time.RFC3339Nano), r.Last.Format(time.RFC3339Nano), r.SpanS)
	}
	if r.Mirror {
		ew.printf(", mirror mode")
	}
	ew.printf("\n")
	if len(r.Ops) > 0 {
		mounts := map[string]bool{}
		var names []string
		for _, o := range r.Ops {
			if !mounts[o.Mount] {
				mounts[o.Mount] = true
				names = append(names, strconv.Quote(o.Mount))
			}
		}
		ew.printf("mount %s\n", strings.Join(names, ", "))
	}
	for _, e := range r.MalformedExamples {
		ew.printf("malformed: %s\n", printable.String(e))
	}
}

// fmtNs prints a latency with three significant digits in a unit that
// keeps it short: 850ns, 12.3µs, 123µs, 1.23ms, 2.50s.
func fmtNs(ns int64) string {
	v := float64(ns)
	switch {
	case ns == 0:
		return "0"
	case ns < 1e3:
		return fmt.Sprintf("%dns", ns)
	case ns < 999_500: // not "1000µs"
		return sig3(v/1e3) + "µs"
	case ns < 999_500_000:
		return sig3(v/1e6) + "ms"
	default:
		return sig3(v/1e9) + "s"
	}
}

func sig3(v float64) string {
	// Compare with the rounding boundaries, so that 99.97 prints as
	// "100", not "100.0".
	switch {
	case v < 9.995:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 99.95:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
}

func fmtDiffUs(us float64) string {
	sign := "+"
	if us < 0 {
		sign, us = "-", -us
	}
	return sign + fmtNs(int64(us*1e3+0.5))
}

func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

func pct(p float64) string { return fmt.Sprintf("%.1f", p) }

func count(n int64) string { return strconv.FormatInt(n, 10) }

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// table lays out rows in columns: text columns left-aligned, the rest
// right-aligned, two spaces apart.
type table struct {
	cols []string
	left map[string]bool
	rows [][]string
}

func newTable(cols ...string) *table {
	return &table{cols: cols, left: map[string]bool{"mount": true, "op": true}}
}

// row adds a row. Mount, op and path come from log lines anyone who could
// write the log chose: a cell with control characters is shown quoted, so
// that it cannot drive the terminal.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = printable.String(c)
	}
	t.rows = append(t.rows, cells)
}

func (t *table) leftAlign(cols ...string) {
	for _, c := range cols {
		t.left[c] = true
	}
}

// write prints the table, without its mount column when dropMount (one
// mount only: it is named in the header).
func (t *table) write(ew *errWriter, dropMount bool) {
	keep := make([]int, 0, len(t.cols))
	for i, c := range t.cols {
		if !(dropMount && c == "mount") {
			keep = append(keep, i)
		}
	}
	width := make([]int, len(t.cols))
	for _, row := range append([][]string{t.cols}, t.rows...) {
		for _, i := range keep {
			width[i] = max(width[i], len([]rune(row[i])))
		}
	}
	for _, row := range append([][]string{t.cols}, t.rows...) {
		var b strings.Builder
		for n, i := range keep {
			pad := strings.Repeat(" ", width[i]-len([]rune(row[i])))
			last := n == len(keep)-1
			switch {
			case t.left[t.cols[i]] && last:
				b.WriteString(row[i])
			case t.left[t.cols[i]]:
				b.WriteString(row[i] + pad)
			default:
				b.WriteString(pad + row[i])
			}
			if !last {
				b.WriteString("  ")
			}
		}
		ew.printf("%s\n", b.String())
	}
}

// errWriter keeps the first write error, so that printing code need not
// check every call.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, a ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, a...)
	}
}
