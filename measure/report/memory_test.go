package report

import (
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// genLog produces an op log of about size bytes on the fly, never holding
// more than one line: two mounts in mirror mode, the common ops, with
// paths, spread over eight hours so that the timeline has to grow. Every
// sampleEvery bytes it calls sample (to watch the heap while the log is
// being read).
type genLog struct {
	size, done  int64
	sampleEvery int64
	nextSample  int64
	sample      func()
	n           int64
	buf, pend   []byte
}

var genOps = []string{"read", "write", "lookup", "getattr", "create", "unlink", "readdir", "fsync", "open", "release"}

func (g *genLog) Read(p []byte) (int, error) {
	for len(g.pend) == 0 {
		if g.done >= g.size {
			return 0, io.EOF
		}
		g.pend = g.line()
		g.done += int64(len(g.pend))
		if g.done >= g.nextSample {
			g.sample()
			g.nextSample += g.sampleEvery
		}
	}
	n := copy(p, g.pend)
	g.pend = g.pend[n:]
	return n, nil
}

// line renders line number g.n, with latencies spread over four decades
// by a cheap hash.
func (g *genLog) line() []byte {
	i := g.n
	g.n++
	h := uint64(i)*0x9E3779B97F4A7C15 ^ uint64(i)>>7
	ns := int64(1000 + h%10_000_000>>(h%13))
	b := g.buf[:0]
	b = append(b, `{"ts":"`...)
	b = t0.Add(time.Duration(i)*29*time.Millisecond).AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","mount":"/mnt/vault`...)
	b = strconv.AppendInt(b, i%2, 10)
	b = append(b, `","op":"`...)
	b = append(b, genOps[h%uint64(len(genOps))]...)
	b = append(b, `","ino":`...)
	b = strconv.AppendUint(b, h%100_000, 10)
	b = append(b, `,"path":"/home/user/project/src/pkg`...)
	b = strconv.AppendUint(b, h%997, 10)
	b = append(b, `/file.go","off":`...)
	b = strconv.AppendInt(b, int64(h%1000)*4096, 10)
	b = append(b, `,"len":131072,"ns":`...)
	b = strconv.AppendInt(b, ns, 10)
	b = append(b, `,"crypto_ns":`...)
	b = strconv.AppendInt(b, ns/3, 10)
	b = append(b, `,"lower_ns":`...)
	b = strconv.AppendInt(b, ns/2, 10)
	b = append(b, `,"errno":0,"twin_ns":`...)
	b = strconv.AppendInt(b, ns/2+500, 10)
	b = append(b, `,"twin_lower_ns":`...)
	b = strconv.AppendInt(b, ns/3, 10)
	b = append(b, "}\n"...)
	g.buf = b
	return b
}

// A 200 MB log is read with a heap that stays far below the log's size:
// nothing per line is kept.
func TestMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a 200 MB generated log")
	}
	const (
		logSize  = 200 << 20
		maxHeap  = 100 << 20
		sampleMB = 8 << 20
	)
	runtime.GC()
	var peak uint64
	g := &genLog{size: logSize, sampleEvery: sampleMB, sample: func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
	}}
	g.nextSample = sampleMB

	start := time.Now()
	a := NewAggregator(Options{})
	if err := a.Read(g, "generated"); err != nil {
		t.Fatal(err)
	}
	r := a.Report()
	g.sample()
	t.Logf("%d MB, %d lines in %v; peak HeapInuse %d MB; timeline %v × %d",
		g.done>>20, r.Lines, time.Since(start).Round(time.Millisecond), peak>>20,
		time.Duration(r.Timeline.BucketNs), len(r.Timeline.Buckets))

	if r.Lines != g.n || r.Malformed != 0 {
		t.Fatalf("lines %d malformed %d, want %d and 0", r.Lines, r.Malformed, g.n)
	}
	if len(r.Ops) != 2*len(genOps) || !r.Mirror || len(r.Slowest) != DefaultTop {
		t.Errorf("%d ops, mirror %v, %d slowest", len(r.Ops), r.Mirror, len(r.Slowest))
	}
	if n := len(r.Timeline.Buckets); n > DefaultBuckets || n < DefaultBuckets/5 {
		t.Errorf("%d timeline buckets, want at most %d and not a handful", n, DefaultBuckets)
	}
	if peak > maxHeap {
		t.Errorf("peak HeapInuse %d MB while reading a %d MB log, want below %d MB",
			peak>>20, logSize>>20, maxHeap>>20)
	}
}
