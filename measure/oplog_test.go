package measure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// parseLog reads an op log strictly: every line must be whole, end in a
// newline and decode into a LogLine with no unknown fields.
func parseLog(t *testing.T, data []byte) []LogLine {
	t.Helper()
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("log ends in a partial line: %q", tail(data))
	}
	var out []LogLine
	for i, raw := range bytes.SplitAfter(data, []byte{'\n'}) {
		if len(raw) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var ll LogLine
		if err := dec.Decode(&ll); err != nil {
			t.Fatalf("line %d %q: %v", i+1, raw, err)
		}
		out = append(out, ll)
	}
	return out
}

func tail(b []byte) []byte {
	if len(b) > 80 {
		return b[len(b)-80:]
	}
	return b
}

func readLog(t *testing.T, path string) []LogLine {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseLog(t, data)
}

func TestOpLogLines(t *testing.T) {
	for _, paths := range []bool{false, true} {
		t.Run(fmt.Sprintf("paths=%v", paths), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ops.log")
			l, err := OpenOpLog(path, OpLogOptions{Mount: "/mnt/x", Paths: paths})
			if err != nil {
				t.Fatal(err)
			}
			r := NewRecorder("/mnt/x")
			r.SetOpLog(l)
			before := time.Now()

			s := r.Start(OpRead, 7)
			s.SetPath("/dir/file")
			s.SetIO(8192, 4096)
			s.AddCrypto(3 * time.Microsecond)
			s.AddLower(5 * time.Microsecond)
			s.End(0)

			s = r.Start(OpLookup, 1)
			s.SetPath("/nope")
			s.SetTwin(Part{Total: 11, Crypto: 0, Lower: 7}, syscall.ENOENT)
			s.End(syscall.ENOENT)

			s = r.Start(OpGetattr, 2) // mirror mode, twin succeeded
			// The twin runs inside the span, whose own time excludes it.
			time.Sleep(time.Millisecond)
			s.SetTwin(Part{Total: 1000, Crypto: 0, Lower: 900}, 0)
			s.End(0)

			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			after := time.Now()
			data, _ := os.ReadFile(path)
			got := parseLog(t, data)
			if len(got) != 3 || l.Lines() != 3 || l.Dropped() != 0 {
				t.Fatalf("%d lines, Lines %d, Dropped %d:\n%s", len(got), l.Lines(), l.Dropped(), data)
			}
			for _, ll := range got {
				if ll.TS.Before(before.Truncate(time.Microsecond)) || ll.TS.After(after) || ll.TS.Location() != time.UTC {
					t.Errorf("ts %v not in [%v, %v] UTC", ll.TS, before, after)
				}
				if ll.Mount != "/mnt/x" || ll.Ns <= 0 {
					t.Errorf("line %+v", ll)
				}
			}
			rd := got[0]
			wantPath := ""
			if paths {
				wantPath = "/dir/file"
			}
			if rd.Op != "read" || rd.Ino != 7 || rd.Off != 8192 || rd.Len != 4096 || rd.Path != wantPath ||
				rd.CryptoNs != 3000 || rd.LowerNs != 5000 || rd.Errno != 0 || rd.TwinNs != 0 {
				t.Errorf("read line %+v", rd)
			}
			lk := got[1]
			if lk.Op != "lookup" || lk.Errno != int(syscall.ENOENT) || lk.TwinNs != 11 || lk.TwinLowerNs != 7 ||
				lk.TwinErrno != int(syscall.ENOENT) || lk.Off != 0 || lk.Len != 0 {
				t.Errorf("lookup line %+v", lk)
			}
			lines := strings.Split(strings.TrimSpace(string(data)), "\n")
			// Twin fields appear exactly on the spans that had SetTwin,
			// even when zero; path only with Paths.
			for i, want := range []bool{false, true, true} {
				has := strings.Contains(lines[i], `"twin_ns"`) && strings.Contains(lines[i], `"twin_errno":`) &&
					strings.Contains(lines[i], `"twin_crypto_ns":0`)
				if has != want {
					t.Errorf("line %d twin fields = %v, want %v: %s", i, has, want, lines[i])
				}
				if strings.Contains(lines[i], `"path"`) != (paths && i < 2) { // the getattr has no path
					t.Errorf("line %d path field, Paths=%v: %s", i, paths, lines[i])
				}
			}
			if !strings.HasPrefix(lines[0], `{"ts":"`) {
				t.Errorf("fields out of order: %s", lines[0])
			}
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("log mode: %v %v", fi.Mode(), err)
			}
		})
	}
}

func TestOpLogSampling(t *testing.T) {
	for _, tc := range []struct{ sample, spans, want int }{
		{0, 100, 100}, {1, 100, 100}, {7, 7000, 1000}, {7, 7006, 1000}, {1000, 999, 0},
	} {
		path := filepath.Join(t.TempDir(), "ops.log")
		l, err := OpenOpLog(path, OpLogOptions{Sample: tc.sample})
		if err != nil {
			t.Fatal(err)
		}
		r := NewRecorder("m")
		r.SetOpLog(l)
		for i := 0; i < tc.spans; i++ {
			r.Start(OpWrite, uint64(i)).End(0)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		got := readLog(t, path)
		if len(got) != tc.want || l.Lines() != int64(tc.want) || l.Dropped() != 0 {
			t.Errorf("sample %d of %d spans: %d lines in file, Lines %d, Dropped %d; want %d",
				tc.sample, tc.spans, len(got), l.Lines(), l.Dropped(), tc.want)
		}
		if r.Snapshot().Ops[0].Count != int64(tc.spans) {
			t.Error("sampling must not thin the histograms")
		}
	}
}

// A writer whose disk never answers must not slow the spans down: with a
// queue of 16, End keeps returning and counts what it cannot queue.
func TestOpLogOverflowNeverBlocks(t *testing.T) {
	gate := make(chan struct{})
	stall := func(f *os.File, p []byte) (int, error) {
		<-gate
		return f.Write(p)
	}
	path := filepath.Join(t.TempDir(), "ops.log")
	l, err := openOpLog(path, OpLogOptions{Buffer: 16, FlushEvery: time.Hour}, stall)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	const spans = 100000
	finished := make(chan struct{})
	go func() {
		for i := 0; i < spans; i++ {
			s := r.Start(OpRead, uint64(i))
			s.SetIO(0, 1)
			s.End(0)
		}
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		close(gate)
		t.Fatal("End blocked behind a stalled op log writer")
	}
	// The writer holds at most one 64 KiB batch (a few hundred lines) and
	// the queue 16; it has written nothing.
	if l.Lines() != 0 || l.Dropped() < spans-2000 {
		t.Errorf("while stalled: Lines %d, Dropped %d", l.Lines(), l.Dropped())
	}
	close(gate)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got := readLog(t, path)
	if int64(len(got)) != l.Lines() || l.Lines()+l.Dropped() != spans || l.Lines() == 0 {
		t.Errorf("%d lines in file, Lines %d + Dropped %d, want sum %d", len(got), l.Lines(), l.Dropped(), spans)
	}
}

func TestOpLogRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ops.log")
	const maxBytes = 4096
	l, err := OpenOpLog(path, OpLogOptions{MaxBytes: maxBytes, Paths: true, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	const spans = 3000 // about 600 KiB: many batches, many rotations
	for i := 0; i < spans; i++ {
		s := r.Start(OpWrite, uint64(i))
		s.SetPath(strings.Repeat("p", i%50))
		s.End(0)
	}
	// One line longer than the cap is written whole into a fresh file.
	s := r.Start(OpWrite, spans)
	s.SetPath(strings.Repeat("x", 2*maxBytes))
	s.End(0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Lines() != spans+1 || l.Dropped() != 0 {
		t.Fatalf("Lines %d Dropped %d", l.Lines(), l.Dropped())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("files: %v, want ops.log and ops.log.1", entries)
	}
	old := readLog(t, path+".1")
	cur := readLog(t, path)
	if len(cur) != 1 || cur[0].Ino != spans {
		t.Errorf("current file: %d lines, want the one long line", len(cur))
	}
	if fi, _ := os.Stat(path + ".1"); fi.Size() > maxBytes || len(old) == 0 {
		t.Errorf("rotated file %d bytes (%d lines), cap %d", fi.Size(), len(old), maxBytes)
	}
	// The rotated file holds the lines just before the current one.
	for i, ll := range old {
		if want := uint64(spans - len(old) + i); ll.Ino != want {
			t.Fatalf("rotated line %d: ino %d, want %d", i, ll.Ino, want)
		}
	}
}

// Lines lost to a failing disk are counted as dropped and a short write is
// cut back, so the file still holds only whole lines.
func TestOpLogWriteError(t *testing.T) {
	errDisk := errors.New("disk on fire")
	var calls atomic.Int32
	failFromSecond := func(f *os.File, p []byte) (int, error) {
		if calls.Add(1) >= 2 {
			n, _ := f.Write(p[:len(p)/2]) // a torn write, then the error
			return n, errDisk
		}
		return f.Write(p)
	}
	path := filepath.Join(t.TempDir(), "ops.log")
	l, err := openOpLog(path, OpLogOptions{FlushEvery: time.Hour}, failFromSecond)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	const spans = 3000 // several 64 KiB batches
	for i := 0; i < spans; i++ {
		r.Start(OpRead, uint64(i)).End(0)
	}
	if err := l.Close(); !errors.Is(err, errDisk) {
		t.Errorf("Close = %v, want the write error", err)
	}
	got := readLog(t, path)
	if calls.Load() < 3 || l.Lines() == 0 || int64(len(got)) != l.Lines() || l.Lines()+l.Dropped() != spans {
		t.Errorf("%d writes, %d lines in file, Lines %d, Dropped %d", calls.Load(), len(got), l.Lines(), l.Dropped())
	}
}

// The state of the file between two writes is what a killed daemon
// leaves: it must always be whole lines.
func TestOpLogWholeLinesBetweenWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.log")
	var flushes int
	var bad atomic.Value
	check := func(f *os.File, p []byte) (int, error) {
		n, err := f.Write(p)
		flushes++
		data, rerr := os.ReadFile(path)
		if rerr != nil || len(data) == 0 || data[len(data)-1] != '\n' {
			bad.Store(fmt.Sprintf("after write %d: %v %q", flushes, rerr, tail(data)))
		}
		return n, err
	}
	l, err := openOpLog(path, OpLogOptions{FlushEvery: time.Hour}, check)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	for i := 0; i < 5000; i++ {
		s := r.Start(OpWrite, uint64(i))
		s.SetIO(int64(i), 100)
		s.End(0)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b := bad.Load(); b != nil {
		t.Error(b)
	}
	if flushes < 3 || len(readLog(t, path)) != 5000 {
		t.Errorf("%d flushes, Lines %d", flushes, l.Lines())
	}
}

const childEnv = "MEASURE_OPLOG_CHILD"

// TestOpLogHelperProcess is the daemon killed by TestOpLogSIGKILL.
func TestOpLogHelperProcess(t *testing.T) {
	path := os.Getenv(childEnv)
	if path == "" {
		t.Skip("helper for TestOpLogSIGKILL")
	}
	l, err := OpenOpLog(path, OpLogOptions{FlushEvery: time.Millisecond})
	if err != nil {
		os.Exit(2)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	// Runs until killed; stops by itself if its parent test went away.
	stop := time.Now().Add(3 * time.Minute)
	for i := uint64(0); ; i++ {
		s := r.Start(OpRead, i)
		s.SetIO(int64(i)*4096, 4096)
		s.End(0)
		if i%16 == 0 {
			time.Sleep(50 * time.Microsecond)
			if i%4096 == 0 && (time.Now().After(stop) || os.Getppid() == 1) {
				os.Exit(3)
			}
		}
	}
}

func TestOpLogSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	path := filepath.Join(t.TempDir(), "ops.log")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpLogHelperProcess$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 256<<10 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("child wrote no log")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Linux may cut a write(2) short when SIGKILL arrives while it copies
	// pages, so the very last line can be partial. Everything before it
	// was written by earlier, whole write(2)s and must parse.
	if cut := bytes.LastIndexByte(data, '\n') + 1; cut != len(data) {
		t.Logf("killed mid-write: %d trailing bytes ignored", len(data)-cut)
		data = data[:cut]
	}
	got := parseLog(t, data)
	// A loaded machine may make the child drop lines, never reorder them.
	for i, ll := range got {
		if ll.Off != int64(ll.Ino)*4096 || (i > 0 && ll.Ino <= got[i-1].Ino) {
			t.Fatalf("line %d: %+v (lines out of order or garbled)", i, ll)
		}
	}
	if len(got) < 1000 {
		t.Errorf("only %d lines", len(got))
	}
}

func TestOpLogAfterClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ops.log")
	l, err := OpenOpLog(path, OpLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	r.Start(OpOpen, 1).End(0)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	r.Start(OpRelease, 1).End(0) // dropped, not a panic
	if l.Lines() != 1 || l.Dropped() != 1 {
		t.Errorf("Lines %d Dropped %d", l.Lines(), l.Dropped())
	}
	if snap := r.Snapshot(); snap.LogLines != 1 || snap.LogDropped != 1 {
		t.Errorf("snapshot log %d/%d", snap.LogLines, snap.LogDropped)
	}
	if len(readLog(t, path)) != 1 {
		t.Error("line written after Close")
	}
}

// Another package silencing zerolog globally must not make the op log
// claim lines it did not write.
func TestOpLogZerologDisabled(t *testing.T) {
	defer zerolog.SetGlobalLevel(zerolog.GlobalLevel())
	zerolog.SetGlobalLevel(zerolog.Disabled)
	path := filepath.Join(t.TempDir(), "ops.log")
	l, err := OpenOpLog(path, OpLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder("m")
	r.SetOpLog(l)
	for i := 0; i < 10; i++ {
		r.Start(OpOpen, 1).End(0)
	}
	l.Close()
	if l.Lines()+l.Dropped() != 10 || l.Lines() != int64(len(readLog(t, path))) {
		t.Errorf("Lines %d Dropped %d", l.Lines(), l.Dropped())
	}
}

func TestOpenOpLogError(t *testing.T) {
	_, err := OpenOpLog(filepath.Join(t.TempDir(), "no", "such", "dir"), OpLogOptions{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}
