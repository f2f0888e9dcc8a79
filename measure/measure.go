// Package measure records how long filesystem operations take. The fs
// layer reports; measure records: it knows nothing of AES or of FUSE
// internals, only of named operations, their durations and the parts of a
// duration spent in crypto and in the lower filesystem.
//
// Every mount owns a Recorder. Each operation is a Span: started when the
// request arrives, given the time spent in crypto and in lower-filesystem
// syscalls as they happen, and ended with its errno when the reply is
// ready. Ending a span records it in per-operation HDR histograms (always
// on: a few tens of nanoseconds) and, when an op log is attached, queues
// one JSON line for it without ever waiting for the log's disk.
//
// In mirror mode each span also carries the timing of the same operation
// applied to the plaintext twin, so one run gives paired evidence.
package measure

import (
	"syscall"
	"time"
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
	NumOps // number of operations; not an operation
)

// String returns the lower-case name used in logs and tables ("read").
func (o Op) String() string { panic("TODO") }

// ParseOp is the inverse of String.
func ParseOp(s string) (Op, bool) { panic("TODO") }

// Part durations of one side of an operation.
type Part struct {
	Total  time.Duration
	Crypto time.Duration
	Lower  time.Duration
}

// Recorder collects the spans of one mount. A nil *Recorder is valid and
// records nothing (instrumentation off); its Start returns a nil *Span,
// and every method of a nil *Span is a no-op.
type Recorder struct{}

// NewRecorder returns a recorder for the mount named mount (shown in logs).
func NewRecorder(mount string) *Recorder { panic("TODO") }

// SetOpLog attaches an op log; every span ended afterwards is offered to
// it (subject to its sampling). Call before the mount serves requests.
func (r *Recorder) SetOpLog(l *OpLog) { panic("TODO") }

// Start begins a span for op on inode ino now.
func (r *Recorder) Start(op Op, ino uint64) *Span { panic("TODO") }

// Span is one operation in flight. It is used by one goroutine at a time;
// AddCrypto and AddLower may be called from several goroutines only if the
// caller synchronises (the fs layer adds from the request's goroutine).
type Span struct{}

// AddCrypto adds time spent encrypting, decrypting or transforming names.
func (s *Span) AddCrypto(d time.Duration) { panic("TODO") }

// AddLower adds time spent in lower-filesystem system calls.
func (s *Span) AddLower(d time.Duration) { panic("TODO") }

// SetIO records the offset and length of a data operation (bytes moved
// count toward throughput).
func (s *Span) SetIO(off int64, n int) { panic("TODO") }

// SetPath records the plaintext path (written to the op log only when the
// log was opened with Paths).
func (s *Span) SetPath(p string) { panic("TODO") }

// SetTwin records the timing of the same operation on the mirror twin
// (mirror mode) and the twin's errno.
func (s *Span) SetTwin(p Part, errno syscall.Errno) { panic("TODO") }

// End finishes the span with the operation's result and records it. The
// span must not be used afterwards.
func (s *Span) End(errno syscall.Errno) { panic("TODO") }

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
}

// Snapshot is a consistent-enough copy of a recorder's state.
type Snapshot struct {
	Mount      string    `json:"mount"`
	Since      time.Time `json:"since"`
	Elapsed    float64   `json:"elapsed_s"`
	Ops        []Stats   `json:"ops"`            // ops with Count > 0, in Op order
	Twin       []Stats   `json:"twin,omitempty"` // mirror mode: same ops on the twin
	LogLines   int64     `json:"oplog_lines"`
	LogDropped int64     `json:"oplog_dropped"`
	// Filled in by the daemon, not by measure.
	CPUUserS float64 `json:"cpu_user_s"`
	CPUSysS  float64 `json:"cpu_sys_s"`
}

// Snapshot returns the current statistics.
func (r *Recorder) Snapshot() Snapshot { panic("TODO") }
