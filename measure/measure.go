// Package measure records how long filesystem operations take. The fs
// layer reports; measure records: it knows nothing of AES or of FUSE
// internals, only of named operations, their durations and the parts of a
// duration spent in crypto and in the lower filesystem.
//
// Every mount owns a Recorder. Each operation is a Span: started when the
// request arrives, given the time spent in crypto and in lower-filesystem
// syscalls as they happen, and ended with its errno when the reply is
// ready. Ending a span records it in per-operation HDR histograms (always
// on: two monotonic clock reads and a few tens of nanoseconds, ~200 ns a
// span on our VMs) and, when an op log is attached, queues one JSON line
// for it without ever waiting for the log's disk.
//
// In mirror mode each span also carries the timing of the same operation
// applied to the plaintext twin, so one run gives paired evidence.
package measure

import (
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// Op names a filesystem operation.
type Op uint8

// The operations, as the FUSE protocol names them.
const (
	OpLookup Op = iota
	OpGetattr
	OpSetattr
	OpAccess
	OpOpen
	OpCreate
	OpRead
	OpWrite
	OpFlush
	OpFsync
	OpRelease
	OpMkdir
	OpRmdir
	OpUnlink
	OpRename
	OpSymlink
	OpReadlink
	OpLink
	OpMknod
	OpOpendir
	OpReaddir
	OpStatfs
	OpGetxattr
	OpSetxattr
	OpListxattr
	OpRemovexattr
	OpFallocate
	OpLseek
	OpIoctl
	NumOps // number of operations; not an operation
)

// opNames are the names written to logs and tables; reports parse them
// back with ParseOp, so renaming one breaks old logs.
var opNames = [NumOps]string{
	OpLookup:      "lookup",
	OpGetattr:     "getattr",
	OpSetattr:     "setattr",
	OpAccess:      "access",
	OpOpen:        "open",
	OpCreate:      "create",
	OpRead:        "read",
	OpWrite:       "write",
	OpFlush:       "flush",
	OpFsync:       "fsync",
	OpRelease:     "release",
	OpMkdir:       "mkdir",
	OpRmdir:       "rmdir",
	OpUnlink:      "unlink",
	OpRename:      "rename",
	OpSymlink:     "symlink",
	OpReadlink:    "readlink",
	OpLink:        "link",
	OpMknod:       "mknod",
	OpOpendir:     "opendir",
	OpReaddir:     "readdir",
	OpStatfs:      "statfs",
	OpGetxattr:    "getxattr",
	OpSetxattr:    "setxattr",
	OpListxattr:   "listxattr",
	OpRemovexattr: "removexattr",
	OpFallocate:   "fallocate",
	OpLseek:       "lseek",
	OpIoctl:       "ioctl",
}

// String returns the lower-case name used in logs and tables ("read").
func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// ParseOp is the inverse of String.
func ParseOp(s string) (Op, bool) {
	for i, name := range opNames {
		if name == s {
			return Op(i), true
		}
	}
	return 0, false
}

// Part durations of one side of an operation.
type Part struct {
	Total  time.Duration
	Crypto time.Duration
	Lower  time.Duration
}

// Histogram range and precision. 1 ns .. 1 hour at 3 significant digits
// is about 270 KiB of counters per histogram, so histograms are allocated
// on an operation's first span, not up front (a mount uses ~10 of the 56).
const (
	histLowestNs  = 1
	histHighestNs = int64(time.Hour)
	histDigits    = 3
)

// opStats is one operation on one side. Each has its own mutex: spans of
// different operations never contend, and spans of the same operation hold
// the lock for a histogram increment and six additions.
type opStats struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram // nil until the first span
	count    int64
	errors   int64
	bytes    int64
	cryptoNs int64
	lowerNs  int64
	totalNs  int64
	// errnos counts the failures by errno; nil until the first one, so a
	// span that succeeds pays nothing for it.
	errnos map[syscall.Errno]int64
	// Pads the struct to 128 bytes so that concurrent reads and writes,
	// recorded under different locks, do not bounce one cache line.
	_ [128 - 8 - 8 - 6*8 - 8]byte
}

func (st *opStats) record(total, crypto, lower time.Duration, bytes int64, errno syscall.Errno) {
	v := int64(total)
	if v < histLowestNs {
		v = histLowestNs
	} else if v > histHighestNs {
		v = histHighestNs
	}
	st.mu.Lock()
	if st.hist == nil {
		st.hist = hdrhistogram.New(histLowestNs, histHighestNs, histDigits)
	}
	// v is clamped into the histogram's range, so RecordValue cannot fail
	// (and cannot allocate its error).
	_ = st.hist.RecordValue(v)
	st.count++
	if errno != 0 {
		st.errors++
		if st.errnos == nil {
			st.errnos = make(map[syscall.Errno]int64)
		}
		st.errnos[errno]++
	}
	st.bytes += bytes
	st.cryptoNs += int64(crypto)
	st.lowerNs += int64(lower)
	st.totalNs += int64(total)
	st.mu.Unlock()
}

// stats copies the counters under the lock and computes percentiles on
// the copy, so ops of this kind wait for a memcpy, not for the scans.
func (st *opStats) stats(op Op) (Stats, bool) {
	st.mu.Lock()
	if st.count == 0 {
		st.mu.Unlock()
		return Stats{}, false
	}
	s := Stats{
		Op:       op.String(),
		Count:    st.count,
		Errors:   st.errors,
		Bytes:    st.bytes,
		CryptoNs: st.cryptoNs,
		LowerNs:  st.lowerNs,
		TotalNs:  st.totalNs,
	}
	if len(st.errnos) > 0 {
		s.Errnos = make(map[string]int64, len(st.errnos))
		for e, n := range st.errnos {
			s.Errnos[ErrnoName(e)] += n
		}
	}
	h := st.hist.Clone()
	st.mu.Unlock()

	s.MeanNs = float64(s.TotalNs) / float64(s.Count)
	s.P50Ns = h.ValueAtQuantile(50)
	s.P90Ns = h.ValueAtQuantile(90)
	s.P99Ns = h.ValueAtQuantile(99)
	s.P999Ns = h.ValueAtQuantile(99.9)
	s.MaxNs = h.Max()
	s.Buckets = buckets(h)
	return s, true
}

// BucketBoundsNs are the upper bounds, in ns, of the cumulative latency
// buckets a Stats carries (Buckets[i] counts the spans of at most
// BucketBoundsNs[i]; Count is the +Inf bucket): 1, 2.5 and 5 per decade
// from 1 µs to 10 s, the resolution Prometheus histograms and interval
// percentiles are computed from. Changing them changes what the Buckets
// of saved summaries mean.
var BucketBoundsNs = func() []int64 {
	var b []int64
	for decade := int64(1000); decade <= int64(time.Second); decade *= 10 {
		b = append(b, decade, decade*5/2, decade*5)
	}
	return append(b, int64(10*time.Second))
}()

// buckets folds an HDR histogram into cumulative counts at
// BucketBoundsNs. A value belongs to the first bound at or above the low
// end of its HDR bucket (HDR's resolution here is 0.1%).
func buckets(h *hdrhistogram.Histogram) []int64 {
	out := make([]int64, len(BucketBoundsNs))
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		for i, bound := range BucketBoundsNs {
			if bar.From <= bound {
				out[i] += bar.Count
				break
			}
		}
	}
	for i := 1; i < len(out); i++ {
		out[i] += out[i-1]
	}
	return out
}

// Buckets folds an HDR histogram into cumulative counts at
// BucketBoundsNs, as Stats.Buckets holds them (for histograms kept
// elsewhere, e.g. the kernel's, to be shown beside the daemon's).
func Buckets(h *hdrhistogram.Histogram) []int64 { return buckets(h) }

// ErrnoName is the symbolic name of an errno ("ENOENT"), or its number
// for one without a name.
func ErrnoName(e syscall.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return "errno" + strconv.Itoa(int(e))
}

// Recorder collects the spans of one mount. A nil *Recorder is valid and
// records nothing (instrumentation off); its Start returns a nil *Span,
// and every method of a nil *Span is a no-op.
type Recorder struct {
	mount string
	// since is the recorder's creation, with its monotonic reading: spans
	// time themselves as offsets from it, which costs one clock read where
	// time.Now costs two (wall and monotonic; ~60 ns against ~110 ns on
	// our VMs, where the clock is most of a span's cost).
	since       time.Time
	sinceUnixNs int64
	log         atomic.Pointer[OpLog]
	ops         [NumOps]opStats
	twin        [NumOps]opStats
}

// NewRecorder returns a recorder for the mount named mount (shown in logs).
func NewRecorder(mount string) *Recorder {
	now := time.Now()
	return &Recorder{mount: mount, since: now, sinceUnixNs: now.UnixNano()}
}

// monoNs is the monotonic time since the recorder was created.
func (r *Recorder) monoNs() int64 { return int64(time.Since(r.since)) }

// wallNs converts a monotonic offset to wall-clock Unix ns. Derived from
// the monotonic clock, op log timestamps never jump when the wall clock is
// stepped during a mount; they stay within the step of the real time.
func (r *Recorder) wallNs(monoNs int64) int64 { return r.sinceUnixNs + monoNs }

// SetOpLog attaches an op log; every span ended afterwards is offered to
// it (subject to its sampling). Call before the mount serves requests.
// A nil l detaches the log.
func (r *Recorder) SetOpLog(l *OpLog) {
	if r == nil {
		return
	}
	r.log.Store(l)
}

// Spans are recycled: a FUSE mount ends hundreds of thousands per second
// and each would otherwise be a garbage allocation.
var spanPool = sync.Pool{New: func() any { return new(Span) }}

// WantsPaths reports whether the attached op log records paths, so that
// the caller computes a path only when it will be written.
func (r *Recorder) WantsPaths() bool {
	if r == nil {
		return false
	}
	l := r.log.Load()
	return l != nil && l.paths
}

// Start begins a span for op on inode ino now. An op outside the known
// set gives a nil (no-op) span rather than a panic in the daemon.
func (r *Recorder) Start(op Op, ino uint64) *Span {
	if r == nil || op >= NumOps {
		return nil
	}
	s := spanPool.Get().(*Span)
	s.rec = r
	s.op = op
	s.ino = ino
	s.startNs = r.monoNs()
	return s
}

// Span is one operation in flight. It is used by one goroutine at a time;
// AddCrypto and AddLower may be called from several goroutines only if the
// caller synchronises (the fs layer adds from the request's goroutine).
type Span struct {
	rec       *Recorder
	startNs   int64 // monotonic, since the recorder's creation
	ino       uint64
	crypto    time.Duration
	lower     time.Duration
	off       int64
	n         int64
	path      string
	twin      Part
	twinErrno syscall.Errno
	op        Op
	hasIO     bool
	hasTwin   bool
}

// AddCrypto adds time spent encrypting, decrypting or transforming names.
func (s *Span) AddCrypto(d time.Duration) {
	if s != nil {
		s.crypto += d
	}
}

// AddLower adds time spent in lower-filesystem system calls.
func (s *Span) AddLower(d time.Duration) {
	if s != nil {
		s.lower += d
	}
}

// SetIO records the offset and length of a data operation (bytes moved
// count toward throughput). The last call wins.
func (s *Span) SetIO(off int64, n int) {
	if s != nil {
		s.off = off
		s.n = int64(n)
		s.hasIO = true
	}
}

// SetPath records the plaintext path (written to the op log only when the
// log was opened with Paths).
func (s *Span) SetPath(p string) {
	if s != nil {
		s.path = p
	}
}

// SetTwin records the timing of the same operation on the mirror twin
// (mirror mode) and the twin's errno.
func (s *Span) SetTwin(p Part, errno syscall.Errno) {
	if s != nil {
		s.twin = p
		s.twinErrno = errno
		s.hasTwin = true
	}
}

// End finishes the span with the operation's result and records it. The
// span must not be used afterwards.
func (s *Span) End(errno syscall.Errno) {
	if s == nil {
		return
	}
	r := s.rec
	total := time.Duration(r.monoNs() - s.startNs)
	if s.hasTwin {
		// In mirror mode the twin's run happens inside the span; the
		// mount's own latency is what remains.
		total = max(0, total-s.twin.Total)
	}
	var bytes int64
	if s.hasIO && s.n > 0 {
		bytes = s.n
	}
	r.ops[s.op].record(total, s.crypto, s.lower, bytes, errno)
	if s.hasTwin {
		// The twin moved the same bytes (it served the same request).
		r.twin[s.op].record(s.twin.Total, s.twin.Crypto, s.twin.Lower, bytes, s.twinErrno)
	}
	if l := r.log.Load(); l != nil {
		l.offer(s, total, errno)
	}
	*s = Span{}
	spanPool.Put(s)
}

// Stats summarises one operation (one side) over the life of a recorder.
type Stats struct {
	Op       string  `json:"op"`
	Count    int64   `json:"count"`
	Errors   int64   `json:"errors"`
	Bytes    int64   `json:"bytes"`
	MeanNs   float64 `json:"mean_ns"`
	P50Ns    int64   `json:"p50_ns"`
	P90Ns    int64   `json:"p90_ns"`
	P99Ns    int64   `json:"p99_ns"`
	P999Ns   int64   `json:"p999_ns"`
	MaxNs    int64   `json:"max_ns"`
	CryptoNs int64   `json:"crypto_ns"` // sum over all spans
	LowerNs  int64   `json:"lower_ns"`  // sum over all spans
	TotalNs  int64   `json:"total_ns"`  // sum over all spans
	// Errnos counts the failures by errno name ("ENOENT").
	Errnos map[string]int64 `json:"errnos,omitempty"`
	// Buckets are cumulative span counts at BucketBoundsNs.
	Buckets []int64 `json:"buckets,omitempty"`
}

// Snapshot is a consistent-enough copy of a recorder's state.
type Snapshot struct {
	Mount      string    `json:"mount"`
	Since      time.Time `json:"since"`
	Elapsed    float64   `json:"elapsed_s"`
	Ops        []Stats   `json:"ops"`            // ops with Count > 0, in Op order
	Twin       []Stats   `json:"twin,omitempty"` // mirror mode: same ops on the twin
	OpLog      bool      `json:"oplog"`          // an op log is attached
	LogLines   int64     `json:"oplog_lines"`
	LogDropped int64     `json:"oplog_dropped"`
	// Filled in by the daemon, not by measure.
	CPUUserS float64 `json:"cpu_user_s"`
	CPUSysS  float64 `json:"cpu_sys_s"`
	// Transport is how the kernel's requests reach the daemon: "dev"
	// (/dev/fuse) or "uring (...)" (FUSE over io_uring).
	Transport string `json:"transport,omitempty"`
	// KernelPassthrough: the kernel serves READ and WRITE of open files
	// straight from the lower files (a twin mounted so): those ops never
	// reach the daemon and are missing from Ops.
	KernelPassthrough bool `json:"kernel_passthrough,omitempty"`
}

// Snapshot returns the current statistics. Each operation is copied under
// its own lock, so the snapshot is consistent per operation, not across
// operations. A nil recorder gives an empty snapshot.
func (r *Recorder) Snapshot() Snapshot {
	if r == nil {
		return Snapshot{}
	}
	snap := Snapshot{
		Mount:   r.mount,
		Since:   r.since,
		Elapsed: time.Since(r.since).Seconds(),
		Ops:     []Stats{},
	}
	for op := Op(0); op < NumOps; op++ {
		if s, ok := r.ops[op].stats(op); ok {
			snap.Ops = append(snap.Ops, s)
		}
		if s, ok := r.twin[op].stats(op); ok {
			snap.Twin = append(snap.Twin, s)
		}
	}
	if l := r.log.Load(); l != nil {
		snap.OpLog = true
		snap.LogLines = l.Lines()
		snap.LogDropped = l.Dropped()
	}
	return snap
}
