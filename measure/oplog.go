package measure

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/measure/privfile"
)

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

const (
	defaultBuffer     = 65536
	defaultMaxBytes   = 1 << 30
	defaultFlushEvery = 200 * time.Millisecond
	// batchBytes is the size at which the writer flushes its batch with one
	// write(2); 64 KiB amortises the syscall and is one pipe buffer.
	batchBytes = 64 << 10
)

// OpLog writes one JSON line per recorded span, asynchronously, with
// zerolog. Fields: ts (RFC3339Nano), mount, op, ino, path (with Paths),
// off, len, ns, crypto_ns, lower_ns, errno, and in mirror mode twin_ns,
// twin_crypto_ns, twin_lower_ns, twin_errno. Only whole lines are ever
// written to the file, so a killed daemon leaves a log that parses up to
// its last flushed line.
//
// The ts of a line is the wall-clock time at which the operation started,
// computed as the recorder's creation plus monotonic time: lines never go
// back in time when the wall clock is stepped.
//
// Ending a span copies its fields into a fixed-size record and offers it
// to a bounded channel without waiting: a full channel drops the line and
// counts it. One writer goroutine formats records into an in-memory batch
// and writes the batch with one write(2) when it passes 64 KiB, when
// FlushEvery has passed, and at Close.
type OpLog struct {
	path       string
	mount      string
	paths      bool
	sample     uint64
	maxBytes   int64
	flushEvery time.Duration

	ch chan record
	// mu orders offers against Close: offers hold it shared, so once Close
	// holds it exclusively no offer is between its closed check and its
	// send, and the channel can be closed without a send panicking.
	mu     sync.RWMutex
	closed bool

	seq     atomic.Uint64 // spans offered, for sampling
	lines   atomic.Int64
	dropped atomic.Int64
	done    chan struct{} // closed when the writer has exited

	// Owned by the writer goroutine; closeErr is read after done.
	f        *os.File
	off      int64 // bytes in the current file, all of them whole lines
	sink     batchSink
	zl       zerolog.Logger
	tsBuf    []byte
	firstErr error
	closeErr error
	// write writes p to f; tests replace it to stall or fail the disk.
	write func(f *os.File, p []byte) (int, error)
}

// record is what a span leaves for the writer: values only, so the span
// can go back to its pool at once.
type record struct {
	tsNs       int64 // wall clock, Unix ns, at Start
	ino        uint64
	off        int64
	len        int64
	ns         int64
	cryptoNs   int64
	lowerNs    int64
	twinNs     int64
	twinCrypto int64
	twinLower  int64
	path       string
	errno      int32
	twinErrno  int32
	op         Op
	hasTwin    bool
}

// batchSink receives zerolog's output: zerolog makes exactly one Write per
// event, holding one whole line.
type batchSink struct {
	buf   []byte
	lines int64
}

func (b *batchSink) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	b.lines++
	return len(p), nil
}

func writeFile(f *os.File, p []byte) (int, error) { return f.Write(p) }

// OpenOpLog creates (truncates) path and starts the writer goroutine.
func OpenOpLog(path string, o OpLogOptions) (*OpLog, error) {
	return openOpLog(path, o, writeFile)
}

func openOpLog(path string, o OpLogOptions, write func(*os.File, []byte) (int, error)) (*OpLog, error) {
	// 0600, not a symlink, not another user's file: with Paths the log
	// holds plaintext names.
	f, err := privfile.Open(path, true)
	if err != nil {
		return nil, fmt.Errorf("open op log: %w", err)
	}
	l := &OpLog{
		path:       path,
		mount:      o.Mount,
		paths:      o.Paths,
		sample:     1,
		maxBytes:   o.MaxBytes,
		flushEvery: o.FlushEvery,
		done:       make(chan struct{}),
		f:          f,
		tsBuf:      make([]byte, 0, len(time.RFC3339Nano)),
		write:      write,
	}
	if o.Sample > 1 {
		l.sample = uint64(o.Sample)
	}
	if l.maxBytes == 0 {
		l.maxBytes = defaultMaxBytes
	}
	if l.flushEvery <= 0 {
		l.flushEvery = defaultFlushEvery
	}
	buffer := o.Buffer
	if buffer <= 0 {
		buffer = defaultBuffer
	}
	l.ch = make(chan record, buffer)
	l.sink.buf = make([]byte, 0, batchBytes+4096)
	l.zl = zerolog.New(&l.sink)
	go l.run()
	return l, nil
}

// offer queues the span's line unless sampling skips it; it never waits
// for the writer.
func (l *OpLog) offer(s *Span, total time.Duration, errno syscall.Errno) {
	if l.sample > 1 && l.seq.Add(1)%l.sample != 0 {
		return
	}
	rec := record{
		tsNs:     s.rec.wallNs(s.startNs),
		ino:      s.ino,
		off:      s.off,
		len:      s.n,
		ns:       int64(total),
		cryptoNs: int64(s.crypto),
		lowerNs:  int64(s.lower),
		errno:    int32(errno),
		op:       s.op,
	}
	if l.paths {
		rec.path = s.path
	}
	if s.hasTwin {
		rec.hasTwin = true
		rec.twinNs = int64(s.twin.Total)
		rec.twinCrypto = int64(s.twin.Crypto)
		rec.twinLower = int64(s.twin.Lower)
		rec.twinErrno = int32(s.twinErrno)
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		l.dropped.Add(1)
		return
	}
	select {
	case l.ch <- rec:
	default:
		l.dropped.Add(1)
	}
	l.mu.RUnlock()
}

// Close flushes what is queued and closes the file. It is safe to call
// more than once and from several goroutines; spans ended afterwards are
// counted as dropped. It returns the first error writing or rotating the
// file, else the error closing it.
func (l *OpLog) Close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	<-l.done
	return l.closeErr
}

// Lines and Dropped count lines written and lines dropped for a full buffer.
// Dropped also counts lines lost to a write error and spans ended after
// Close, so Lines()+Dropped() is the number of spans kept by sampling once
// the log is closed.
func (l *OpLog) Lines() int64 {
	if l == nil {
		return 0
	}
	return l.lines.Load()
}

func (l *OpLog) Dropped() int64 {
	if l == nil {
		return 0
	}
	return l.dropped.Load()
}

func (l *OpLog) run() {
	defer close(l.done)
	tick := time.NewTicker(l.flushEvery)
	defer tick.Stop()
	for {
		select {
		case rec, ok := <-l.ch:
			if !ok {
				l.flush()
				l.closeErr = l.firstErr
				if l.f != nil {
					if err := l.f.Close(); l.closeErr == nil {
						l.closeErr = err
					}
				}
				return
			}
			l.format(&rec)
			if len(l.sink.buf) >= batchBytes {
				l.flush()
			}
		case <-tick.C:
			l.flush()
		}
	}
}

// format appends rec to the batch as one JSON line, fields in LogLine order.
func (l *OpLog) format(rec *record) {
	before := l.sink.lines
	l.tsBuf = time.Unix(0, rec.tsNs).UTC().AppendFormat(l.tsBuf[:0], time.RFC3339Nano)
	e := l.zl.Log().
		Bytes("ts", l.tsBuf).
		Str("mount", l.mount).
		Str("op", rec.op.String()).
		Uint64("ino", rec.ino)
	if rec.path != "" {
		e = e.Str("path", rec.path)
	}
	e = e.Int64("off", rec.off).
		Int64("len", rec.len).
		Int64("ns", rec.ns).
		Int64("crypto_ns", rec.cryptoNs).
		Int64("lower_ns", rec.lowerNs).
		Int("errno", int(rec.errno))
	if rec.hasTwin {
		e = e.Int64("twin_ns", rec.twinNs).
			Int64("twin_crypto_ns", rec.twinCrypto).
			Int64("twin_lower_ns", rec.twinLower).
			Int("twin_errno", int(rec.twinErrno))
	}
	e.Send()
	if l.sink.lines == before {
		// zerolog filtered the event (zerolog.SetGlobalLevel(Disabled)
		// elsewhere in the process); count it rather than lose it silently.
		l.dropped.Add(1)
	}
}

// flush writes the batch as whole lines, rotating the file at maxBytes.
func (l *OpLog) flush() {
	data := l.sink.buf
	if len(data) > 0 && l.f == nil {
		l.reopen() // a failed rotation left no file; try again
	}
	for len(data) > 0 {
		chunk := data
		if l.maxBytes > 0 && l.off+int64(len(chunk)) > l.maxBytes {
			cut := 0
			if room := l.maxBytes - l.off; room > 0 {
				cut = bytes.LastIndexByte(chunk[:room], '\n') + 1
			}
			if cut == 0 {
				if l.off > 0 {
					l.rotate()
					continue
				}
				// A single line longer than the cap in an empty file:
				// write it whole rather than lose or split it.
				cut = bytes.IndexByte(chunk, '\n') + 1
			}
			chunk = chunk[:cut]
		}
		l.writeChunk(chunk)
		data = data[len(chunk):]
	}
	l.sink.buf = l.sink.buf[:0]
	l.sink.lines = 0
}

// writeChunk writes whole lines to the file. A failed or short write is
// undone (the file is cut back to its last whole line) and its lines are
// counted as dropped; nothing is printed, the error is kept for Close.
func (l *OpLog) writeChunk(chunk []byte) {
	n := int64(bytes.Count(chunk, []byte{'\n'}))
	if l.f == nil {
		l.dropped.Add(n)
		return
	}
	w, err := l.write(l.f, chunk)
	if err == nil && w != len(chunk) {
		err = io.ErrShortWrite
	}
	if err != nil {
		l.keepErr(fmt.Errorf("write op log: %w", err))
		if w > 0 {
			_ = l.f.Truncate(l.off)
			_, _ = l.f.Seek(l.off, io.SeekStart)
		}
		l.dropped.Add(n)
		return
	}
	l.off += int64(len(chunk))
	l.lines.Add(n)
}

// rotate renames FILE to FILE.1 and starts an empty FILE. If the rename
// fails, FILE is truncated instead, so the cap holds either way.
func (l *OpLog) rotate() {
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			l.keepErr(fmt.Errorf("rotate op log: %w", err))
		}
		l.f = nil
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		l.keepErr(fmt.Errorf("rotate op log: %w", err))
	}
	l.reopen()
}

// reopen starts an empty FILE; on failure the writer has no file and
// drops (and counts) lines until a later flush succeeds in reopening.
func (l *OpLog) reopen() {
	l.off = 0
	f, err := privfile.Open(l.path, true)
	if err != nil {
		l.keepErr(fmt.Errorf("reopen op log: %w", err))
		return
	}
	l.f = f
}

func (l *OpLog) keepErr(err error) {
	if l.firstErr == nil {
		l.firstErr = err
	}
}

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
