package main

// Faults that need the daemon in its own process (issue 6, item 4; the
// others are in fs/faults_test.go): the daemon out of file descriptors,
// and a client killed in the middle of its writes. Both run on the xts,
// cbc and twin mounts of `twincrypt mount --background`, so that the test
// may start writer processes on the mount.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
)

// The test binary doubles as the writer process of
// TestFaultClientKilledMidWrite: started with faultHelperEnv set, it writes
// and never returns to the tests (nor to TestMain's build).
const faultHelperEnv = "TWINCRYPT_FAULT_HELPER"

func init() {
	if mode := os.Getenv(faultHelperEnv); mode != "" {
		os.Exit(faultHelper(mode, os.Getenv(faultHelperEnv+"_PATH")))
	}
}

// faultPattern is the big writer's content: every 8-byte word holds its
// own offset, mixed, so that any misplaced or garbled extent shows.
func faultPattern(n int) []byte {
	b := make([]byte, (n+7)/8*8)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(i)*0x9E3779B97F4A7C15^0x5DEECE66D)
	}
	return b[:n]
}

// faultRecord is record i of the appender: variable length, so that
// appends land at every offset within an extent.
func faultRecord(i int) []byte {
	return []byte(fmt.Sprintf("%08d:%s\n", i, strings.Repeat(string(rune('a'+i%26)), i*37%301)))
}

const faultBigSize = 48 << 20

// faultHelper runs a writer until it is killed, printing its progress
// (bytes or records done) after each write.
func faultHelper(mode, path string) int {
	out := bufio.NewWriter(os.Stdout)
	switch mode {
	case "big":
		// Sequential writes of assorted sizes, from 64 KiB + 1 to 3 MiB
		// (the kernel splits those into 1 MiB requests).
		data := faultPattern(faultBigSize)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		sizes := []int{1<<20 + 12345, 3<<20 + 77, 65537, 5 * 4096, 300001}
		for off, i := 0, 0; off < len(data); i++ {
			n, err := f.Write(data[off:min(off+sizes[i%len(sizes)], len(data))])
			off += n
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(out, off)
			out.Flush()
		}
	case "append":
		// One open, append, close per record, as a logger does.
		for i := 0; ; i++ {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err == nil {
				_, err = f.Write(faultRecord(i))
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			fmt.Fprintln(out, i+1)
			out.Flush()
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
		return 2
	}
	// Done before the kill: wait for it.
	select {}
}

// faultMount is one volume mounted by a background daemon.
type faultMount struct {
	name, pf, lower, mnt, log string
	args                      []string
	pid                       int
	conf                      []byte
}

// mountFaultVariant makes a volume of the named kind (xts, cbc, twin) and
// mounts it in the background; it is unmounted at cleanup.
func mountFaultVariant(t *testing.T, name string) *faultMount {
	t.Helper()
	requireFUSE(t)
	m := &faultMount{name: name, mnt: newMountpoint(t)}
	m.log = filepath.Join(tempDir(t), "daemon.log")
	args := []string{"mount", "--background", "--quiet", "--log", m.log}
	switch name {
	case "twin":
		m.lower = filepath.Join(tempDir(t), "lower")
		if err := os.Mkdir(m.lower, 0o700); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--passthrough")
	case "xts", "cbc":
		m.pf = writePassfile(t, "fault pass")
		var extra []string
		if name == "cbc" {
			extra = []string{"--cipher", "aes-cbc"}
		}
		m.lower = initVolume(t, m.pf, extra...)
		b, err := os.ReadFile(filepath.Join(m.lower, config.FileName))
		if err != nil {
			t.Fatal(err)
		}
		m.conf = b
		args = append(args, "--passfile", m.pf)
	}
	m.args = append(args, m.lower, m.mnt)
	unmountOnCleanup(t, m.mnt)
	m.mount(t)
	return m
}

func (m *faultMount) mount(t *testing.T) {
	t.Helper()
	twincrypt(t, "", m.args...).expectExit(t, 0, "mount "+m.name)
	pids := daemonPIDs(t, m.mnt)
	if len(pids) != 1 {
		t.Fatalf("%s: daemon processes %v, want one", m.name, pids)
	}
	m.pid = pids[0]
}

// remount starts a new daemon, which has nothing cached (no directory IV).
func (m *faultMount) remount(t *testing.T) {
	t.Helper()
	twincrypt(t, "", "umount", m.mnt).expectExit(t, 0, m.name+": umount")
	waitDaemonGone(t, m.mnt)
	m.mount(t)
}

// alive reports whether the daemon still runs (and is not a zombie).
func (m *faultMount) alive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", m.pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

// finish checks that the daemon did not crash, unmounts without --lazy
// (nothing may hold the mount), and checks the config and, for encrypted
// volumes, runs fsck.
func (m *faultMount) finish(t *testing.T) {
	t.Helper()
	if !m.alive() {
		t.Errorf("%s: daemon %d is gone", m.name, m.pid)
	}
	if log, _ := os.ReadFile(m.log); bytes.Contains(log, []byte("panic")) || bytes.Contains(log, []byte("goroutine ")) {
		t.Errorf("%s: daemon log shows a panic:\n%s", m.name, log)
	}
	twincrypt(t, "", "umount", m.mnt).expectExit(t, 0, m.name+": umount (no --lazy)")
	waitDaemonGone(t, m.mnt)
	if m.pf == "" {
		return
	}
	if b, err := os.ReadFile(filepath.Join(m.lower, config.FileName)); err != nil || !bytes.Equal(b, m.conf) {
		t.Errorf("%s: config changed or unreadable: %v", m.name, err)
	}
	r := twincrypt(t, "", "fsck", "--passfile", m.pf, m.lower)
	if r.code != 0 {
		t.Errorf("%s: fsck after the fault: exit %d\n%s%s", m.name, r.code, r.stdout, r.stderr)
	}
}

// faultTreeSums hashes every entry below dir (skipping skip).
func faultTreeSums(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil {
			sums[rel] = "error " + err.Error()
			return nil
		}
		for _, s := range skip {
			if rel == s {
				return nil
			}
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			sums[rel] = fmt.Sprintf("%x %v", sha256.Sum256(b), err)
		} else {
			sums[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func faultCompareSums(t *testing.T, what string, a, b map[string]string) {
	t.Helper()
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if a[k] != b[k] {
			t.Errorf("%s: %s was %q, is %q", what, k, a[k], b[k])
		}
	}
}

// faultNeighbours puts a few files and a directory next to the victims.
func faultNeighbours(t *testing.T, mnt string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{0, 1, 4095, 4096, 4097, 100000} {
		p := filepath.Join(mnt, "dir", fmt.Sprintf("n%d", i))
		if i%2 == 0 {
			p = filepath.Join(mnt, fmt.Sprintf("n%d", i))
		}
		if err := os.WriteFile(p, faultPattern(size + i)[i:], 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func faultErrnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if err == nil || !errors.As(err, &e) {
		return 0
	}
	return e
}

func faultErrnoString(err error) string {
	if err == nil {
		return "ok"
	}
	if e := faultErrnoOf(err); e != 0 {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// exhaustDaemonFDs lowers the daemon's RLIMIT_NOFILE (soft and hard, with
// prlimit(2) on the running process) to a few descriptors above what it
// uses, then opens n4 on the mount until the daemon has none left. It
// returns the open files (closed at cleanup), restore, which gives the
// daemon its few descriptors back (call it once the files are closed), and
// the error of the open that failed.
func exhaustDaemonFDs(t *testing.T, m *faultMount) (open []*os.File, restore func(), openErr error) {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m.pid))
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(len(fds) + 12)
	if err := unix.Prlimit(m.pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("cannot lower the daemon's descriptor limit: %v", err)
	}
	t.Cleanup(func() {
		for _, f := range open {
			f.Close()
		}
	})
	for i := 0; i < 200; i++ {
		f, err := os.OpenFile(filepath.Join(m.mnt, "n4"), os.O_RDWR, 0)
		if err != nil {
			t.Logf("%s: the daemon (limit %d, %d in use before) served %d opens", m.name, limit, len(fds), len(open))
			// An OPEN needs two descriptors for a moment (the checked
			// O_PATH one and the reopen), so the daemon may have one
			// left. The kernel gives out the lowest free number and
			// refuses one at or above the limit: a limit at the lowest
			// free number leaves none.
			now, rerr := os.ReadDir(fmt.Sprintf("/proc/%d/fd", m.pid))
			if rerr != nil {
				t.Fatal(rerr)
			}
			inUse := map[string]bool{}
			for _, e := range now {
				inUse[e.Name()] = true
			}
			free := uint64(0)
			for inUse[strconv.FormatUint(free, 10)] {
				free++
			}
			if err := unix.Prlimit(m.pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: free, Max: limit}, nil); err != nil {
				t.Fatalf("lower the daemon's limit to its lowest free descriptor %d: %v", free, err)
			}
			return open, func() {
				if err := unix.Prlimit(m.pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
					t.Errorf("give the daemon its limit of %d back: %v", limit, err)
				}
			}, err
		}
		open = append(open, f)
	}
	t.Fatalf("%s: 200 opens with a daemon limit of %d descriptors all worked", m.name, limit)
	return nil, nil, nil
}

// faultN4 is the neighbour file the descriptor tests open: 4097 bytes.
var faultN4 = faultPattern(4097 + 4)[4:]

// TestFaultDaemonOutOfFDs runs the daemon out of descriptors. The
// application gets EMFILE (the daemon's errno, passed through) for what
// needs a new daemon descriptor, the daemon survives, descriptors already
// open keep working, and once they are closed everything works and nothing
// is damaged.
func TestFaultDaemonOutOfFDs(t *testing.T) {
	requireFUSE(t)
	table := map[string]map[string]string{}
	var cases []string
	record := func(c, v string, err error) {
		if table[c] == nil {
			table[c] = map[string]string{}
			cases = append(cases, c)
		}
		table[c][v] = faultErrnoString(err)
	}
	names := []string{"xts", "cbc", "twin"}
	for _, name := range names {
		m := mountFaultVariant(t, name)
		faultNeighbours(t, m.mnt)
		before := faultTreeSums(t, m.mnt)
		m.remount(t)
		open, restore, openErr := exhaustDaemonFDs(t, m)
		record("open", name, openErr)
		// At the limit: what needs a new daemon descriptor fails, what
		// does not works.
		nf, err := os.Create(filepath.Join(m.mnt, "new"))
		record("create", name, err)
		if err == nil {
			nf.Close()
		} else {
			if _, serr := os.Lstat(filepath.Join(m.mnt, "new")); serr == nil {
				t.Errorf("%s: failed create left the file", name)
			}
		}
		err = os.Mkdir(filepath.Join(m.mnt, "newdir"), 0o755)
		record("mkdir", name, err)
		if err != nil {
			if _, serr := os.Lstat(filepath.Join(m.mnt, "newdir")); serr == nil {
				t.Errorf("%s: failed mkdir left the directory", name)
			}
		}
		_, err = os.ReadDir(m.mnt)
		record("readdir", name, err)
		_, err = os.Stat(filepath.Join(m.mnt, "n2"))
		record("stat", name, err)
		// A directory the new daemon has not visited: the crypt mounts
		// must read its IV to look a name up in it.
		_, err = os.Stat(filepath.Join(m.mnt, "dir", "n1"))
		record("stat-unvisited-dir", name, err)
		b := make([]byte, 2000)
		_, err = open[0].ReadAt(b, 1000)
		record("read-open-fd", name, err)
		if err == nil && !bytes.Equal(b, faultN4[1000:3000]) {
			t.Errorf("%s: read through an open descriptor at the limit differs", name)
		}
		_, err = open[1].WriteAt([]byte("at the limit"), 3000)
		record("write-open-fd", name, err)
		record("fsync-open-fd", name, open[1].Sync())
		if !m.alive() {
			t.Fatalf("%s: the daemon died at its descriptor limit", name)
		}
		for _, f := range open {
			f.Close()
		}
		restore()

		// Everything works again; only the write above changed anything.
		want := append([]byte{}, faultN4...)
		copy(want[3000:], "at the limit")
		if got, err := os.ReadFile(filepath.Join(m.mnt, "n4")); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: n4 after the limit: %v (equal %v)", name, err, bytes.Equal(got, want))
		}
		after := faultTreeSums(t, m.mnt, "n4", "new", "newdir")
		delete(before, "n4")
		faultCompareSums(t, name+" after running out of descriptors", before, after)
		for _, p := range []string{"new", "newdir"} {
			os.Remove(filepath.Join(m.mnt, p))
		}
		if err := os.WriteFile(filepath.Join(m.mnt, "later"), []byte("works"), 0o644); err != nil {
			t.Errorf("%s: create after the limit: %v", name, err)
		}
		if err := os.Mkdir(filepath.Join(m.mnt, "laterdir"), 0o755); err != nil {
			t.Errorf("%s: mkdir after the limit: %v", name, err)
		}
		m.finish(t)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-20s %-8s %-8s %-8s", "case", names[0], names[1], names[2])
	for _, c := range cases {
		fmt.Fprintf(&b, "\n%-20s %-8s %-8s %-8s", c, table[c]["xts"], table[c]["cbc"], table[c]["twin"])
	}
	t.Logf("errnos seen by the application with the daemon out of descriptors:\n%s", b.String())
	for _, c := range cases {
		if c == "mkdir" || c == "stat-unvisited-dir" {
			// The crypt mounts need a descriptor for the directory IV
			// (the second: TestFaultBugAtFDLimit).
			continue
		}
		for _, n := range names[:2] {
			if table[c][n] != table[c]["twin"] {
				t.Errorf("%s: %s gives %s, twin gives %s", c, n, table[c][n], table[c]["twin"])
			}
		}
	}
	for _, c := range []string{"open", "create", "readdir"} {
		if got := table[c]["twin"]; got != "EMFILE" {
			t.Errorf("%s at the daemon's limit gives %s on the twin, want EMFILE", c, got)
		}
	}
	for _, n := range names[:2] {
		if got := table["mkdir"][n]; got != "EMFILE" {
			t.Errorf("mkdir at the daemon's limit gives %s on %s, want EMFILE", got, n)
		}
	}
	for _, c := range []string{"stat", "read-open-fd", "write-open-fd", "fsync-open-fd"} {
		if got := table[c]["twin"]; got != "ok" {
			t.Errorf("%s at the daemon's limit gives %s on the twin, want ok", c, got)
		}
	}
}

// TestFaultAtFDLimit: with the daemon at its descriptor limit, a lookup
// gives the application EMFILE (every lower access below the root needs a
// descriptor of its parent directory: see openBeneath), never EIO and
// never a log line claiming damage, and close(2) succeeds.
//
// Found by this file: close(2) used to fail with EMFILE (file.Flush dup(2)s
// the lower descriptor, and the dup itself failed), and on an encrypted
// mount a lookup in a directory whose IV was not cached gave EIO and
// logged "directory IV missing or damaged" (readDirIV turned every error
// into EIO).
func TestFaultAtFDLimit(t *testing.T) {
	requireFUSE(t)
	for _, name := range []string{"xts", "twin"} {
		m := mountFaultVariant(t, name)
		faultNeighbours(t, m.mnt)
		m.remount(t)
		open, restore, _ := exhaustDaemonFDs(t, m)
		_, err := os.Stat(filepath.Join(m.mnt, "dir", "n1"))
		if err != nil && faultErrnoOf(err) != syscall.EMFILE {
			log, _ := os.ReadFile(m.log)
			t.Errorf("%s: a lookup with the daemon at its descriptor limit: %v, want success or EMFILE; daemon log:\n%s", name, err, log)
		}
		if log, _ := os.ReadFile(m.log); bytes.Contains(log, []byte("damaged")) {
			t.Errorf("%s: the daemon reports damage that is not there:\n%s", name, log)
		}
		if err := open[0].Close(); err != nil {
			t.Errorf("%s: close(2) with the daemon at its descriptor limit: %v, want success", name, err)
		}
		for _, f := range open[1:] {
			f.Close()
		}
		restore()
		m.finish(t)
	}
}

// startFaultHelper starts the test binary as a writer on path (on a mount
// served by a background daemon, so the fork is safe) and returns a channel
// of its progress lines.
func startFaultHelper(t *testing.T, mode, path string) (*exec.Cmd, <-chan int, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), faultHelperEnv+"="+mode, faultHelperEnv+"_PATH="+path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	progress := make(chan int, 1024)
	go func() {
		defer close(progress)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if n, err := strconv.Atoi(sc.Text()); err == nil {
				progress <- n
			}
		}
	}()
	return cmd, progress, &stderr
}

// faultKillAt waits until the helper reports progress of at least target, lets
// it run on for a random few hundred microseconds and kills it. It returns
// the last progress seen.
func faultKillAt(t *testing.T, cmd *exec.Cmd, progress <-chan int, stderr *bytes.Buffer, target int, rng *rand.Rand) int {
	t.Helper()
	last := 0
	timeout := time.After(60 * time.Second)
	for last < target {
		select {
		case n, ok := <-progress:
			if !ok {
				cmd.Wait()
				t.Fatalf("writer exited before the kill (progress %d): %s", last, stderr.String())
			}
			last = n
		case <-timeout:
			t.Fatalf("writer made no progress to %d in 60 s (at %d)", target, last)
		}
	}
	time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Read every progress line before Wait: Wait closes the pipe, and
	// lines still in it would be lost, so that the writer would seem to
	// have done less than it had.
	for n := range progress {
		last = n
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("writer did not die of SIGKILL: %v (%s)", err, stderr.String())
	}
	return last
}

// TestFaultClientKilledMidWrite kills writer processes with SIGKILL at a
// random moment: one writing a big file in large sequential writes, one
// appending records (open, write, close each). Afterwards the file reads
// end to end and is exactly a prefix of what the writer was writing (at
// least everything it saw acknowledged), the neighbours are unchanged, and
// the mount unmounts without --lazy (no handle left behind).
//
// What Linux promises for the record being written at the kill is less
// than "whole records only": a write(2) that a fatal signal interrupts may
// be cut short at a page boundary (generic_perform_write on a native
// filesystem checks for one between pages, and FUSE sends a write that
// starts in a partial, not up-to-date page as two requests split at the
// page boundary, so that a kill between them leaves the first). So the
// file may end inside the record being written, but only at a page
// boundary, and that record may only be the one after the last
// acknowledged. A native directory runs the same writers as the oracle.
func TestFaultClientKilledMidWrite(t *testing.T) {
	requireFUSE(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TWINCRYPT_FAULT_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (TWINCRYPT_FAULT_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	big := faultPattern(faultBigSize)
	var stream []byte
	var bounds []int // record i ends at bounds[i]
	for i := 0; len(stream) < 4<<20; i++ {
		stream = append(stream, faultRecord(i)...)
		bounds = append(bounds, len(stream))
	}
	pageSize := os.Getpagesize()
	for _, name := range []string{"native", "xts", "cbc", "twin"} {
		var m *faultMount
		mnt := filepath.Join(tempDir(t), "native")
		if name == "native" {
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
		} else {
			m = mountFaultVariant(t, name)
			mnt = m.mnt
		}
		faultNeighbours(t, mnt)
		before := faultTreeSums(t, mnt)
		for round := 0; round < 2; round++ {
			// The big file.
			p := filepath.Join(mnt, "big")
			cmd, progress, stderr := startFaultHelper(t, "big", p)
			acked := faultKillAt(t, cmd, progress, stderr, 1<<20+rng.IntN(16<<20), rng)
			got, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("%s: read of the killed writer's file: %v", name, err)
			} else if len(got) < acked || !bytes.Equal(got, big[:len(got)]) {
				same := 0
				for same < len(got) && got[same] == big[same] {
					same++
				}
				t.Errorf("%s: big file of %d bytes (%d acknowledged) is not a prefix of the data: differs from byte %d", name, len(got), acked, same)
			} else {
				t.Logf("%s round %d: big writer killed with %d bytes acknowledged, file has %d", name, round, acked, len(got))
			}
			// The appender.
			p = filepath.Join(mnt, "dir", "log")
			cmd, progress, stderr = startFaultHelper(t, "append", p)
			records := faultKillAt(t, cmd, progress, stderr, 20+rng.IntN(300), rng)
			got, err = os.ReadFile(p)
			n := sort.SearchInts(bounds, len(got)+1) // whole records in the file
			whole := 0                               // their bytes
			if n > 0 {
				whole = bounds[n-1]
			}
			torn := len(got) != whole
			switch {
			case err != nil:
				t.Errorf("%s: read of the killed appender's file: %v", name, err)
			case len(got) > len(stream) || !bytes.Equal(got, stream[:len(got)]):
				t.Errorf("%s: appended file of %d bytes is not a prefix of the records", name, len(got))
			case torn && len(got)%pageSize != 0:
				t.Errorf("%s: appended file of %d bytes ends inside a record, not at a page boundary", name, len(got))
			case torn && n != records:
				t.Errorf("%s: appended file ends inside record %d, the appender saw %d acknowledged", name, n, records)
			case n < records || n > records+1:
				t.Errorf("%s: appended file has %d records, the appender saw %d acknowledged", name, n, records)
			case torn:
				t.Logf("%s round %d: appender killed after %d records acknowledged, file has %d and %d bytes of the next (cut at a page boundary)", name, round, records, n, len(got)-whole)
			default:
				t.Logf("%s round %d: appender killed after %d records acknowledged, file has %d", name, round, records, n)
			}
			// The files can be written on.
			if err := os.WriteFile(filepath.Join(mnt, "big"), []byte("rewritten"), 0o644); err != nil {
				t.Errorf("%s: rewrite after the kill: %v", name, err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				_, err = f.Write([]byte("more\n"))
				f.Close()
			}
			if err != nil {
				t.Errorf("%s: append after the kill: %v", name, err)
			}
			os.Remove(filepath.Join(mnt, "big"))
			os.Remove(p)
		}
		faultCompareSums(t, name+" neighbours of the killed writers", before, faultTreeSums(t, mnt))
		if m != nil {
			m.finish(t)
		}
	}
}
