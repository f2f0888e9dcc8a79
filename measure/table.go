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

	fmt.Fprintf(w, "op log: %d lines written, %d dropped\n", s.LogLines, s.LogDropped)
	if cpu := s.CPUUserS + s.CPUSysS; cpu > 0 {
		fmt.Fprintf(w, "CPU: user %.2f s, sys %.2f s", s.CPUUserS, s.CPUSysS)
		if moved := s.bytesMoved(); moved > 0 {
			fmt.Fprintf(w, "; %.2f CPU-s per GiB moved", cpu/(float64(moved)/(1<<30)))
		}
		fmt.Fprintln(w)
	}
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
