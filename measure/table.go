package measure

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/twincrypt/twincrypt/measure/printable"
)

// Table writes the snapshot for a human: one row per operation with its
// count, errors, p50, p99 and max latency, throughput (bytes moved over
// the recorder's elapsed time) and the share of total time spent in crypto
// and in the lower filesystem. In mirror mode each row also shows the
// twin's p50 and p99 and the ratios encrypted/twin of p50 and of the mean,
// the per-operation cost of encryption. Then a line for the op log and,
// when the daemon filled them in, the CPU seconds.
func (s Snapshot) Table(w io.Writer) {
	mirror := len(s.Twin) > 0
	twin := make(map[string]Stats, len(s.Twin))
	for _, t := range s.Twin {
		twin[t.Op] = t
	}

	// The text came over a socket (or from a log): quoted if it holds
	// control characters, so that it cannot drive the terminal.
	fmt.Fprintf(w, "mount %s, %.1f s\n", printable.String(s.Mount), s.Elapsed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Names are padded by hand so they read left-aligned in a table whose
	// numbers align right.
	fmt.Fprintf(tw, "%-11s\tcount\terrors\tp50\tp99\tmax\tMiB/s\tcrypto%%\tlower%%\t", "op")
	if mirror {
		fmt.Fprint(tw, "twin p50\ttwin p99\tp50 crypt/twin\tmean crypt/twin\t")
	}
	fmt.Fprintln(tw)
	for _, o := range s.Ops {
		fmt.Fprintf(tw, "%-11s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t",
			printable.String(o.Op), o.Count, o.Errors,
			humanNs(o.P50Ns), humanNs(o.P99Ns), humanNs(o.MaxNs),
			mibPerS(o.Bytes, s.Elapsed),
			percent(o.CryptoNs, o.TotalNs), percent(o.LowerNs, o.TotalNs))
		if mirror {
			if t, ok := twin[o.Op]; ok {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t",
					humanNs(t.P50Ns), humanNs(t.P99Ns),
					ratio(float64(o.P50Ns), float64(t.P50Ns)),
					ratio(o.MeanNs, t.MeanNs))
			} else {
				fmt.Fprint(tw, "-\t-\t-\t-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	// Summaries saved before OpLog existed say so by their counts.
	if s.OpLog || s.LogLines > 0 || s.LogDropped > 0 {
		fmt.Fprintf(w, "op log: %d lines written, %d dropped\n", s.LogLines, s.LogDropped)
	}
	if cpu := s.CPUUserS + s.CPUSysS; cpu > 0 {
		fmt.Fprintf(w, "CPU: user %.2f s, sys %.2f s; %s CPU-s per GiB moved\n",
			s.CPUUserS, s.CPUSysS, cpuPerGiB(cpu, s.bytesMoved()))
	}
	if s.Transport != "" {
		fmt.Fprintf(w, "transport: %s\n", s.Transport)
	}
	if s.KernelPassthrough {
		fmt.Fprintln(w, KernelPassthroughNote)
	}
}

// KernelPassthroughNote labels a mount with kernel passthrough wherever
// its figures are shown.
const KernelPassthroughNote = "kernel passthrough: the kernel serves READ and WRITE without the daemon; they are not measured"

// minMovedForCPU is the data below which CPU seconds per GiB is not
// shown: the daemon's start-up and idle CPU divided by a few KiB gives a
// huge figure (234489.84) that says nothing about the cost of moving data.
const minMovedForCPU = 1 << 20

// cpuPerGiB is cpu seconds over moved bytes in GiB, "-" when almost
// nothing moved.
func cpuPerGiB(cpu float64, moved int64) string {
	if moved < minMovedForCPU {
		return "-"
	}
	return strconv.FormatFloat(cpu/(float64(moved)/(1<<30)), 'f', 2, 64)
}

// IntervalTable writes what happened between prev and s, two snapshots
// of the same mount: per operation the rate, errors, mean latency, p50
// and p99 estimated from the snapshots' latency buckets (interpolated
// within a bucket, as Prometheus' histogram_quantile does, hence "~"),
// throughput and the crypto and lower shares of the interval alone; in
// mirror mode the twin's mean and the ratio. Operations without a span in
// the interval are left out. A prev of another recorder (the mount was
// remounted) counts as empty.
func (s Snapshot) IntervalTable(w io.Writer, prev Snapshot) {
	if !prev.Since.Equal(s.Since) || prev.Mount != s.Mount {
		prev = Snapshot{Since: s.Since}
	}
	dt := s.Elapsed - prev.Elapsed
	if dt <= 0 {
		dt = s.Elapsed
	}
	ops := deltas(s.Ops, prev.Ops)
	twin := map[string]Stats{}
	for _, t := range deltas(s.Twin, prev.Twin) {
		twin[t.Op] = t
	}
	mirror := len(s.Twin) > 0
	fmt.Fprintf(w, "mount %s, last %.1f s\n", printable.String(s.Mount), dt)
	if len(ops) == 0 {
		fmt.Fprintln(w, "idle: no operations in this interval")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-11s\tops/s\terrors\tmean\t~p50\t~p99\tMiB/s\tcrypto%%\tlower%%\t", "op")
		if mirror {
			fmt.Fprint(tw, "twin mean\tmean crypt/twin\t")
		}
		fmt.Fprintln(tw)
		for _, o := range ops {
			fmt.Fprintf(tw, "%-11s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t",
				printable.String(o.Op), strconv.FormatFloat(float64(o.Count)/dt, 'f', 1, 64), o.Errors,
				humanNs(int64(o.MeanNs)), bucketQuantile(o, 0.5), bucketQuantile(o, 0.99),
				mibPerS(o.Bytes, dt), percent(o.CryptoNs, o.TotalNs), percent(o.LowerNs, o.TotalNs))
			if mirror {
				if t, ok := twin[o.Op]; ok {
					fmt.Fprintf(tw, "%s\t%s\t", humanNs(int64(t.MeanNs)), ratio(o.MeanNs, t.MeanNs))
				} else {
					fmt.Fprint(tw, "-\t-\t")
				}
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
	if s.OpLog {
		fmt.Fprintf(w, "op log: %d lines written, %d dropped\n", s.LogLines-prev.LogLines, s.LogDropped-prev.LogDropped)
	}
	if cpu := (s.CPUUserS + s.CPUSysS) - (prev.CPUUserS + prev.CPUSysS); s.CPUUserS+s.CPUSysS > 0 {
		fmt.Fprintf(w, "CPU: %.0f%% of a core; %s CPU-s per GiB moved\n",
			100*cpu/dt, cpuPerGiB(cpu, s.bytesMoved()-prev.bytesMoved()))
	}
}

// Deltas is cur minus prev, operation by operation, for the operations
// with spans in between (as deltas below): one interval of a recorder,
// for tables kept outside this package (kernel tracing's).
func Deltas(cur, prev []Stats) []Stats { return deltas(cur, prev) }

// HumanNs prints a duration with three significant digits (as humanNs).
func HumanNs(ns int64) string { return humanNs(ns) }

// deltas is cur minus prev, operation by operation, for the operations
// with spans in between; MeanNs is the interval's mean and Buckets its
// own (not cumulative over the mount, still cumulative over bounds).
func deltas(cur, prev []Stats) []Stats {
	before := make(map[string]Stats, len(prev))
	for _, p := range prev {
		before[p.Op] = p
	}
	var out []Stats
	for _, c := range cur {
		p := before[c.Op]
		d := Stats{
			Op:       c.Op,
			Count:    c.Count - p.Count,
			Errors:   c.Errors - p.Errors,
			Bytes:    c.Bytes - p.Bytes,
			CryptoNs: c.CryptoNs - p.CryptoNs,
			LowerNs:  c.LowerNs - p.LowerNs,
			TotalNs:  c.TotalNs - p.TotalNs,
		}
		if d.Count <= 0 {
			continue
		}
		d.MeanNs = float64(d.TotalNs) / float64(d.Count)
		if len(c.Buckets) == len(BucketBoundsNs) {
			d.Buckets = make([]int64, len(c.Buckets))
			for i := range c.Buckets {
				d.Buckets[i] = c.Buckets[i]
				if len(p.Buckets) == len(c.Buckets) {
					d.Buckets[i] -= p.Buckets[i]
				}
			}
		}
		out = append(out, d)
	}
	return out
}

// bucketQuantile estimates the q quantile of o's spans from its
// cumulative buckets, interpolating linearly within the bucket it falls
// in; beyond the last bound it is "> 10.0s". Without buckets it is "-".
func bucketQuantile(o Stats, q float64) string {
	if len(o.Buckets) != len(BucketBoundsNs) || o.Count <= 0 {
		return "-"
	}
	rank := q * float64(o.Count)
	var lowBound, lowCount float64
	for i, c := range o.Buckets {
		bound := float64(BucketBoundsNs[i])
		if float64(c) >= rank && c > 0 {
			v := lowBound + (bound-lowBound)*(rank-lowCount)/(float64(c)-lowCount)
			return humanNs(int64(v))
		}
		lowBound, lowCount = bound, float64(c)
	}
	return "> " + humanNs(BucketBoundsNs[len(BucketBoundsNs)-1])
}

// bytesMoved is the data read and written through the mount (the primary
// side only: in mirror mode the twin's copy is overhead, not work done).
func (s Snapshot) bytesMoved() int64 {
	var n int64
	for _, o := range s.Ops {
		if o.Op == OpRead.String() || o.Op == OpWrite.String() {
			n += o.Bytes
		}
	}
	return n
}

// humanNs prints a duration with three significant digits in the largest
// unit that keeps it at least 1: 850ns, 12.3µs, 4.56ms, 1.20s.
func humanNs(ns int64) string {
	v := float64(ns)
	// The thresholds sit where rounding to three digits would carry into
	// a fourth (999.7µs prints as 1.00ms, not 1000µs).
	switch {
	case ns < 1000:
		return strconv.FormatInt(ns, 10) + "ns"
	case ns < 999_500:
		return sig3(v/1e3) + "µs"
	case ns < 999_500_000:
		return sig3(v/1e6) + "ms"
	default:
		return sig3(v/1e9) + "s"
	}
}

func sig3(v float64) string {
	switch {
	case v >= 99.95:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 9.995:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func mibPerS(bytes int64, elapsedS float64) string {
	if bytes <= 0 || elapsedS <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(bytes)/(1<<20)/elapsedS, 'f', 1, 64)
}

func percent(part, total int64) string {
	if total <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*float64(part)/float64(total), 'f', 1, 64)
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}
