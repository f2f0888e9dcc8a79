package report

import (
	"slices"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// widthLadder lists the timeline bucket widths. Each divides the next, and
// buckets are aligned to multiples of their width since the Unix epoch, so
// growing the width merges whole old buckets into new ones: no old bucket
// straddles two new ones, and the merged histograms are exact. No step is
// more than 5x, so a span fills at least a fifth of the allowed buckets.
// Past the end of the ladder the width doubles.
var widthLadder = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond,
	time.Second, 2 * time.Second, 10 * time.Second, 20 * time.Second,
	time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// nextWidth returns the width after w on the ladder.
func nextWidth(w int64) int64 {
	for _, l := range widthLadder {
		if int64(l) > w {
			return int64(l)
		}
	}
	return 2 * w
}

// timeBucket accumulates the operations whose ts falls in one bucket.
type timeBucket struct {
	count, errors int64
	twinCount     int64
	crypt, twin   *hdr.Histogram
}

func (b *timeBucket) merge(o *timeBucket) {
	b.count += o.count
	b.errors += o.errors
	b.twinCount += o.twinCount
	b.crypt = mergeHist(b.crypt, o.crypt)
	b.twin = mergeHist(b.twin, o.twin)
}

// mergeHist returns dst with src merged in; either may be nil. dst is
// modified in place when it is not nil.
func mergeHist(dst, src *hdr.Histogram) *hdr.Histogram {
	switch {
	case src == nil:
		return dst
	case dst == nil:
		return src.Clone()
	}
	dst.Merge(src)
	return dst
}

// timeline holds at most maxBuckets buckets of width ns each, keyed by
// ts/width. When an operation falls outside the span that maxBuckets
// buckets can cover, the width moves up the ladder until it fits.
type timeline struct {
	maxBuckets int64
	width      int64 // ns
	lo, hi     int64 // smallest and largest key in buckets
	buckets    map[int64]*timeBucket
}

func newTimeline(maxBuckets int) *timeline {
	return &timeline{
		maxBuckets: int64(maxBuckets),
		width:      int64(widthLadder[0]),
		buckets:    make(map[int64]*timeBucket),
	}
}

func (t *timeline) add(tsNs, ns int64, failed bool, twinNs int64, paired bool) {
	key := floorDiv(tsNs, t.width)
	if len(t.buckets) == 0 {
		t.lo, t.hi = key, key
	} else if lo, hi := min(t.lo, key), max(t.hi, key); hi-lo >= t.maxBuckets {
		t.grow(lo, hi)
		key = floorDiv(tsNs, t.width)
	}
	t.lo, t.hi = min(t.lo, key), max(t.hi, key)

	b := t.buckets[key]
	if b == nil {
		b = &timeBucket{crypt: newHist(partDigits)}
		t.buckets[key] = b
	}
	b.count++
	if failed {
		b.errors++
	}
	record(b.crypt, ns)
	if paired {
		if b.twin == nil {
			b.twin = newHist(partDigits)
		}
		b.twinCount++
		record(b.twin, twinNs)
	}
}

// grow widens the buckets until keys lo..hi (at the current width) fit in
// maxBuckets, and merges the existing buckets accordingly.
func (t *timeline) grow(lo, hi int64) {
	width := t.width
	for floorDiv(hi*t.width, width)-floorDiv(lo*t.width, width) >= t.maxBuckets {
		width = nextWidth(width)
	}
	factor := width / t.width
	merged := make(map[int64]*timeBucket, len(t.buckets))
	for k, b := range t.buckets {
		nk := floorDiv(k, factor)
		if m := merged[nk]; m != nil {
			m.merge(b)
		} else {
			merged[nk] = b
		}
	}
	t.buckets = merged
	t.width = width
	t.lo, t.hi = floorDiv(t.lo, factor), floorDiv(t.hi, factor)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Bucket is one row of the latency timeline: the operations whose ts lies
// in [Start, Start+width).
type Bucket struct {
	Start     time.Time `json:"start"`
	Count     int64     `json:"count"`
	Errors    int64     `json:"errors"`
	P50Ns     int64     `json:"p50_ns"`
	P99Ns     int64     `json:"p99_ns"`
	TwinCount int64     `json:"twin_count,omitempty"`
	TwinP50Ns int64     `json:"twin_p50_ns,omitempty"`
	TwinP99Ns int64     `json:"twin_p99_ns,omitempty"`
}

// Timeline is latency over time, all operations together. Buckets is the
// fine series (at most Options.Buckets rows, for charts); Coarse is the
// same span in at most coarseRows rows, for the terminal. Empty buckets
// are left out.
type Timeline struct {
	BucketNs       int64    `json:"bucket_ns"`
	Buckets        []Bucket `json:"buckets"`
	CoarseBucketNs int64    `json:"coarse_bucket_ns"`
	Coarse         []Bucket `json:"coarse"`
}

// coarseRows bounds the rows of the terminal's timeline table.
const coarseRows = 10

func (t *timeline) report() Timeline {
	tl := Timeline{BucketNs: t.width, Buckets: bucketRows(t.buckets, t.width)}
	if len(t.buckets) == 0 {
		return tl
	}
	width := t.width
	for floorDiv(t.hi*t.width, width)-floorDiv(t.lo*t.width, width) >= coarseRows {
		width = nextWidth(width)
	}
	factor := width / t.width
	coarse := make(map[int64]*timeBucket)
	for k, b := range t.buckets {
		nk := floorDiv(k, factor)
		m := coarse[nk]
		if m == nil {
			m = &timeBucket{}
			coarse[nk] = m
		}
		m.merge(b) // clones b's histograms: t's buckets stay untouched
	}
	tl.CoarseBucketNs = width
	tl.Coarse = bucketRows(coarse, width)
	return tl
}

func bucketRows(buckets map[int64]*timeBucket, width int64) []Bucket {
	keys := make([]int64, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rows := make([]Bucket, 0, len(keys))
	for _, k := range keys {
		b := buckets[k]
		row := Bucket{
			Start:  time.Unix(0, k*width).UTC(),
			Count:  b.count,
			Errors: b.errors,
		}
		if b.crypt != nil {
			row.P50Ns = b.crypt.ValueAtQuantile(50)
			row.P99Ns = b.crypt.ValueAtQuantile(99)
		}
		if b.twin != nil {
			row.TwinCount = b.twinCount
			row.TwinP50Ns = b.twin.ValueAtQuantile(50)
			row.TwinP99Ns = b.twin.ValueAtQuantile(99)
		}
		rows = append(rows, row)
	}
	return rows
}
