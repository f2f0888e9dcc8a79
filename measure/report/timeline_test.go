package report

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

func TestWidthLadderDivides(t *testing.T) {
	for i := 1; i < len(widthLadder); i++ {
		if widthLadder[i]%widthLadder[i-1] != 0 {
			t.Errorf("%v does not divide %v: growing would split buckets", widthLadder[i-1], widthLadder[i])
		}
	}
	last := int64(widthLadder[len(widthLadder)-1])
	if nextWidth(last) != 2*last {
		t.Errorf("past the ladder: %d", nextWidth(last))
	}
}

// The timeline grows its buckets as the span grows, never holds more than
// the maximum, and loses no operation on the way: every bucket's count is
// what a direct count at the final width gives, whatever the order of the
// lines.
func TestTimelineBoundedAndExact(t *testing.T) {
	const n = 20000
	rng := rand.New(rand.NewPCG(5, 6))
	span := 10 * time.Hour
	ts := make([]time.Time, n)
	for i := range ts {
		ts[i] = t0.Add(time.Duration(rng.Int64N(int64(span))))
	}
	// Out of order, as when FILE is read before FILE.1.
	rng.Shuffle(n, func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })

	for _, maxBuckets := range []int{2, 7, 50, 200} {
		tl := newTimeline(maxBuckets)
		for i, at := range ts {
			tl.add(at.UnixNano(), int64(i), false, 0, false)
			if len(tl.buckets) > maxBuckets {
				t.Fatalf("max %d: %d buckets after %d lines", maxBuckets, len(tl.buckets), i+1)
			}
		}
		rep := tl.report()
		w := rep.BucketNs
		if !slices.Contains(widthLadder, time.Duration(w)) {
			t.Errorf("max %d: width %v not on the ladder", maxBuckets, time.Duration(w))
		}
		// The chosen width is the smallest on the ladder that fits.
		lo, hi := minMax(ts)
		if buckets := hi.UnixNano()/w - lo.UnixNano()/w + 1; buckets > int64(maxBuckets) {
			t.Errorf("max %d: span needs %d buckets at the chosen width", maxBuckets, buckets)
		}
		for _, smaller := range widthLadder {
			s := int64(smaller)
			if s < w && hi.UnixNano()/s-lo.UnixNano()/s+1 <= int64(maxBuckets) {
				t.Errorf("max %d: width %v chosen, but %v would do", maxBuckets, time.Duration(w), smaller)
			}
		}
		want := map[int64]int64{}
		for _, at := range ts {
			want[at.UnixNano()/w]++
		}
		if len(rep.Buckets) != len(want) {
			t.Errorf("max %d: %d buckets, want %d", maxBuckets, len(rep.Buckets), len(want))
		}
		for _, b := range rep.Buckets {
			if b.Count != want[b.Start.UnixNano()/w] || b.Start.UnixNano()%w != 0 {
				t.Errorf("max %d: bucket %v count %d, want %d", maxBuckets, b.Start, b.Count, want[b.Start.UnixNano()/w])
			}
		}
		if len(rep.Coarse) > coarseRows {
			t.Errorf("max %d: %d coarse rows", maxBuckets, len(rep.Coarse))
		}
		var total int64
		for _, b := range rep.Coarse {
			total += b.Count
		}
		if total != n {
			t.Errorf("max %d: coarse rows count %d ops, want %d", maxBuckets, total, n)
		}
	}
}

func minMax(ts []time.Time) (lo, hi time.Time) {
	lo, hi = ts[0], ts[0]
	for _, t := range ts {
		if t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
	}
	return lo, hi
}

// Latency that changes half way through shows in the buckets, for both
// sides.
func TestTimelinePercentiles(t *testing.T) {
	var lines []measure.LogLine
	for i := range 2000 {
		l := measure.LogLine{TS: t0.Add(time.Duration(i) * 100 * time.Millisecond), Mount: "m", Op: "read",
			Ns: 100 * us, TwinNs: 50 * us}
		if i >= 1000 {
			l.Ns, l.TwinNs = 1000*us, 200*us
		}
		if i%100 == 0 {
			l.Errno = 5
		}
		lines = append(lines, l)
	}
	r := aggregate(t, Options{}, encodeLog(t, lines))
	tl := r.Timeline
	if tl.BucketNs != int64(time.Second) || len(tl.Buckets) != 200 {
		t.Fatalf("bucket %v × %d, want 1s × 200", time.Duration(tl.BucketNs), len(tl.Buckets))
	}
	first, last := tl.Buckets[0], tl.Buckets[len(tl.Buckets)-1]
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"first p50", first.P50Ns, 100 * us}, {"first p99", first.P99Ns, 100 * us},
		{"first twin p50", first.TwinP50Ns, 50 * us}, {"last p99", last.P99Ns, 1000 * us},
		{"last twin p99", last.TwinP99Ns, 200 * us},
	} {
		if !near(float64(c.got), float64(c.want), 1e-2) { // 2-digit histograms: within 1 %
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if first.Count != 10 || first.TwinCount != 10 || first.Errors != 1 || !first.Start.Equal(t0) {
		t.Errorf("first bucket %+v", first)
	}
	// Coarse: 200 s in rows of 20 s; the middle row holds both regimes.
	if tl.CoarseBucketNs != int64(20*time.Second) || len(tl.Coarse) != 10 {
		t.Fatalf("coarse %v × %d", time.Duration(tl.CoarseBucketNs), len(tl.Coarse))
	}
	if c := tl.Coarse[4]; c.Count != 200 || !near(float64(c.P50Ns), float64(100*us), 1e-2) {
		t.Errorf("coarse row 4: %+v", c)
	}
	if c := tl.Coarse[5]; !near(float64(c.P50Ns), float64(1000*us), 1e-2) || c.Errors != 2 {
		t.Errorf("coarse row 5: %+v", c)
	}
}
