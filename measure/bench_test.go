package measure

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// span is what the fs layer does for one read.
func span(r *Recorder, op Op) {
	s := r.Start(op, 42)
	s.AddLower(3 * time.Microsecond)
	s.AddCrypto(2 * time.Microsecond)
	s.SetIO(4096, 4096)
	s.End(0)
}

func benchLog(b *testing.B, r *Recorder) *OpLog {
	l, err := OpenOpLog(filepath.Join(b.TempDir(), "ops.log"), OpLogOptions{Mount: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	r.SetOpLog(l)
	return l
}

// reportLog closes the log and reports the share of spans it could not
// keep up with: the writer formats ~1 µs a line, far slower than End.
func reportLog(b *testing.B, l *OpLog) {
	b.StopTimer()
	l.Close()
	if total := l.Lines() + l.Dropped(); total > 0 {
		b.ReportMetric(float64(l.Dropped())/float64(total), "dropped/span")
	}
}

func BenchmarkSpan(b *testing.B) {
	b.Run("nil", func(b *testing.B) {
		b.ReportAllocs()
		var r *Recorder
		for b.Loop() {
			span(r, OpRead)
		}
	})
	b.Run("histograms", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		for b.Loop() {
			span(r, OpRead)
		}
	})
	b.Run("failed", func(b *testing.B) {
		// A failure is also counted by errno (a map increment).
		b.ReportAllocs()
		r := NewRecorder("bench")
		for b.Loop() {
			r.Start(OpLookup, 42).End(syscall.ENOENT)
		}
	})
	b.Run("mirror", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		for b.Loop() {
			s := r.Start(OpRead, 42)
			s.AddLower(3 * time.Microsecond)
			s.SetIO(4096, 4096)
			s.SetTwin(Part{Total: 5 * time.Microsecond}, 0)
			s.End(0)
		}
	})
	b.Run("oplog", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		l := benchLog(b, r)
		for b.Loop() {
			span(r, OpRead)
		}
		reportLog(b, l)
	})
}

func BenchmarkSpanParallel(b *testing.B) {
	b.Run("histograms/same-op", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				span(r, OpRead)
			}
		})
	})
	b.Run("histograms/spread-ops", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		var g atomic.Uint32
		b.RunParallel(func(pb *testing.PB) {
			op := Op(g.Add(1) % uint32(NumOps))
			for pb.Next() {
				span(r, op)
			}
		})
	})
	b.Run("oplog/same-op", func(b *testing.B) {
		b.ReportAllocs()
		r := NewRecorder("bench")
		l := benchLog(b, r)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				span(r, OpRead)
			}
		})
		reportLog(b, l)
	})
}

// The writer's cost per line, without the ops: how many lines per second
// the log can take before it drops.
func BenchmarkOpLogFormat(b *testing.B) {
	path := filepath.Join(b.TempDir(), "ops.log")
	l, err := OpenOpLog(path, OpLogOptions{Mount: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	l.Close() // stop the writer goroutine and drive its methods by hand
	if l.f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
		b.Fatal(err)
	}
	defer l.f.Close()
	rec := record{tsNs: time.Now().UnixNano(), ino: 42, off: 4096, len: 4096, ns: 12345, cryptoNs: 2000, lowerNs: 3000, op: OpRead}
	b.ReportAllocs()
	for b.Loop() {
		l.format(&rec)
		if len(l.sink.buf) >= batchBytes {
			l.flush()
		}
	}
}

func BenchmarkSnapshot(b *testing.B) {
	r := NewRecorder("bench")
	for op := Op(0); op < 10; op++ {
		span(r, op)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Snapshot()
	}
}
