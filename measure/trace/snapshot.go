package trace

import (
	"fmt"
	"sort"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/twincrypt/twincrypt/measure"
)

// Layers of a Series.
const (
	LayerSyscall = "syscall" // the time the application waits, entry to exit
	LayerFUSE    = "fuse"    // the kernel's FUSE round trip, send to end
	LayerBlock   = "block"   // a block request, issue to completion
)

// Series is one operation on one target in one layer.
type Series struct {
	Layer  string `json:"layer"`
	Op     string `json:"op"`     // "newfstatat", "LOOKUP", "read"
	Target string `json:"target"` // the target's path
	Dev    uint32 `json:"dev"`    // major<<20 | minor
	Count  int64  `json:"count"`
	Errors int64  `json:"errors"`
	// buckets counts samples by log-linear bucket (see bucketRange).
	buckets map[uint32]int64
}

// Snapshot is every series of a tracer at one moment.
type Snapshot struct {
	Taken  time.Time `json:"taken"`
	Series []Series  `json:"series"`
}

// bucketRange is the range [lo, hi] of ns values in a log-linear bucket:
// exact below 16 ns, then 16 buckets per power of two.
func bucketRange(b uint32) (lo, hi int64) {
	if b < 16 {
		return int64(b), int64(b)
	}
	msb := b/16 + 3
	minor := int64(b % 16)
	lo = (16 + minor) << (msb - 4)
	return lo, lo + int64(1)<<(msb-4) - 1
}

// bucketOf is the bucket of v, as the BPF programs compute it.
func bucketOf(v uint64) uint32 {
	if v < 16 {
		return uint32(v)
	}
	msb := uint32(63)
	for v>>msb == 0 {
		msb--
	}
	return (msb-3)*16 + uint32(v>>(msb-4))&15
}

// The HDR histogram's range, as measure's: 1 ns to an hour, 3 digits.
const (
	histLowestNs  = 1
	histHighestNs = int64(time.Hour)
)

// Hist is the series as an HDR histogram, each bucket's samples at its
// midpoint: percentiles are within 1/32 of the true value.
func (s Series) Hist() *hdrhistogram.Histogram {
	h := hdrhistogram.New(histLowestNs, histHighestNs, 3)
	for b, n := range s.buckets {
		lo, hi := bucketRange(b)
		v := min(max(lo+(hi-lo)/2, histLowestNs), histHighestNs)
		_ = h.RecordValues(v, n)
	}
	return h
}

// Stats summarises the series in measure's form (Op is the series' Op).
func (s Series) Stats() measure.Stats {
	h := s.Hist()
	st := measure.Stats{
		Op:      s.Op,
		Count:   s.Count,
		Errors:  s.Errors,
		MeanNs:  h.Mean(),
		P50Ns:   h.ValueAtQuantile(50),
		P90Ns:   h.ValueAtQuantile(90),
		P99Ns:   h.ValueAtQuantile(99),
		P999Ns:  h.ValueAtQuantile(99.9),
		MaxNs:   h.Max(),
		TotalNs: int64(h.Mean() * float64(h.TotalCount())),
		Buckets: measure.Buckets(h),
	}
	return st
}

// Find returns the series of layer/op on the target at path.
func (s Snapshot) Find(layer, op, target string) (Series, bool) {
	for _, x := range s.Series {
		if x.Layer == layer && x.Op == op && x.Target == target {
			return x, true
		}
	}
	return Series{}, false
}

// Sub is what happened between prev and s: a window's series.
func (s Snapshot) Sub(prev Snapshot) Snapshot {
	type key struct {
		layer, op string
		dev       uint32
	}
	old := map[key]Series{}
	for _, p := range prev.Series {
		old[key{p.Layer, p.Op, p.Dev}] = p
	}
	out := Snapshot{Taken: s.Taken}
	for _, c := range s.Series {
		p := old[key{c.Layer, c.Op, c.Dev}]
		d := c
		d.Count -= p.Count
		d.Errors -= p.Errors
		d.buckets = map[uint32]int64{}
		for b, n := range c.buckets {
			if n -= p.buckets[b]; n > 0 {
				d.buckets[b] = n
			}
		}
		if d.Count > 0 {
			out.Series = append(out.Series, d)
		}
	}
	return out
}

// sortSeries orders series by layer, target, then op.
func sortSeries(ss []Series) {
	rank := map[string]int{LayerSyscall: 0, LayerFUSE: 1, LayerBlock: 2}
	sort.Slice(ss, func(i, j int) bool {
		a, b := ss[i], ss[j]
		if a.Layer != b.Layer {
			return rank[a.Layer] < rank[b.Layer]
		}
		if a.Target != b.Target {
			return a.Target < b.Target
		}
		return a.Op < b.Op
	})
}

// blockOps names REQ_OP_* (include/linux/blk_types.h).
var blockOps = map[uint32]string{0: "read", 1: "write", 2: "flush", 3: "discard",
	5: "secure_erase", 7: "zone_append", 9: "write_zeroes"}

func blockOpName(op uint32) string {
	if n, ok := blockOps[op]; ok {
		return n
	}
	return fmt.Sprintf("op%d", op)
}

// fuseOps names FUSE opcodes as the fuse tracepoints print them
// (include/uapi/linux/fuse.h), without the FUSE_ prefix: the names
// measure's daemon-side Ops use, upper-cased.
var fuseOps = map[uint32]string{1: "LOOKUP", 2: "FORGET", 3: "GETATTR", 4: "SETATTR",
	5: "READLINK", 6: "SYMLINK", 8: "MKNOD", 9: "MKDIR", 10: "UNLINK", 11: "RMDIR",
	12: "RENAME", 13: "LINK", 14: "OPEN", 15: "READ", 16: "WRITE", 17: "STATFS",
	18: "RELEASE", 20: "FSYNC", 21: "SETXATTR", 22: "GETXATTR", 23: "LISTXATTR",
	24: "REMOVEXATTR", 25: "FLUSH", 26: "INIT", 27: "OPENDIR", 28: "READDIR",
	29: "RELEASEDIR", 30: "FSYNCDIR", 31: "GETLK", 32: "SETLK", 33: "SETLKW",
	34: "ACCESS", 35: "CREATE", 36: "INTERRUPT", 37: "BMAP", 38: "DESTROY",
	39: "IOCTL", 40: "POLL", 41: "NOTIFY_REPLY", 42: "BATCH_FORGET", 43: "FALLOCATE",
	44: "READDIRPLUS", 45: "RENAME2", 46: "LSEEK", 47: "COPY_FILE_RANGE",
	48: "SETUPMAPPING", 49: "REMOVEMAPPING", 50: "SYNCFS", 51: "TMPFILE", 52: "STATX"}

// FUSEOpName is the name of a FUSE opcode ("LOOKUP", "op60").
func FUSEOpName(op uint32) string {
	if n, ok := fuseOps[op]; ok {
		return n
	}
	return fmt.Sprintf("op%d", op)
}
