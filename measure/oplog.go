package measure

import "time"

// OpLogOptions configure an op log.
type OpLogOptions struct {
	// Mount is written as the "mount" field of every line.
	Mount string
	// Sample keeps 1 in Sample spans (0 or 1: all).
	Sample int
	// Paths writes the plaintext path of each op (off by default: paths
	// are sensitive).
	Paths bool
	// Buffer is the number of lines queued between the ops and the
	// writer; when it is full, lines are dropped and counted (default 65536).
	Buffer int
	// MaxBytes caps the file: when it is exceeded, FILE is renamed to
	// FILE.1 (replacing an older FILE.1) and a new FILE is started, so the
	// log never takes more than about 2*MaxBytes (default 1 GiB; <0: no cap).
	MaxBytes int64
	// FlushEvery bounds how long a line may wait in memory (default 200ms).
	FlushEvery time.Duration
}

// OpLog writes one JSON line per recorded span, asynchronously, with
// zerolog. Fields: ts (RFC3339Nano), mount, op, ino, path (with Paths),
// off, len, ns, crypto_ns, lower_ns, errno, and in mirror mode twin_ns,
// twin_crypto_ns, twin_lower_ns, twin_errno. Only whole lines are ever
// written to the file, so a killed daemon leaves a log that parses up to
// its last flushed line.
type OpLog struct{}

// OpenOpLog creates (truncates) path and starts the writer goroutine.
func OpenOpLog(path string, o OpLogOptions) (*OpLog, error) { panic("TODO") }

// Close flushes what is queued and closes the file.
func (l *OpLog) Close() error { panic("TODO") }

// Lines and Dropped count lines written and lines dropped for a full buffer.
func (l *OpLog) Lines() int64   { panic("TODO") }
func (l *OpLog) Dropped() int64 { panic("TODO") }

// LogLine is one line of an op log, as written by OpLog and read by
// reports. Twin fields are zero (and omitted) outside mirror mode.
type LogLine struct {
	TS           time.Time `json:"ts"`
	Mount        string    `json:"mount"`
	Op           string    `json:"op"`
	Ino          uint64    `json:"ino"`
	Path         string    `json:"path,omitempty"`
	Off          int64     `json:"off"`
	Len          int64     `json:"len"`
	Ns           int64     `json:"ns"`
	CryptoNs     int64     `json:"crypto_ns"`
	LowerNs      int64     `json:"lower_ns"`
	Errno        int       `json:"errno"`
	TwinNs       int64     `json:"twin_ns,omitempty"`
	TwinCryptoNs int64     `json:"twin_crypto_ns,omitempty"`
	TwinLowerNs  int64     `json:"twin_lower_ns,omitempty"`
	TwinErrno    int       `json:"twin_errno,omitempty"`
}
