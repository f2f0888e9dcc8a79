// Package report summarises twincrypt op logs: the JSON lines that
// measure.OpLog writes, one per filesystem operation, each carrying the
// operation's latency on the encrypted mount and, in mirror mode, the
// latency of the same operation on the plaintext twin.
//
// Logs are streamed, never loaded: an Aggregator reads any number of logs
// line by line and keeps only bounded state —
//
//   - per (mount, op): HDR histograms of ns, twin_ns, crypto_ns and
//     lower_ns, counts, errors, bytes moved and sums;
//   - the K slowest operations (a min-heap of size K);
//   - a timeline of fixed-width time buckets whose width grows (and whose
//     buckets are merged) as the covered span grows, so there are never
//     more than a few hundred of them.
//
// so that a 1 GB log costs tens of megabytes, not gigabytes. Report turns
// that state into plain numbers (Report), which WriteTable, WriteCSV,
// WriteJSON, WriteCDFChart and WriteTimeChart render.
package report

import (
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/twincrypt/twincrypt/measure"
)

// Histogram geometry. Latencies are recorded in nanoseconds; anything
// above maxTrackableNs is recorded as maxTrackableNs (the exact maximum is
// kept apart, so only percentiles that high would be affected).
const (
	maxTrackableNs = int64(time.Hour)
	// latencyDigits gives 0.1 % resolution (about 270 KB per histogram);
	// used for the headline ns and twin_ns.
	latencyDigits = 3
	// partDigits gives 1 % resolution (about 37 KB per histogram); used
	// for crypto_ns, lower_ns and the timeline, where 1 % is plenty and
	// there are many more histograms.
	partDigits = 2
)

// Bounds on what a log can make the aggregator hold.
const (
	// DefaultTop is how many slowest operations are kept by default.
	DefaultTop = 20
	// DefaultBuckets is the default maximum number of timeline buckets.
	DefaultBuckets = 200
	// maxKeys bounds the number of distinct (mount, op) pairs, each of
	// which costs up to ~0.6 MB of histograms. A real log has at most
	// measure.NumOps ops per mount; lines beyond the bound are counted as
	// malformed rather than growing memory without limit.
	maxKeys = 256
	// maxExamples is how many malformed lines are quoted in the report.
	maxExamples = 5
)

// Options tune an Aggregator. The zero value gives the defaults.
type Options struct {
	// Top is how many slowest operations to keep (default DefaultTop).
	Top int
	// Buckets is the maximum number of timeline buckets (default
	// DefaultBuckets, at least 2).
	Buckets int
}

// Aggregator accumulates op log lines. It is not safe for concurrent use.
type Aggregator struct {
	files     []string
	lines     int64 // valid lines
	malformed int64
	examples  []string

	first, last time.Time
	mirror      bool

	ops      map[opKey]*opAgg
	slowest  topK
	timeline *timeline
}

type opKey struct{ mount, op string }

// side accumulates one side (the encrypted mount, or the twin) of an op.
type side struct {
	count, errors int64
	sumNs         int64
	cryptoSumNs   int64
	lowerSumNs    int64
	maxNs         int64
	ns            *hdr.Histogram
	crypto        *hdr.Histogram // nil until a non-zero crypto_ns is seen
	lower         *hdr.Histogram // nil until a non-zero lower_ns is seen
}

func (s *side) add(ns, cryptoNs, lowerNs int64, errno int) {
	s.count++
	if errno != 0 {
		s.errors++
	}
	s.sumNs += ns
	s.cryptoSumNs += cryptoNs
	s.lowerSumNs += lowerNs
	s.maxNs = max(s.maxNs, ns)
	if s.ns == nil {
		s.ns = newHist(latencyDigits)
	}
	record(s.ns, ns)
	if cryptoNs > 0 {
		if s.crypto == nil {
			s.crypto = newHist(partDigits)
		}
		record(s.crypto, cryptoNs)
	}
	if lowerNs > 0 {
		if s.lower == nil {
			s.lower = newHist(partDigits)
		}
		record(s.lower, lowerNs)
	}
}

// opAgg accumulates one (mount, op).
type opAgg struct {
	crypt, twin side
	bytes       int64
	errnos      map[int]int64
	// Paired sums over the lines that carry both sides, for the mean
	// overhead: a ratio of means over the same operations.
	paired        int64
	pairedCryptNs int64
	pairedTwinNs  int64
	errnoMismatch int64
}

func newHist(digits int) *hdr.Histogram { return hdr.New(1, maxTrackableNs, digits) }

// record adds ns to h, clamped into the trackable range (RecordValue
// rejects values outside it).
func record(h *hdr.Histogram, ns int64) {
	_ = h.RecordValue(min(max(ns, 1), maxTrackableNs))
}

// NewAggregator returns an empty aggregator.
func NewAggregator(o Options) *Aggregator {
	if o.Top <= 0 {
		o.Top = DefaultTop
	}
	if o.Buckets <= 0 {
		o.Buckets = DefaultBuckets
	}
	o.Buckets = max(o.Buckets, 2)
	return &Aggregator{
		ops:      make(map[opKey]*opAgg),
		slowest:  topK{k: o.Top},
		timeline: newTimeline(o.Buckets),
	}
}

// isDataOp reports whether an op moves file content, whose len counts
// toward throughput.
func isDataOp(op string) bool { return op == "read" || op == "write" }

// Add records one line. It returns an error (and records nothing) when the
// line is not a plausible op log line; Read counts those as malformed.
func (a *Aggregator) Add(l *measure.LogLine) error {
	if err := validate(l); err != nil {
		return err
	}
	k := opKey{l.Mount, l.Op}
	o := a.ops[k]
	if o == nil {
		if len(a.ops) >= maxKeys {
			return errTooManyKeys
		}
		o = &opAgg{errnos: make(map[int]int64)}
		a.ops[k] = o
	}
	a.lines++
	if a.first.IsZero() || l.TS.Before(a.first) {
		a.first = l.TS
	}
	if l.TS.After(a.last) {
		a.last = l.TS
	}

	o.crypt.add(l.Ns, l.CryptoNs, l.LowerNs, l.Errno)
	if l.Errno != 0 {
		o.errnos[l.Errno]++
	}
	if isDataOp(l.Op) && l.Errno == 0 {
		o.bytes += l.Len
	}
	// twin_ns is omitted when zero, so a line carries twin data exactly
	// when twin_ns is positive.
	paired := l.TwinNs > 0
	if paired {
		a.mirror = true
		o.twin.add(l.TwinNs, l.TwinCryptoNs, l.TwinLowerNs, l.TwinErrno)
		o.paired++
		o.pairedCryptNs += l.Ns
		o.pairedTwinNs += l.TwinNs
		if l.TwinErrno != l.Errno {
			o.errnoMismatch++
		}
	}

	a.slowest.offer(SlowOp{
		TS: l.TS, Mount: l.Mount, Op: l.Op, Ino: l.Ino, Path: l.Path,
		Off: l.Off, Len: l.Len, Ns: l.Ns, TwinNs: l.TwinNs, Errno: l.Errno,
	})
	a.timeline.add(l.TS.UnixNano(), l.Ns, l.Errno != 0, l.TwinNs, paired)
	return nil
}

// minTS and maxTS bound the timestamps accepted: UnixNano is defined
// between 1678 and 2262, and an op log is never older than 1970.
var (
	minTS = time.Unix(0, 0)
	maxTS = time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC)
)

func validate(l *measure.LogLine) error {
	switch {
	case l.Op == "":
		return errNoOp
	case l.TS.Before(minTS) || !l.TS.Before(maxTS):
		return errBadTS
	case l.Ns < 0 || l.CryptoNs < 0 || l.LowerNs < 0 || l.TwinNs < 0 ||
		l.TwinCryptoNs < 0 || l.TwinLowerNs < 0:
		return errNegative
	case l.Len < 0:
		return errNegativeLen
	}
	return nil
}
