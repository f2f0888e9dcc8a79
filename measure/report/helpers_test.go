package report

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// t0 is when the synthetic logs start.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

const us = int64(time.Microsecond)

// encodeLog renders lines as an op log, one JSON document a line, the way
// measure.OpLog writes them.
func encodeLog(t testing.TB, lines []measure.LogLine) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range lines {
		if err := enc.Encode(&lines[i]); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func writeLog(t testing.TB, path string, lines []measure.LogLine) {
	t.Helper()
	if err := os.WriteFile(path, encodeLog(t, lines), 0o600); err != nil {
		t.Fatal(err)
	}
}

// aggregate reads data as one log and returns its report.
func aggregate(t testing.TB, o Options, data []byte) *Report {
	t.Helper()
	a := NewAggregator(o)
	if err := a.Read(bytes.NewReader(data), "test.log"); err != nil {
		t.Fatal(err)
	}
	return a.Report()
}

// mirrorLog is the reference log: on mount "m", 1000 reads of 100 µs on
// the encrypted side and 50 µs on the twin (30 µs crypto, 40 µs lower, 4
// KiB each, 10 of them failing with EIO on both sides), 500 lookups of
// 20 µs vs 16 µs, and 100 creates of 1 ms vs 250 µs; one op every ms, so
// the log spans 1.599 s.
func mirrorLog() []measure.LogLine {
	var lines []measure.LogLine
	ts := t0
	add := func(op string, n int, ns, twinNs, cryptoNs, lowerNs, length int64, failEvery int) {
		for i := range n {
			l := measure.LogLine{
				TS: ts, Mount: "m", Op: op, Ino: uint64(2 + i%7), Off: int64(i) * length, Len: length,
				Ns: ns, CryptoNs: cryptoNs, LowerNs: lowerNs,
				TwinNs: twinNs, TwinLowerNs: lowerNs,
			}
			if failEvery > 0 && i%failEvery == 0 {
				l.Errno, l.TwinErrno = 5, 5
			}
			lines = append(lines, l)
			ts = ts.Add(time.Millisecond)
		}
	}
	add("read", 1000, 100*us, 50*us, 30*us, 40*us, 4096, 100)
	add("lookup", 500, 20*us, 16*us, 2*us, 10*us, 0, 0)
	add("create", 100, 1000*us, 250*us, 0, 200*us, 0, 0)
	return lines
}

// opOf returns the report of op on mount m.
func opOf(t testing.TB, r *Report, mount, op string) OpReport {
	t.Helper()
	for _, o := range r.Ops {
		if o.Mount == mount && o.Op == op {
			return o
		}
	}
	t.Fatalf("no %s on mount %q in report", op, mount)
	return OpReport{}
}

// near reports whether got is within rel (relative) of want.
func near(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Abs(want)
}

func tempPath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(t.TempDir(), name)
}
