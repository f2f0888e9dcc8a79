package report

import (
	"container/heap"
	"slices"
	"time"
)

// SlowOp is one operation from the log, kept for being among the slowest.
type SlowOp struct {
	TS     time.Time `json:"ts"`
	Mount  string    `json:"mount"`
	Op     string    `json:"op"`
	Ino    uint64    `json:"ino"`
	Path   string    `json:"path,omitempty"`
	Off    int64     `json:"off"`
	Len    int64     `json:"len"`
	Ns     int64     `json:"ns"`
	TwinNs int64     `json:"twin_ns,omitempty"`
	Errno  int       `json:"errno"`
}

// topK keeps the k slowest operations in a min-heap on ns: the root is
// the fastest of the kept ones, the one a slower newcomer replaces.
type topK struct {
	k int
	h slowHeap
}

func (t *topK) offer(op SlowOp) {
	if len(t.h) < t.k {
		heap.Push(&t.h, op)
		return
	}
	if slower(op, t.h[0]) {
		t.h[0] = op
		heap.Fix(&t.h, 0)
	}
}

// sorted returns the kept operations, slowest first.
func (t *topK) sorted() []SlowOp {
	out := slices.Clone(t.h)
	slices.SortFunc(out, func(a, b SlowOp) int {
		switch {
		case slower(a, b):
			return -1
		case slower(b, a):
			return 1
		}
		return 0
	})
	return out
}

// slower orders by ns; among equal latencies the earlier op counts as
// slower, so which ones are kept does not depend on the order of files.
func slower(a, b SlowOp) bool {
	if a.Ns != b.Ns {
		return a.Ns > b.Ns
	}
	return a.TS.Before(b.TS)
}

type slowHeap []SlowOp

func (h slowHeap) Len() int           { return len(h) }
func (h slowHeap) Less(i, j int) bool { return slower(h[j], h[i]) }
func (h slowHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *slowHeap) Push(x any)        { *h = append(*h, x.(SlowOp)) }
func (h *slowHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
