package measure

import (
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBucketsAndErrnos: spans land in the first bucket whose bound is at
// or above them (cumulatively), beyond the last bound only in Count, and
// failures are counted by errno name, on both sides of a mirror.
func TestBucketsAndErrnos(t *testing.T) {
	r := NewRecorder("m")
	for _, d := range []time.Duration{500, time.Microsecond, 3 * time.Microsecond, 20 * time.Millisecond, 2 * time.Hour} {
		r.ops[OpRead].record(d, 0, 0, 0, 0)
	}
	for _, e := range []syscall.Errno{syscall.ENOENT, syscall.ENOENT, syscall.EACCES} {
		s := r.Start(OpLookup, 1)
		s.SetTwin(Part{Total: time.Microsecond}, syscall.EIO)
		s.End(e)
	}
	snap := r.Snapshot()
	read := snap.Ops[1]
	if read.Op != "read" {
		t.Fatalf("ops %+v", snap.Ops)
	}
	want := map[int64]int64{
		1000: 2, 2500: 2, 5000: 3, 10_000: 3, 10_000_000: 3, 25_000_000: 4, int64(10 * time.Second): 4,
	}
	if len(read.Buckets) != len(BucketBoundsNs) {
		t.Fatalf("%d buckets, want %d", len(read.Buckets), len(BucketBoundsNs))
	}
	for i, bound := range BucketBoundsNs {
		if w, ok := want[bound]; ok && read.Buckets[i] != w {
			t.Errorf("bucket le %d ns = %d, want %d (all: %v)", bound, read.Buckets[i], w, read.Buckets)
		}
	}
	if read.Count != 5 || read.Errnos != nil {
		t.Errorf("read count %d errnos %v", read.Count, read.Errnos)
	}
	lookup := snap.Ops[0]
	if !reflect.DeepEqual(lookup.Errnos, map[string]int64{"ENOENT": 2, "EACCES": 1}) || lookup.Errors != 3 {
		t.Errorf("lookup errors %d by errno %v", lookup.Errors, lookup.Errnos)
	}
	if !reflect.DeepEqual(snap.Twin[0].Errnos, map[string]int64{"EIO": 3}) {
		t.Errorf("twin lookup errnos %v", snap.Twin[0].Errnos)
	}
	if got := ErrnoName(syscall.Errno(4000)); got != "errno4000" {
		t.Errorf("ErrnoName(4000) = %q", got)
	}
}

// TestBucketQuantile interpolates within the bucket as histogram_quantile
// does, and says "> 10.0s" beyond the last bound.
func TestBucketQuantile(t *testing.T) {
	b := make([]int64, len(BucketBoundsNs))
	for i := 1; i < len(b); i++ {
		b[i] = 10 // all ten spans in (1 µs, 2.5 µs]
	}
	o := Stats{Count: 10, Buckets: b}
	if got := bucketQuantile(o, 0.5); got != "1.75µs" {
		t.Errorf("p50 = %s, want 1.75µs", got)
	}
	o.Count = 20 // ten more beyond the last bound
	if got := bucketQuantile(o, 0.99); got != "> 10.0s" {
		t.Errorf("p99 = %s, want > 10.0s", got)
	}
	if got := bucketQuantile(Stats{Count: 3}, 0.5); got != "-" {
		t.Errorf("without buckets: %s", got)
	}
}

// TestIntervalTable: the interval table shows the difference between two
// snapshots (rate, mean and percentiles of the interval alone), "idle"
// when nothing happened, and counts a snapshot of an earlier mount as
// nothing.
func TestIntervalTable(t *testing.T) {
	since := time.Unix(1000, 0)
	buckets := func(n int64, from int) []int64 {
		b := make([]int64, len(BucketBoundsNs))
		for i := from; i < len(b); i++ {
			b[i] = n
		}
		return b
	}
	prev := Snapshot{Mount: "/m", Since: since, Elapsed: 10, CPUUserS: 1, Ops: []Stats{
		// 100 slow writes before the interval: 1 s each.
		{Op: "write", Count: 100, Bytes: 100 << 20, TotalNs: 100 * int64(time.Second), Buckets: buckets(100, len(BucketBoundsNs)-1)},
	}}
	cur := prev
	cur.Elapsed, cur.CPUUserS = 12, 1.5
	cur.Ops = []Stats{
		// Then 200 writes of 2 µs, in 2 s: 100/s; 8 MiB, 4 MiB/s.
		{Op: "write", Count: 300, Bytes: 108 << 20, TotalNs: 100*int64(time.Second) + 200*2000, CryptoNs: 200 * 1000,
			Buckets: func() []int64 {
				b := buckets(100, len(BucketBoundsNs)-1)
				for i := 1; i < len(b); i++ {
					b[i] += 200
				}
				return b
			}()},
	}
	var sb strings.Builder
	cur.IntervalTable(&sb, prev)
	out := sb.String()
	row := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "write" {
			row = strings.Join(f, " ")
		}
	}
	// rate, errors, mean, ~p50, ~p99, MiB/s, crypto%, lower%
	if want := "write 100.0 0 2.00µs 1.75µs 2.48µs 4.0 50.0 0.0"; row != want {
		t.Errorf("interval row %q, want %q\n%s", row, want, out)
	}
	if !strings.Contains(out, "mount /m, last 2.0 s") || !strings.Contains(out, "CPU: 25% of a core; 64.00 CPU-s per GiB moved") {
		t.Errorf("interval header or CPU line:\n%s", out)
	}
	if strings.Contains(out, "op log") {
		t.Errorf("op log line without an op log:\n%s", out)
	}

	sb.Reset()
	prev.Elapsed = 11
	prev.Ops = cur.Ops
	cur.IntervalTable(&sb, prev)
	if out := sb.String(); !strings.Contains(out, "idle: no operations in this interval") || strings.Contains(out, "write") {
		t.Errorf("idle interval:\n%s", out)
	}

	// A previous snapshot of another recorder: everything is new.
	sb.Reset()
	prev.Since = since.Add(-time.Hour)
	cur.IntervalTable(&sb, prev)
	if out := sb.String(); !strings.Contains(out, "last 12.0 s") || !strings.Contains(out, "write") {
		t.Errorf("after a remount:\n%s", out)
	}
}

// TestTableCPUPerGiBAndOpLog: "-" rather than a huge CPU-per-GiB figure
// while less than 1 MiB has moved; an op-log line only with an op log.
func TestTableCPUPerGiBAndOpLog(t *testing.T) {
	s := Snapshot{Mount: "/m", Elapsed: 5, CPUUserS: 0.2, CPUSysS: 0.1,
		Ops: []Stats{{Op: "write", Count: 1, Bytes: 1400, TotalNs: 1000}}}
	var sb strings.Builder
	s.Table(&sb)
	out := sb.String()
	if !strings.Contains(out, "CPU: user 0.20 s, sys 0.10 s; - CPU-s per GiB moved") {
		t.Errorf("CPU line with 1400 bytes moved:\n%s", out)
	}
	if strings.Contains(out, "op log") {
		t.Errorf("op log line without an op log:\n%s", out)
	}
	s.OpLog = true
	s.Ops[0].Bytes = 1 << 30
	sb.Reset()
	s.Table(&sb)
	out = sb.String()
	if !strings.Contains(out, "op log: 0 lines written, 0 dropped") || !strings.Contains(out, "; 0.30 CPU-s per GiB moved") {
		t.Errorf("with an op log and 1 GiB moved:\n%s", out)
	}
}

// TestFailedSpanDoesNotAllocate: counting failures by errno costs a span
// nothing once its errno has been seen (the map is made at the first
// failure of an operation, never for one that succeeds).
func TestFailedSpanDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := NewRecorder("m")
	span := func() {
		s := r.Start(OpLookup, 42)
		s.SetTwin(Part{Total: time.Microsecond}, syscall.ENOENT)
		s.End(syscall.ENOENT)
	}
	span()
	if n := testing.AllocsPerRun(1000, span); n != 0 {
		t.Errorf("failed span: %v allocs, want 0", n)
	}
	r.Start(OpRead, 1).End(0)
	if r.ops[OpRead].errnos != nil {
		t.Errorf("a successful op made an errno map")
	}
}
