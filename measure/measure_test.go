package measure

import (
	"bytes"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestOpNames(t *testing.T) {
	seen := map[string]bool{}
	for op := Op(0); op < NumOps; op++ {
		name := op.String()
		if name == "" || name != strings.ToLower(name) || strings.HasPrefix(name, "op(") {
			t.Errorf("op %d: bad name %q", op, name)
		}
		if seen[name] {
			t.Errorf("op %d: duplicate name %q", op, name)
		}
		seen[name] = true
		back, ok := ParseOp(name)
		if !ok || back != op {
			t.Errorf("ParseOp(%q) = %v, %v; want %v", name, back, ok, op)
		}
	}
	for _, tc := range []struct {
		op   Op
		name string
	}{
		{OpLookup, "lookup"}, {OpGetattr, "getattr"}, {OpRead, "read"},
		{OpWrite, "write"}, {OpRemovexattr, "removexattr"},
		{OpFallocate, "fallocate"}, {OpLseek, "lseek"}, {OpIoctl, "ioctl"},
	} {
		if got := tc.op.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", tc.op, got, tc.name)
		}
	}
	if got := NumOps.String(); got != "op(29)" {
		t.Errorf("NumOps.String() = %q", got)
	}
	for _, s := range []string{"", "READ", "nope", "op(29)"} {
		if _, ok := ParseOp(s); ok {
			t.Errorf("ParseOp(%q) succeeded", s)
		}
	}
}

// within checks an HDR value: at least the true value (the histogram
// reports the top of a value's bucket) and at most 0.1% above it (three
// significant digits: buckets are at most 1/1024 of their value wide).
func within(t *testing.T, what string, got, want int64) {
	t.Helper()
	if got < want || got > want+want/1000 {
		t.Errorf("%s = %d, want %d (+0.1%%)", what, got, want)
	}
}

func TestPercentilesUniform(t *testing.T) {
	var st opStats
	const n = 100000
	for i := int64(1); i <= n; i++ {
		st.record(time.Duration(i)*time.Microsecond, 0, 0, 0, 0)
	}
	s, ok := st.stats(OpRead)
	if !ok {
		t.Fatal("no stats")
	}
	if s.Count != n {
		t.Errorf("count = %d", s.Count)
	}
	us := int64(time.Microsecond)
	within(t, "p50", s.P50Ns, 50000*us)
	within(t, "p90", s.P90Ns, 90000*us)
	within(t, "p99", s.P99Ns, 99000*us)
	within(t, "p99.9", s.P999Ns, 99900*us)
	within(t, "max", s.MaxNs, 100000*us)
	// The mean comes from the exact sum, not from the buckets.
	if want := float64(n+1) / 2 * float64(us); s.MeanNs != want {
		t.Errorf("mean = %v, want %v", s.MeanNs, want)
	}
}

// The twin side takes its totals from SetTwin, so a known distribution can
// go through the public API.
func TestPercentilesBimodalThroughSpans(t *testing.T) {
	r := NewRecorder("m")
	record := func(d time.Duration, count int) {
		for i := 0; i < count; i++ {
			s := r.Start(OpGetattr, 1)
			s.SetTwin(Part{Total: d, Crypto: d / 4, Lower: d / 2}, 0)
			s.End(0)
		}
	}
	record(100*time.Microsecond, 900)
	record(10*time.Millisecond, 100)
	snap := r.Snapshot()
	if len(snap.Twin) != 1 || snap.Twin[0].Op != "getattr" {
		t.Fatalf("twin = %+v", snap.Twin)
	}
	tw := snap.Twin[0]
	within(t, "p50", tw.P50Ns, int64(100*time.Microsecond))
	within(t, "p90", tw.P90Ns, int64(100*time.Microsecond))
	within(t, "p99", tw.P99Ns, int64(10*time.Millisecond))
	within(t, "p99.9", tw.P999Ns, int64(10*time.Millisecond))
	within(t, "max", tw.MaxNs, int64(10*time.Millisecond))
	wantTotal := int64(900*100*time.Microsecond + 100*10*time.Millisecond)
	if tw.TotalNs != wantTotal || tw.CryptoNs != wantTotal/4 || tw.LowerNs != wantTotal/2 {
		t.Errorf("sums = %d %d %d, want %d %d %d", tw.TotalNs, tw.CryptoNs, tw.LowerNs, wantTotal, wantTotal/4, wantTotal/2)
	}
	if tw.MeanNs != float64(wantTotal)/1000 {
		t.Errorf("mean = %v", tw.MeanNs)
	}
}

func TestRecordClampsOutOfRange(t *testing.T) {
	var st opStats
	st.record(0, 0, 0, 0, 0)
	st.record(-time.Second, 0, 0, 0, 0)
	st.record(2*time.Hour, 0, 0, 0, 0)
	s, _ := st.stats(OpRead)
	if s.Count != 3 {
		t.Errorf("count = %d", s.Count)
	}
	within(t, "max", s.MaxNs, int64(time.Hour))
	if s.P50Ns != 1 {
		t.Errorf("p50 = %d, want 1 (clamped)", s.P50Ns)
	}
}

func TestCountsErrorsBytes(t *testing.T) {
	r := NewRecorder("vol")
	for i := 0; i < 10; i++ {
		s := r.Start(OpRead, uint64(i))
		s.SetIO(int64(i)*4096, 4096)
		s.AddCrypto(3 * time.Microsecond)
		s.AddCrypto(2 * time.Microsecond)
		s.AddLower(7 * time.Microsecond)
		errno := syscall.Errno(0)
		if i%4 == 0 {
			errno = syscall.EIO
		}
		s.End(errno)
	}
	s := r.Start(OpWrite, 1)
	s.SetIO(0, 100)
	s.SetIO(100, 50) // the last call wins
	s.End(0)
	s = r.Start(OpLookup, 1)
	s.End(syscall.ENOENT)
	s = r.Start(OpFallocate, 1)
	s.SetIO(0, 1<<20) // any op that calls SetIO counts bytes
	s.End(0)

	snap := r.Snapshot()
	if snap.Mount != "vol" || snap.Elapsed <= 0 || snap.Since.IsZero() {
		t.Errorf("header = %q %v %v", snap.Mount, snap.Elapsed, snap.Since)
	}
	if len(snap.Twin) != 0 {
		t.Errorf("twin without SetTwin: %+v", snap.Twin)
	}
	var names []string
	for _, o := range snap.Ops {
		names = append(names, o.Op)
	}
	if got := strings.Join(names, ","); got != "lookup,read,write,fallocate" {
		t.Fatalf("ops = %s, want Op order and only ops with spans", got)
	}
	rd := snap.Ops[1]
	if rd.Count != 10 || rd.Errors != 3 || rd.Bytes != 40960 {
		t.Errorf("read count/errors/bytes = %d/%d/%d", rd.Count, rd.Errors, rd.Bytes)
	}
	if rd.CryptoNs != int64(50*time.Microsecond) || rd.LowerNs != int64(70*time.Microsecond) {
		t.Errorf("read crypto/lower = %d/%d", rd.CryptoNs, rd.LowerNs)
	}
	if rd.TotalNs <= 0 || rd.MaxNs <= 0 || rd.P50Ns <= 0 || rd.P50Ns > rd.P99Ns || rd.P99Ns > rd.MaxNs {
		t.Errorf("read latency = %+v", rd)
	}
	if w := snap.Ops[2]; w.Bytes != 50 || w.Errors != 0 {
		t.Errorf("write = %+v", w)
	}
	if l := snap.Ops[0]; l.Errors != 1 || l.Bytes != 0 {
		t.Errorf("lookup = %+v", l)
	}
	if f := snap.Ops[3]; f.Bytes != 1<<20 {
		t.Errorf("fallocate bytes = %d", f.Bytes)
	}
}

func TestTwinErrorsAndBytes(t *testing.T) {
	r := NewRecorder("m")
	s := r.Start(OpWrite, 1)
	s.SetIO(0, 4096)
	s.SetTwin(Part{Total: time.Millisecond}, syscall.ENOSPC)
	s.End(0)
	snap := r.Snapshot()
	if len(snap.Ops) != 1 || snap.Ops[0].Errors != 0 {
		t.Errorf("ops = %+v", snap.Ops)
	}
	if len(snap.Twin) != 1 || snap.Twin[0].Errors != 1 || snap.Twin[0].Bytes != 4096 || snap.Twin[0].Count != 1 {
		t.Errorf("twin = %+v", snap.Twin)
	}
}

func TestNilRecorderAndSpan(t *testing.T) {
	var r *Recorder
	r.SetOpLog(nil)
	s := r.Start(OpRead, 1)
	if s != nil {
		t.Fatal("nil recorder gave a span")
	}
	s.AddCrypto(time.Second)
	s.AddLower(time.Second)
	s.SetIO(0, 1)
	s.SetPath("/a")
	s.SetTwin(Part{Total: 1}, syscall.EIO)
	s.End(syscall.EIO)
	if snap := r.Snapshot(); len(snap.Ops) != 0 || snap.Mount != "" {
		t.Errorf("nil snapshot = %+v", snap)
	}
	var l *OpLog
	if l.Lines() != 0 || l.Dropped() != 0 || l.Close() != nil {
		t.Error("nil op log not a no-op")
	}
	if sp := NewRecorder("m").Start(NumOps, 1); sp != nil {
		t.Error("unknown op gave a span")
	}
}

func TestSpansAreRecycled(t *testing.T) {
	r := NewRecorder("m")
	s := r.Start(OpRead, 1)
	s.SetIO(5, 6)
	s.SetPath("/secret")
	s.SetTwin(Part{Total: 1}, syscall.EIO)
	s.AddCrypto(1)
	s.End(0)
	// Whatever span the pool hands out next must start clean.
	s = r.Start(OpWrite, 2)
	if s.hasIO || s.hasTwin || s.path != "" || s.crypto != 0 || s.n != 0 {
		t.Errorf("reused span not reset: %+v", *s)
	}
	s.End(0)
}

func TestConcurrentSpans(t *testing.T) {
	r := NewRecorder("m")
	l, err := OpenOpLog(t.TempDir()+"/log", OpLogOptions{Mount: "m"})
	if err != nil {
		t.Fatal(err)
	}
	r.SetOpLog(l)
	const goroutines, perG = 8, 5000
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				op := []Op{OpRead, OpWrite, OpGetattr}[i%3]
				s := r.Start(op, uint64(g))
				s.SetIO(int64(i), 10)
				s.AddCrypto(time.Nanosecond)
				s.AddLower(2 * time.Nanosecond)
				if i%2 == 0 {
					s.SetTwin(Part{Total: time.Microsecond}, 0)
				}
				var errno syscall.Errno
				if i%5 == 0 {
					errno = syscall.EIO
				}
				s.End(errno)
			}
			_ = r.Snapshot() // snapshots race with spans in a live mount
		}(g)
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	snap := r.Snapshot()
	var count, errs, bytes, crypto, lower, twin int64
	for _, o := range snap.Ops {
		count += o.Count
		errs += o.Errors
		bytes += o.Bytes
		crypto += o.CryptoNs
		lower += o.LowerNs
	}
	for _, o := range snap.Twin {
		twin += o.Count
	}
	const total = goroutines * perG
	if count != total || errs != total/5 || bytes != 10*total || crypto != total || lower != 2*total || twin != total/2 {
		t.Errorf("count %d errors %d bytes %d crypto %d lower %d twin %d", count, errs, bytes, crypto, lower, twin)
	}
	if snap.LogLines+snap.LogDropped != total {
		t.Errorf("log lines %d + dropped %d != %d", snap.LogLines, snap.LogDropped, total)
	}
}

func TestSpanDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	r := NewRecorder("m")
	span := func() {
		s := r.Start(OpRead, 42)
		s.AddLower(time.Microsecond)
		s.AddCrypto(time.Microsecond)
		s.SetIO(4096, 4096)
		s.SetTwin(Part{Total: time.Microsecond}, 0)
		s.End(0)
	}
	span() // the first span of an op allocates its histograms
	if n := testing.AllocsPerRun(1000, span); n != 0 {
		t.Errorf("span without op log: %v allocs, want 0", n)
	}

	l, err := OpenOpLog(t.TempDir()+"/log", OpLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r.SetOpLog(l)
	if n := testing.AllocsPerRun(1000, span); n != 0 {
		t.Errorf("span with op log: %v allocs, want 0", n)
	}
}

func TestHumanNs(t *testing.T) {
	for _, tc := range []struct {
		ns   int64
		want string
	}{
		{0, "0ns"}, {999, "999ns"}, {1000, "1.00µs"}, {9_994, "9.99µs"}, {9_996, "10.0µs"},
		{99_949, "99.9µs"}, {99_960, "100µs"}, {999_499, "999µs"}, {999_700, "1.00ms"},
		{12_345_678, "12.3ms"}, {999_600_000, "1.00s"}, {3_600_000_000_000, "3600s"},
	} {
		if got := humanNs(tc.ns); got != tc.want {
			t.Errorf("humanNs(%d) = %q, want %q", tc.ns, got, tc.want)
		}
	}
}

func TestTable(t *testing.T) {
	snap := Snapshot{
		Mount:   "/mnt/c",
		Elapsed: 2,
		Ops: []Stats{
			{Op: "getattr", Count: 1000, Errors: 3, P50Ns: 850, P99Ns: 12_340, MaxNs: 4_560_000,
				MeanNs: 1000, TotalNs: 1_000_000, CryptoNs: 0, LowerNs: 500_000},
			{Op: "read", Count: 256, Bytes: 1 << 30, P50Ns: 100_000, P99Ns: 2_000_000, MaxNs: 1_200_000_000,
				MeanNs: 200_000, TotalNs: 51_200_000, CryptoNs: 25_600_000, LowerNs: 12_800_000},
		},
		Twin: []Stats{
			{Op: "read", Count: 256, P50Ns: 50_000, P99Ns: 1_000_000, MeanNs: 80_000},
		},
		LogLines:   1200,
		LogDropped: 56,
		CPUUserS:   1,
		CPUSysS:    0.5,
	}
	var b bytes.Buffer
	snap.Table(&b)
	out := b.String()
	t.Log("\n" + out)
	lines := strings.Split(out, "\n")
	find := func(prefix string) []string {
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == prefix {
				return f
			}
		}
		t.Fatalf("no row %q in\n%s", prefix, out)
		return nil
	}
	if got := strings.Join(find("getattr"), " "); got != "getattr 1000 3 850ns 12.3µs 4.56ms - 0.0 50.0 - - - -" {
		t.Errorf("getattr row = %q", got)
	}
	if got := strings.Join(find("read"), " "); got != "read 256 0 100µs 2.00ms 1.20s 512.0 50.0 25.0 50.0µs 1.00ms 2.00x 2.50x" {
		t.Errorf("read row = %q", got)
	}
	for _, want := range []string{
		"twin p50", "mean crypt/twin",
		"op log: 1200 lines written, 56 dropped",
		"CPU: user 1.00 s, sys 0.50 s; 1.50 CPU-s per GiB moved",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}

	// Outside mirror mode there are no twin columns, and no CPU line
	// until the daemon fills the CPU fields in.
	snap.Twin, snap.CPUUserS, snap.CPUSysS = nil, 0, 0
	b.Reset()
	snap.Table(&b)
	if out := b.String(); strings.Contains(out, "twin") || strings.Contains(out, "CPU") {
		t.Errorf("plain table has twin or CPU:\n%s", out)
	}
}

func TestOpStatsPadding(t *testing.T) {
	if size := unsafe.Sizeof(opStats{}); size != 128 {
		t.Errorf("opStats is %d bytes; fix its padding to 128", size)
	}
}

// TestMirrorTotalExcludesTwin: in mirror mode the twin's run happens inside
// the span; the mount's own latency must not include it.
func TestMirrorTotalExcludesTwin(t *testing.T) {
	r := NewRecorder("m")
	t0 := time.Now()
	s := r.Start(OpWrite, 1)
	time.Sleep(20 * time.Millisecond) // stands for the twin's run
	s.SetTwin(Part{Total: 20 * time.Millisecond}, 0)
	s.End(0)
	outside := time.Since(t0)
	snap := r.Snapshot()
	// HDR keeps 3 significant digits: allow 0.1 %.
	if got, limit := snap.Ops[0].MaxNs, int64(outside-20*time.Millisecond)*1001/1000; got > limit {
		t.Errorf("mount latency %d ns > %d ns: it includes the twin's 20 ms", got, limit)
	}
	if got := snap.Twin[0].MaxNs; got < int64(19*time.Millisecond) {
		t.Errorf("twin latency %d ns", got)
	}
}
