package report

import (
	"cmp"
	"slices"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is what a set of op logs says, as plain numbers. It is what
// --json prints, and everything the table, CSV and charts show comes from
// it, so a saved JSON report can be rendered again.
type Report struct {
	Files []string `json:"files"`
	// Lines counts the valid lines; Malformed the skipped ones, with the
	// first few quoted ("file:line: why").
	Lines             int64    `json:"lines"`
	Malformed         int64    `json:"malformed"`
	MalformedExamples []string `json:"malformed_examples,omitempty"`
	// First and Last are the earliest and latest ts; SpanS the seconds
	// between them, the denominator of every MiB/s.
	First  time.Time `json:"first"`
	Last   time.Time `json:"last"`
	SpanS  float64   `json:"span_s"`
	Mirror bool      `json:"mirror"` // some lines carry twin timings
	// Ops has one entry per (mount, op), by mount then by op count,
	// busiest first.
	Ops      []OpReport `json:"ops"`
	Slowest  []SlowOp   `json:"slowest"`
	Timeline Timeline   `json:"timeline"`
	// CDF is the latency distribution per op class and side, for charts.
	CDF []ClassCDF `json:"cdf"`
}

// OpReport summarises one op on one mount.
type OpReport struct {
	Mount string `json:"mount"`
	Op    string `json:"op"`
	Class Class  `json:"class"`
	Crypt Side   `json:"crypt"`
	// Twin is the same op on the passthrough twin (mirror mode only), over
	// the lines that carry twin timings.
	Twin *Side `json:"twin,omitempty"`
	// Overhead compares Crypt with Twin (mirror mode only).
	Overhead *Overhead `json:"overhead,omitempty"`
	// Bytes is the sum of len over successful reads and writes; MiBps is
	// Bytes over the whole log's span (0 when the span is 0).
	Bytes  int64   `json:"bytes"`
	MiBps  float64 `json:"mib_per_s"`
	Errnos []Errno `json:"errnos,omitempty"` // errno frequencies, commonest first
}

// Side is the latency of one op on one side (the encrypted mount or the
// twin). Percentiles come from HDR histograms (within 0.1 %; crypto and
// lower within 1 %); means, sums and the maximum are exact.
type Side struct {
	Count  int64   `json:"count"`
	Errors int64   `json:"errors"`
	MeanNs float64 `json:"mean_ns"`
	P50Ns  int64   `json:"p50_ns"`
	P90Ns  int64   `json:"p90_ns"`
	P99Ns  int64   `json:"p99_ns"`
	P999Ns int64   `json:"p999_ns"`
	MaxNs  int64   `json:"max_ns"`
	SumNs  int64   `json:"sum_ns"`
	// CryptoPct and LowerPct are the shares of the op time spent in
	// crypto and in lower-filesystem calls: sum(crypto_ns)/sum(ns), a
	// time-weighted mean.
	CryptoPct   float64 `json:"crypto_pct"`
	LowerPct    float64 `json:"lower_pct"`
	CryptoSumNs int64   `json:"crypto_sum_ns"`
	LowerSumNs  int64   `json:"lower_sum_ns"`
	CryptoP50Ns int64   `json:"crypto_p50_ns"`
	CryptoP99Ns int64   `json:"crypto_p99_ns"`
	LowerP50Ns  int64   `json:"lower_p50_ns"`
	LowerP99Ns  int64   `json:"lower_p99_ns"`
}

// Overhead is the cost of encryption for one op: the encrypted mount
// against the twin. Ratios above 1 mean the encrypted mount is slower.
type Overhead struct {
	// RatioP50 is crypt p50 / twin p50.
	RatioP50 float64 `json:"ratio_p50"`
	// RatioMean is mean crypt ns / mean twin ns over the lines that carry
	// both, i.e. over the very same operations.
	RatioMean float64 `json:"ratio_mean"`
	// DiffP50Us and DiffMeanUs are the same comparisons as differences.
	DiffP50Us  float64 `json:"diff_p50_us"`
	DiffMeanUs float64 `json:"diff_mean_us"`
	// ErrnoMismatch counts operations whose errno differed between the
	// two sides: the twin and the encrypted mount disagreeing is a bug.
	ErrnoMismatch int64 `json:"errno_mismatch"`
}

// Errno is how often one errno was returned.
type Errno struct {
	Errno int   `json:"errno"`
	Count int64 `json:"count"`
}

// Report computes the report of everything read so far. The aggregator is
// not changed and can go on reading.
func (a *Aggregator) Report() *Report {
	r := &Report{
		Files:             append([]string{}, a.files...),
		Lines:             a.lines,
		Malformed:         a.malformed,
		MalformedExamples: append([]string(nil), a.examples...),
		First:             a.first,
		Last:              a.last,
		Mirror:            a.mirror,
		Slowest:           a.slowest.sorted(),
		Timeline:          a.timeline.report(),
	}
	if a.lines > 0 {
		r.SpanS = a.last.Sub(a.first).Seconds()
	}
	for k, o := range a.ops {
		r.Ops = append(r.Ops, a.opReport(k, o, r.SpanS))
	}
	slices.SortFunc(r.Ops, func(x, y OpReport) int {
		return cmp.Or(cmp.Compare(x.Mount, y.Mount),
			-cmp.Compare(x.Crypt.Count, y.Crypt.Count),
			cmp.Compare(x.Op, y.Op))
	})
	r.CDF = a.classCDFs()
	return r
}

func (a *Aggregator) opReport(k opKey, o *opAgg, spanS float64) OpReport {
	or := OpReport{
		Mount: k.mount,
		Op:    k.op,
		Class: ClassOf(k.op),
		Crypt: o.crypt.report(),
		Bytes: o.bytes,
	}
	if spanS > 0 {
		or.MiBps = float64(o.bytes) / (1 << 20) / spanS
	}
	for e, n := range o.errnos {
		or.Errnos = append(or.Errnos, Errno{Errno: e, Count: n})
	}
	slices.SortFunc(or.Errnos, func(x, y Errno) int {
		return cmp.Or(-cmp.Compare(x.Count, y.Count), cmp.Compare(x.Errno, y.Errno))
	})
	if o.twin.count > 0 {
		twin := o.twin.report()
		or.Twin = &twin
		ov := &Overhead{ErrnoMismatch: o.errnoMismatch}
		if twin.P50Ns > 0 {
			ov.RatioP50 = float64(or.Crypt.P50Ns) / float64(twin.P50Ns)
		}
		ov.DiffP50Us = float64(or.Crypt.P50Ns-twin.P50Ns) / 1e3
		if o.pairedTwinNs > 0 {
			ov.RatioMean = float64(o.pairedCryptNs) / float64(o.pairedTwinNs)
		}
		ov.DiffMeanUs = float64(o.pairedCryptNs-o.pairedTwinNs) / float64(o.paired) / 1e3
		or.Overhead = ov
	}
	return or
}

func (s *side) report() Side {
	out := Side{
		Count:       s.count,
		Errors:      s.errors,
		MaxNs:       s.maxNs,
		SumNs:       s.sumNs,
		CryptoSumNs: s.cryptoSumNs,
		LowerSumNs:  s.lowerSumNs,
	}
	if s.count > 0 {
		out.MeanNs = float64(s.sumNs) / float64(s.count)
	}
	if s.sumNs > 0 {
		out.CryptoPct = 100 * float64(s.cryptoSumNs) / float64(s.sumNs)
		out.LowerPct = 100 * float64(s.lowerSumNs) / float64(s.sumNs)
	}
	if s.ns != nil {
		// The histogram reports the highest value equivalent to the
		// true one; never report a percentile above the exact maximum.
		q := func(p float64) int64 { return min(s.ns.ValueAtQuantile(p), s.maxNs) }
		out.P50Ns, out.P90Ns, out.P99Ns, out.P999Ns = q(50), q(90), q(99), q(99.9)
	}
	if s.crypto != nil {
		out.CryptoP50Ns, out.CryptoP99Ns = s.crypto.ValueAtQuantile(50), s.crypto.ValueAtQuantile(99)
	}
	if s.lower != nil {
		out.LowerP50Ns, out.LowerP99Ns = s.lower.ValueAtQuantile(50), s.lower.ValueAtQuantile(99)
	}
	return out
}

// ClassCDF is the latency distribution of one op class on one side:
// Points[i].Ns is the latency at quantile Points[i].Q (0..1).
type ClassCDF struct {
	Class  Class      `json:"class"`
	Side   string     `json:"side"` // "crypt" or "twin"
	Count  int64      `json:"count"`
	Points []CDFPoint `json:"points"`
}

// CDFPoint is one point of a ClassCDF.
type CDFPoint struct {
	Q  float64 `json:"q"`
	Ns int64   `json:"ns"`
}

// cdfPercentiles are the points at which a CDF is sampled: every percent,
// and the tail in finer steps, where the interesting differences are.
var cdfPercentiles = func() []float64 {
	var ps []float64
	for p := 0; p < 99; p++ {
		ps = append(ps, float64(p))
	}
	return append(ps, 99, 99.5, 99.9, 99.95, 99.99, 99.999, 100)
}()

// classCDFs merges the per-op histograms of each class, across mounts.
func (a *Aggregator) classCDFs() []ClassCDF {
	type classSide struct {
		class Class
		twin  bool
	}
	merged := make(map[classSide]*hdr.Histogram)
	for k, o := range a.ops {
		c := ClassOf(k.op)
		if o.crypt.ns != nil {
			merged[classSide{c, false}] = mergeHist(merged[classSide{c, false}], o.crypt.ns)
		}
		if o.twin.ns != nil {
			merged[classSide{c, true}] = mergeHist(merged[classSide{c, true}], o.twin.ns)
		}
	}
	var out []ClassCDF
	for _, c := range Classes {
		for _, twin := range []bool{false, true} {
			h := merged[classSide{c, twin}]
			if h == nil {
				continue
			}
			cdf := ClassCDF{Class: c, Side: "crypt", Count: h.TotalCount()}
			if twin {
				cdf.Side = "twin"
			}
			vals := h.ValueAtPercentilesSlice(cdfPercentiles)
			for i, p := range cdfPercentiles {
				cdf.Points = append(cdf.Points, CDFPoint{Q: p / 100, Ns: vals[i]})
			}
			out = append(out, cdf)
		}
	}
	return out
}
