package report

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
)

// WriteJSON prints r as one indented JSON document.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// CSVHeader is the header row of WriteCSV. Latencies are in ns, the twin_*
// and overhead columns are empty outside mirror mode.
var CSVHeader = []string{
	"mount", "op", "class", "count", "errors", "bytes", "mib_per_s",
	"mean_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "sum_ns",
	"crypto_pct", "lower_pct", "crypto_p50_ns", "crypto_p99_ns", "lower_p50_ns", "lower_p99_ns",
	"twin_count", "twin_errors", "twin_mean_ns", "twin_p50_ns", "twin_p90_ns", "twin_p99_ns",
	"twin_p999_ns", "twin_max_ns", "twin_crypto_pct", "twin_lower_pct",
	"ratio_p50", "ratio_mean", "diff_p50_us", "diff_mean_us", "errno_mismatch",
}

// WriteCSV prints one row per (mount, op) after CSVHeader.
func WriteCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	for _, o := range r.Ops {
		c := o.Crypt
		row := []string{
			o.Mount, o.Op, string(o.Class), i(c.Count), i(c.Errors), i(o.Bytes), f(o.MiBps),
			f(c.MeanNs), i(c.P50Ns), i(c.P90Ns), i(c.P99Ns), i(c.P999Ns), i(c.MaxNs), i(c.SumNs),
			f(c.CryptoPct), f(c.LowerPct), i(c.CryptoP50Ns), i(c.CryptoP99Ns), i(c.LowerP50Ns), i(c.LowerP99Ns),
		}
		if t, ov := o.Twin, o.Overhead; t != nil {
			row = append(row,
				i(t.Count), i(t.Errors), f(t.MeanNs), i(t.P50Ns), i(t.P90Ns), i(t.P99Ns),
				i(t.P999Ns), i(t.MaxNs), f(t.CryptoPct), f(t.LowerPct),
				f(ov.RatioP50), f(ov.RatioMean), f(ov.DiffP50Us), f(ov.DiffMeanUs), i(ov.ErrnoMismatch))
		} else {
			row = append(row, make([]string, len(CSVHeader)-len(row))...)
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
