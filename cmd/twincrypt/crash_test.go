package main

// Crash consistency of the encrypted mount (issue 6, item 2).
//
// A volume gets a set of stable files, written and fsynced first. Then, in
// rounds, a workload process (this test binary re-executed, see init below)
// runs a write-heavy mix against a background daemon: creates, appends,
// overwrites at random offsets, truncates, renames of files and
// directories, mkdir, rmdir, unlink, long names (the sidecar path), and
// fsyncs followed by a read-back. It journals every operation in a file
// outside the mount, before ("B") and after ("E") doing it, and every
// fsync it has checked ("S": name, sha256, size). At a random moment
// (seeded, logged) the daemon is killed with SIGKILL; other rounds unmount
// it while the workload holds files and directories open (umount refused
// as busy, then umount --lazy while writes go on), and then either kill
// the daemon or let the workload finish.
//
// After each round the volume is remounted and checked against a model
// rebuilt from the journal: every operation that completed is there, byte
// for byte (the engine has no write-back cache: an acknowledged WRITE is in
// the lower file); the at most one operation per worker in flight at the
// kill left its paths in the state before or after it, or, for a write or
// truncate, a file that differs only in the extents being written and has
// a size between the old and the new one; everything else (the stable
// files, the results of earlier rounds, fsynced files) is unchanged; the
// tree lists and every file reads end to end. twincrypt fsck must find
// nothing but what the interrupted operations explain (no config damage,
// ever), every read error must be one fsck reports, and fsck --repair must
// leave a volume that checks clean. TestCrashLeftovers builds the
// leftovers of each multi-step operation in LOWER and checks what the
// mount, fsck and --repair make of them.
//
//	go test ./cmd/twincrypt -run TestCrashConsistency -crash.rounds=40 -v

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

var (
	crashRounds = flag.Int("crash.rounds", 5, "TestCrashConsistency: SIGKILL rounds per cipher (plus two unmount-with-open-files rounds)")
	crashSeed   = flag.Uint64("crash.seed", 0, "TestCrashConsistency: seed of the workload and the kill moments (0: from the clock, logged)")
)

// The workload process is this test binary, re-executed with crashEnv set:
// init runs before TestMain, so it never builds the twincrypt binary.
const crashEnv = "TWINCRYPT_CRASH_WORKLOAD"

func init() {
	if os.Getenv(crashEnv) == "" {
		return
	}
	os.Exit(crashWorkloadMain())
}

const (
	crashExtent   = 4096
	crashMaxFiles = 10      // per worker
	crashMaxDirs  = 3       // per worker, all directly below its root
	crashMaxSize  = 1 << 20 // largest file
	crashHeld     = 4       // files a worker holds open in the unmount rounds
)

// crashOp is one operation of the workload. Paths are relative to the
// worker's root directory.
type crashOp struct {
	Kind string `json:"k"` // create write trunc rename mkdir rmdir unlink fsync
	Path string `json:"p"`
	To   string `json:"to,omitempty"`
	Off  int64  `json:"off,omitempty"`
	Len  int64  `json:"len,omitempty"`
	Seed uint64 `json:"seed,omitempty"` // data of a write; 0: zeros
	Size int64  `json:"size,omitempty"`
	Dir  bool   `json:"dir,omitempty"`  // rename of a directory
	Held bool   `json:"held,omitempty"` // create: keep the file open
}

// crashRec is one journal line.
type crashRec struct {
	T    string   `json:"t"` // B begin, E end, S fsync checked, X workload failure, Q clean exit
	W    int      `json:"w"`
	N    int      `json:"n,omitempty"`
	Op   *crashOp `json:"op,omitempty"`
	Err  string   `json:"err,omitempty"`
	Mono int64    `json:"mono,omitempty"` // CLOCK_MONOTONIC at the end of the op
	Path string   `json:"path,omitempty"`
	Sum  string   `json:"sum,omitempty"`
	Size int64    `json:"size,omitempty"`
	Msg  string   `json:"msg,omitempty"`
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// crashData is the content of a write: a function of its seed.
func crashData(seed uint64, n int64) []byte {
	b := make([]byte, n)
	if seed != 0 {
		var s [32]byte
		binary.LittleEndian.PutUint64(s[:], seed)
		_, _ = rand.NewChaCha8(s).Read(b)
	}
	return b
}

func sumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// crashModel is what a worker's directory holds after a sequence of ops.
type crashModel struct {
	files map[string][]byte
	dirs  map[string]bool
}

func newCrashModel() *crashModel {
	return &crashModel{files: map[string][]byte{}, dirs: map[string]bool{}}
}

func (m *crashModel) clone() *crashModel {
	c := newCrashModel()
	for p, b := range m.files {
		c.files[p] = bytes.Clone(b)
	}
	for d := range m.dirs {
		c.dirs[d] = true
	}
	return c
}

func (m *crashModel) apply(op crashOp) {
	switch op.Kind {
	case "create":
		m.files[op.Path] = []byte{}
	case "write":
		f := m.files[op.Path]
		if end := op.Off + op.Len; end > int64(len(f)) {
			f = append(f, make([]byte, end-int64(len(f)))...)
		}
		copy(f[op.Off:], crashData(op.Seed, op.Len))
		m.files[op.Path] = f
	case "trunc":
		f := m.files[op.Path]
		if op.Size <= int64(len(f)) {
			f = f[:op.Size:op.Size]
		} else {
			f = append(f, make([]byte, op.Size-int64(len(f)))...)
		}
		m.files[op.Path] = f
	case "rename":
		if !op.Dir {
			m.files[op.To] = m.files[op.Path]
			delete(m.files, op.Path)
			return
		}
		delete(m.dirs, op.Path)
		m.dirs[op.To] = true
		for p, b := range m.files {
			if rest, ok := strings.CutPrefix(p, op.Path+"/"); ok {
				delete(m.files, p)
				m.files[op.To+"/"+rest] = b
			}
		}
	case "mkdir":
		m.dirs[op.Path] = true
	case "rmdir":
		delete(m.dirs, op.Path)
	case "unlink":
		delete(m.files, op.Path)
	}
}

// ---------------------------------------------------------------------
// The workload process.

type crashJournal struct {
	mu sync.Mutex
	f  *os.File
}

func (j *crashJournal) put(r crashRec, sync bool) {
	b, _ := json.Marshal(r)
	j.mu.Lock()
	defer j.mu.Unlock()
	_, _ = j.f.Write(append(b, '\n'))
	if sync {
		_ = j.f.Sync()
	}
}

type crashWorker struct {
	id    int
	root  int // descriptor of the worker's directory on the mount
	rng   *rand.Rand
	m     *crashModel
	held  map[string]int
	j     *crashJournal
	stop  *atomic.Bool
	seq   int
	names int
	// readBack is what the last fsync op read back.
	readBack []byte
}

// crashWorkloadMain runs the workers until stdin closes or the mount goes
// away. Environment: CRASH_ROOT (the mount), CRASH_DIRS (worker
// directories, relative, comma separated), CRASH_JOURNAL, CRASH_SEED,
// CRASH_HOLD (1: worker 0 keeps crashHeld files open).
func crashWorkloadMain() int {
	root := os.Getenv("CRASH_ROOT")
	seed, _ := strconv.ParseUint(os.Getenv("CRASH_SEED"), 10, 64)
	jf, err := os.OpenFile(os.Getenv("CRASH_JOURNAL"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		return 2
	}
	j := &crashJournal{f: jf}
	var stop atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop.Store(true)
	}()
	var workers []*crashWorker
	for i, dir := range strings.Split(os.Getenv("CRASH_DIRS"), ",") {
		fd, err := unix.Open(filepath.Join(root, dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "workload:", err)
			return 2
		}
		w := &crashWorker{id: i, root: fd, rng: rand.New(rand.NewPCG(seed, uint64(i))),
			m: newCrashModel(), held: map[string]int{}, j: j, stop: &stop}
		if i == 0 && os.Getenv("CRASH_HOLD") == "1" {
			for h := 0; h < crashHeld; h++ {
				if !w.do(crashOp{Kind: "create", Path: fmt.Sprintf("h%d", h), Held: true}) {
					fmt.Fprintln(os.Stderr, "workload: creating the held files failed")
					return 2
				}
			}
		}
		workers = append(workers, w)
	}
	fmt.Println("ready")
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && w.do(w.next()) {
			}
		}()
	}
	wg.Wait()
	for _, w := range workers {
		for _, fd := range w.held {
			unix.Close(fd)
		}
		unix.Close(w.root)
	}
	j.put(crashRec{T: "Q"}, true)
	return 0
}

// do journals, runs and models one op; false stops the worker.
func (w *crashWorker) do(op crashOp) bool {
	w.seq++
	w.j.put(crashRec{T: "B", W: w.id, N: w.seq, Op: &op}, false)
	err := w.exec(op)
	end := crashRec{T: "E", W: w.id, N: w.seq, Mono: monoNow()}
	if err != nil {
		end.Err = err.Error()
	}
	w.j.put(end, false)
	if err != nil {
		return false
	}
	w.m.apply(op)
	if op.Kind != "fsync" {
		return true
	}
	// What an fsync read back must be the model: anything else is a
	// failure of the mount itself.
	want := w.m.files[op.Path]
	if !bytes.Equal(w.readBack, want) {
		w.j.put(crashRec{T: "X", W: w.id, Msg: fmt.Sprintf("read back %s after fsync: %d bytes (sha %.16s), want %d (sha %.16s)",
			op.Path, len(w.readBack), sumHex(w.readBack), len(want), sumHex(want))}, true)
		return false
	}
	w.j.put(crashRec{T: "S", W: w.id, N: w.seq, Path: op.Path, Sum: sumHex(want), Size: int64(len(want))}, true)
	return true
}

// fsyncAndRead fsyncs the open file fd and reads it back whole.
func (w *crashWorker) fsyncAndRead(fd int) error {
	if err := unix.Fsync(fd); err != nil {
		return err
	}
	w.readBack = w.readBack[:0]
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.Pread(fd, buf, int64(len(w.readBack)))
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		w.readBack = append(w.readBack, buf[:n]...)
	}
}

func (w *crashWorker) withFile(p string, flags int, fn func(fd int) error) error {
	if fd, ok := w.held[p]; ok {
		return fn(fd)
	}
	fd, err := unix.Openat(w.root, p, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = fn(fd)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

func (w *crashWorker) exec(op crashOp) error {
	switch op.Kind {
	case "create":
		fd, err := unix.Openat(w.root, op.Path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		if op.Held {
			w.held[op.Path] = fd
			return nil
		}
		return unix.Close(fd)
	case "write":
		return w.withFile(op.Path, unix.O_WRONLY, func(fd int) error {
			data := crashData(op.Seed, op.Len)
			n, err := unix.Pwrite(fd, data, op.Off)
			if err == nil && n != len(data) {
				err = fmt.Errorf("short write: %d of %d bytes", n, len(data))
			}
			return err
		})
	case "trunc":
		return w.withFile(op.Path, unix.O_WRONLY, func(fd int) error { return unix.Ftruncate(fd, op.Size) })
	case "fsync":
		return w.withFile(op.Path, unix.O_RDONLY, w.fsyncAndRead)
	case "rename":
		return unix.Renameat(w.root, op.Path, w.root, op.To)
	case "mkdir":
		return unix.Mkdirat(w.root, op.Path, 0o700)
	case "rmdir":
		return unix.Unlinkat(w.root, op.Path, unix.AT_REMOVEDIR)
	case "unlink":
		return unix.Unlinkat(w.root, op.Path, 0)
	}
	return fmt.Errorf("unknown op %q", op.Kind)
}

func (w *crashWorker) pick(list []string) string { return list[w.rng.IntN(len(list))] }

// newName is a fresh name; three in ten are long enough (over 190 bytes)
// for their encrypted form to need a long-name sidecar.
func (w *crashWorker) newName(dir bool) string {
	w.names++
	name := fmt.Sprintf("f%d", w.names)
	if dir {
		name = fmt.Sprintf("d%d", w.names)
	}
	if w.rng.IntN(10) < 3 {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789_-"
		b := []byte(name + "-")
		for n := 190 + w.rng.IntN(50); len(b) < n; {
			b = append(b, letters[w.rng.IntN(len(letters))])
		}
		name = string(b)
	}
	return name
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// next picks a valid op for the worker's current model.
func (w *crashWorker) next() crashOp {
	m := w.m
	files := sortedKeys(m.files)
	dirs := sortedKeys(m.dirs)
	var movable []string
	for _, f := range files {
		if _, h := w.held[f]; !h {
			movable = append(movable, f)
		}
	}
	newPath := func() string {
		if len(dirs) > 0 && w.rng.IntN(2) == 0 {
			return w.pick(dirs) + "/" + w.newName(false)
		}
		return w.newName(false)
	}
	for {
		r := w.rng.IntN(100)
		switch {
		case r < 10:
			if len(files) < crashMaxFiles {
				return crashOp{Kind: "create", Path: newPath()}
			}
		case r < 48:
			if len(files) > 0 {
				return w.writeOp(w.pick(files))
			}
		case r < 56:
			if len(files) > 0 {
				p := w.pick(files)
				size := int64(len(m.files[p]))
				return crashOp{Kind: "trunc", Path: p, Size: w.rng.Int64N(min(crashMaxSize, size+size/2+10000) + 1)}
			}
		case r < 66:
			if len(movable) > 0 {
				from := w.pick(movable)
				to := newPath()
				if w.rng.IntN(4) == 0 {
					to = w.pick(movable) // replaces an existing file
				}
				if to != from {
					return crashOp{Kind: "rename", Path: from, To: to}
				}
			}
		case r < 70:
			if len(dirs) > 0 {
				return crashOp{Kind: "rename", Path: w.pick(dirs), To: w.newName(true), Dir: true}
			}
		case r < 75:
			if len(dirs) < crashMaxDirs {
				return crashOp{Kind: "mkdir", Path: w.newName(true)}
			}
		case r < 78:
			for _, d := range dirs {
				empty := true
				for _, f := range files {
					if strings.HasPrefix(f, d+"/") {
						empty = false
					}
				}
				if empty {
					return crashOp{Kind: "rmdir", Path: d}
				}
			}
		case r < 85:
			if len(movable) > 3 {
				return crashOp{Kind: "unlink", Path: w.pick(movable)}
			}
		default:
			if len(files) > 0 {
				return crashOp{Kind: "fsync", Path: w.pick(files)}
			}
		}
	}
}

// writeOp appends, overwrites or writes past the end (leaving a hole),
// from a few bytes to a whole FUSE request, sometimes zeros.
func (w *crashWorker) writeOp(p string) crashOp {
	size := int64(len(w.m.files[p]))
	var off int64
	switch r := w.rng.IntN(10); {
	case r < 4:
		off = size
	case r < 8:
		off = w.rng.Int64N(size + 1)
	default:
		off = size + w.rng.Int64N(65536)
	}
	var n int64
	switch r := w.rng.IntN(10); {
	case r < 3:
		n = 1 + w.rng.Int64N(512)
	case r < 6:
		n = 1 + w.rng.Int64N(16384)
	case r < 9:
		n = 1 + w.rng.Int64N(256<<10)
	default:
		n = 256<<10 + w.rng.Int64N(768<<10)
	}
	if off >= crashMaxSize {
		off = w.rng.Int64N(crashMaxSize / 2)
	}
	n = min(n, crashMaxSize-off)
	seed := w.rng.Uint64() | 1
	if w.rng.IntN(20) == 0 {
		seed = 0
	}
	return crashOp{Kind: "write", Path: p, Off: off, Len: n, Seed: seed}
}

// ---------------------------------------------------------------------
// The test.

// crashEntry is a path of the mounted view as the checker sees or expects
// it.
type crashEntry struct {
	dir  bool
	size int64
	sum  string
	data []byte // kept for the current round's files
	err  error  // listing or reading failed
}

func (e *crashEntry) String() string {
	switch {
	case e == nil:
		return "absent"
	case e.err != nil:
		return fmt.Sprintf("error %v", e.err)
	case e.dir:
		return "directory"
	}
	return fmt.Sprintf("file of %d bytes, sha256 %.16s", e.size, e.sum)
}

func sameEntry(a, b *crashEntry) bool {
	switch {
	case a == nil || b == nil:
		return a == b
	case a.err != nil || b.err != nil:
		return a.err != nil && b.err != nil
	}
	return a.dir == b.dir && a.size == b.size && a.sum == b.sum
}

// crashWalk lists the mounted view and reads every file end to end.
func crashWalk(t *testing.T, mnt, keep string) map[string]*crashEntry {
	t.Helper()
	tree := map[string]*crashEntry{}
	var walk func(rel string)
	walk = func(rel string) {
		entries, err := os.ReadDir(filepath.Join(mnt, rel))
		if err != nil {
			tree[rel].err = err
			return
		}
		for _, de := range entries {
			p := path.Join(rel, de.Name())
			switch de.Type() {
			case os.ModeDir:
				tree[p] = &crashEntry{dir: true}
				walk(p)
			case 0:
				data, err := os.ReadFile(filepath.Join(mnt, p))
				e := &crashEntry{size: int64(len(data)), sum: sumHex(data), err: err}
				if keep != "" && strings.HasPrefix(p, keep) {
					e.data = data
				}
				tree[p] = e
			default:
				t.Errorf("/%s: unexpected file type %v", p, de.Type())
			}
		}
	}
	tree[""] = &crashEntry{dir: true}
	walk("")
	delete(tree, "")
	return tree
}

// crashVolume is one volume under test and its running totals.
type crashVolume struct {
	t              *testing.T
	pf, lower, mnt string
	journal        string
	config         []byte
	stable         map[string][]byte // path -> content, written and fsynced first
	base           map[string]*crashEntry

	rounds, kills, lazies, ops, pending, torn, fsyncsChecked int
	filesChecked                                             int
	bytesChecked                                             int64
	findings                                                 map[fsck.Kind]int
}

func (v *crashVolume) mount() int {
	t := v.t
	t.Helper()
	twincrypt(t, "", append([]string{"mount", "-b", "-q", "--passfile", v.pf}, append(transportArgs(), v.lower, v.mnt)...)...).expectExit(t, 0, "mount")
	requireTestTransport(t, v.mnt)
	pids := daemonPIDs(t, v.mnt)
	if len(pids) != 1 {
		t.Fatalf("daemon pids for %s: %v, want one", v.mnt, pids)
	}
	return pids[0]
}

func (v *crashVolume) umount() {
	t := v.t
	t.Helper()
	twincrypt(t, "", "umount", v.mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, v.mnt)
}

// fsck runs twincrypt fsck --json (with --repair if asked) and returns its
// exit code and report.
func (v *crashVolume) fsck(repair bool) (int, *fsck.Report) {
	t := v.t
	t.Helper()
	args := []string{"fsck", "--json", "--passfile", v.pf, v.lower}
	if repair {
		args = append(args[:1], append([]string{"--repair"}, args[1:]...)...)
	}
	r := twincrypt(t, "", args...)
	var rep fsck.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%s: exit %d, output is not a report: %v\n%s\n%s", strings.Join(args, " "), r.code, err, r.stdout, r.stderr)
	}
	switch r.code {
	case exitOK, exitFsckProblems, exitFsckRepaired:
	default:
		t.Fatalf("%s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.code, &rep
}

// writeStable creates the files that no round may change, each fsynced.
func (v *crashVolume) writeStable() {
	t := v.t
	long := func(prefix string, n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := map[string]int{
		"stable/empty": 0, "stable/one": 1, "stable/e4095": 4095, "stable/e4096": 4096, "stable/e4097": 4097,
		"stable/spill4090": 4090, "stable/big": 1<<20 + 100, "stable/sub/deeper/file": 70000,
		"stable/" + long("longfile-", 200):                            5000,
		"stable/" + long("longdir-", 220) + "/" + long("inner-", 240): 12345,
	}
	v.stable = map[string][]byte{}
	for _, p := range sortedKeys(sizes) {
		data := make([]byte, sizes[p])
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		full := filepath.Join(v.mnt, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		v.stable[p] = data
	}
	// And the directories that hold them.
	dirs := map[string]bool{v.mnt: true}
	for p := range v.stable {
		for d := filepath.Dir(filepath.Join(v.mnt, p)); d != v.mnt; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	for d := range dirs {
		if err := syncPath(d); err != nil {
			t.Errorf("fsync of directory %s: %v", d, err)
		}
	}
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// crashPlan is what one round does.
type crashPlan struct {
	kind  string // "kill", "lazy-kill", "lazy-stop"
	seed  uint64
	delay time.Duration // before the kill, or before umount --lazy
	after time.Duration // lazy rounds: between umount --lazy and the kill or stop
}

// crashWorkerLog is one worker's part of the journal.
type crashWorkerLog struct {
	ops     []crashOp
	seqs    []int
	done    []bool
	errs    []string
	syncs   []crashRec
	pending int // index into ops, -1 if none
}

// runRound runs the workload in round k against the daemon pid, kills or
// lazily unmounts it as planned, and returns when the daemon is gone, with
// the CLOCK_MONOTONIC time of the kill (0 if there was none).
func (v *crashVolume) runRound(k int, plan crashPlan, pid int) (killMono int64) {
	t := v.t
	t.Helper()
	dirs := []string{fmt.Sprintf("r%d/w0", k), fmt.Sprintf("r%d/w1", k)}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(v.mnt, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hold := "0"
	if plan.kind != "kill" {
		hold = "1"
	}
	cmd := exec.Command(exe)
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), crashEnv+"=1", "CRASH_ROOT="+v.mnt, "CRASH_DIRS="+strings.Join(dirs, ","),
		"CRASH_JOURNAL="+v.journal, "CRASH_SEED="+strconv.FormatUint(plan.seed, 10), "CRASH_HOLD="+hold)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// One reader: the ready line, then whatever else, then the exit.
	ready := make(chan string, 1)
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, br)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = cmd.Process.Kill() // by pid: this test's own child
			<-done
		}
	})
	waitExit := func(what string) error {
		select {
		case err := <-exited:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("workload still running 60 s after %s\nstderr: %s", what, stderr.String())
			return nil
		}
	}
	select {
	case line := <-ready:
		if line != "ready\n" {
			stdin.Close()
			err := waitExit("a failed start")
			t.Fatalf("workload did not start: %q, %v\nstderr: %s", line, err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("workload not ready after 60 s\nstderr: %s", stderr.String())
	}

	kill := func() {
		killMono = monoNow()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %d: %v", pid, err)
		}
		v.kills++
	}
	time.Sleep(plan.delay)
	switch plan.kind {
	case "kill":
		// The workload is not told to stop: its next operation fails
		// with ENOTCONN or ECONNABORTED, whatever it was doing.
		kill()
		err := waitExit("the kill")
		if err != nil {
			t.Errorf("workload: %v\nstderr: %s", err, stderr.String())
		}
		// The dead mount (ENOTCONN) goes with a plain umount once the
		// workload has closed its descriptors.
		v.umount()
	default:
		// The workload holds directories and files open: a plain
		// umount is refused and changes nothing.
		r := twincrypt(t, "", "umount", v.mnt)
		r.expectExit(t, exitError, "umount with files open")
		if !strings.Contains(r.stderr, "busy") || !isMounted(t, v.mnt) {
			t.Fatalf("umount with files open: stderr %q, still mounted %v", r.stderr, isMounted(t, v.mnt))
		}
		twincrypt(t, "", "umount", "--lazy", v.mnt).expectExit(t, 0, "umount --lazy")
		if isMounted(t, v.mnt) {
			t.Fatalf("%s still listed after umount --lazy", v.mnt)
		}
		v.lazies++
		// The workload goes on through its descriptors.
		time.Sleep(plan.after)
		if plan.kind == "lazy-kill" {
			kill()
		} else {
			stdin.Close()
		}
		if err := waitExit("umount --lazy"); err != nil {
			t.Errorf("workload: %v\nstderr: %s", err, stderr.String())
		}
		// Detached, its last descriptor closed: the daemon exits (or
		// is dead already).
		waitDaemonGone(t, v.mnt)
	}
	return killMono
}

// readJournal splits the journal into worker logs.
func (v *crashVolume) readJournal(killMono int64, workers int) []*crashWorkerLog {
	t := v.t
	t.Helper()
	data, err := os.ReadFile(v.journal)
	if err != nil {
		t.Fatal(err)
	}
	logs := make([]*crashWorkerLog, workers)
	index := make([]map[int]int, workers)
	for i := range logs {
		logs[i] = &crashWorkerLog{pending: -1}
		index[i] = map[int]int{}
	}
	quit := false
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r crashRec
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		if r.T == "Q" {
			quit = true
			continue
		}
		if r.W < 0 || r.W >= workers {
			t.Fatalf("journal line for worker %d", r.W)
		}
		l := logs[r.W]
		switch r.T {
		case "B":
			index[r.W][r.N] = len(l.ops)
			l.ops = append(l.ops, *r.Op)
			l.seqs = append(l.seqs, r.N)
			l.done = append(l.done, false)
			l.errs = append(l.errs, "")
		case "E":
			i, ok := index[r.W][r.N]
			if !ok {
				t.Fatalf("journal: end of op %d of worker %d without its begin", r.N, r.W)
			}
			switch {
			case r.Err == "":
				l.done[i] = true
			case killMono != 0 && r.Mono >= killMono:
				l.errs[i] = r.Err // ended by the kill: its outcome is unknown
			default:
				t.Errorf("worker %d op %d %+v failed before any kill: %s", r.W, r.N, l.ops[i], r.Err)
				l.errs[i] = r.Err
			}
		case "S":
			l.syncs = append(l.syncs, r)
		case "X":
			t.Errorf("workload worker %d: %s", r.W, r.Msg)
		}
	}
	if killMono == 0 && !quit {
		t.Error("journal: the workload did not finish cleanly")
	}
	for w, l := range logs {
		for i := range l.ops {
			if l.done[i] {
				continue
			}
			if i != len(l.ops)-1 {
				t.Fatalf("worker %d: op %d %+v did not complete but later ones ran", w, l.seqs[i], l.ops[i])
			}
			if killMono == 0 {
				t.Errorf("worker %d: op %+v incomplete without a kill (%s)", w, l.ops[i], l.errs[i])
			}
			l.pending = i
		}
	}
	return logs
}

// involves reports whether p (relative to the worker root) is a path the
// op changes, or lies below one.
func (op *crashOp) involves(p string) bool {
	for _, x := range []string{op.Path, op.To} {
		if x != "" && (p == x || strings.HasPrefix(p, x+"/")) {
			return true
		}
	}
	return false
}

// tree renders a model as entries of the mounted view below prefix.
func (m *crashModel) tree(prefix string) map[string]*crashEntry {
	tree := map[string]*crashEntry{prefix: {dir: true}}
	for d := range m.dirs {
		tree[prefix+"/"+d] = &crashEntry{dir: true}
	}
	for p, b := range m.files {
		tree[prefix+"/"+p] = &crashEntry{size: int64(len(b)), sum: sumHex(b), data: b}
	}
	return tree
}

// damagedExtents is the extent range an interrupted write or truncate may
// leave in neither its old nor its new state.
func damagedExtents(op crashOp, oldSize int64) (int64, int64) {
	if op.Kind == "trunc" {
		e := min(oldSize, op.Size) / crashExtent
		return e, e
	}
	e0, e1 := op.Off/crashExtent, (op.Off+op.Len-1)/crashExtent
	if op.Off+op.Len > oldSize && oldSize%crashExtent != 0 {
		e0 = min(e0, oldSize/crashExtent) // the old tail is re-encrypted first
	}
	return e0, e1
}

// tornOK checks a file left by an interrupted write or truncate: outside
// the damaged extents it holds the old bytes, or the new ones where the
// old file did not reach, and its size lies between the two.
func tornOK(op crashOp, before, after []byte, got *crashEntry) error {
	lo, hi := min(len(before), len(after)), max(len(before), len(after))
	if got.size < int64(lo) || got.size > int64(hi) {
		return fmt.Errorf("size %d outside [%d, %d]", got.size, lo, hi)
	}
	e0, e1 := damagedExtents(op, int64(len(before)))
	for i, c := range got.data {
		if e := int64(i) / crashExtent; e >= e0 && e <= e1 {
			continue
		}
		var want byte
		switch {
		case i < len(before):
			want = before[i]
		case i < len(after):
			want = after[i]
		}
		if c != want {
			return fmt.Errorf("byte %d (extent %d, outside the damaged extents %d-%d) is %#x, want %#x", i, i/crashExtent, e0, e1, c, want)
		}
	}
	return nil
}

// check verifies the remounted volume after round k and returns the
// paths (of the mounted view, with a leading slash) that gave an error.
func (v *crashVolume) check(k int, logs []*crashWorkerLog, got map[string]*crashEntry) map[string]error {
	t := v.t
	t.Helper()
	ioErrs := map[string]error{}
	for p, e := range got {
		if e.err != nil {
			ioErrs["/"+p] = e.err
		}
		if !e.dir {
			v.filesChecked++
			v.bytesChecked += e.size
		}
	}
	// The stable files, against the bytes written at the start.
	for p, data := range v.stable {
		if e := got[p]; e == nil || e.err != nil || e.dir || e.sum != sumHex(data) {
			t.Errorf("round %d: stable file /%s is %v, want %d bytes sha256 %.16s", k, p, e, len(data), sumHex(data))
		}
	}
	// Everything from before this round is unchanged.
	roundDir := fmt.Sprintf("r%d", k)
	for p, want := range v.base {
		if e := got[p]; !sameEntry(e, want) {
			t.Errorf("round %d: /%s untouched by the workload is %v, was %v", k, p, e, want)
		}
	}
	for p := range got {
		if _, ok := v.base[p]; !ok && p != roundDir && !strings.HasPrefix(p, roundDir+"/") {
			t.Errorf("round %d: /%s appeared outside the workload's directories", k, p)
		}
	}
	// The workers' directories, against the journal.
	for w, l := range logs {
		prefix := fmt.Sprintf("%s/w%d", roundDir, w)
		m := newCrashModel()
		for i, op := range l.ops {
			if l.done[i] {
				m.apply(op)
				v.ops++
			}
		}
		before := m.tree(prefix)
		var pend *crashOp
		var after map[string]*crashEntry
		if l.pending >= 0 {
			v.pending++
			pend = &l.ops[l.pending]
			am := m.clone()
			am.apply(*pend)
			after = am.tree(prefix)
		}
		involved := func(p string) bool {
			rel, ok := strings.CutPrefix(p, prefix+"/")
			return ok && pend != nil && pend.involves(rel)
		}
		actual := map[string]*crashEntry{}
		for p, e := range got {
			if p == prefix || strings.HasPrefix(p, prefix+"/") {
				actual[p] = e
			}
		}
		var inv []string
		for _, p := range sortedKeys(mergeKeys(actual, before, after)) {
			if involved(p) {
				inv = append(inv, p)
				continue
			}
			if !sameEntry(actual[p], before[p]) {
				t.Errorf("round %d worker %d: /%s is %v, want %v (last completed op of %d: %v, in flight: %v)",
					k, w, p, actual[p], before[p], len(l.ops), lastDone(l), pend)
			}
		}
		if pend == nil {
			continue
		}
		// A path the op in flight left unreadable (an interrupted mkdir
		// can leave an empty IV file: EIO) counts as the entry it is
		// meant to be; the caller checks that fsck reports it.
		same := func(want map[string]*crashEntry) bool {
			for _, p := range inv {
				a, w := actual[p], want[p]
				if a != nil && a.err != nil && w != nil && a.dir == w.dir {
					continue
				}
				if !sameEntry(a, w) {
					return false
				}
			}
			return true
		}
		if same(before) || same(after) {
			continue
		}
		file := prefix + "/" + pend.Path
		if (pend.Kind == "write" || pend.Kind == "trunc") && len(inv) == 1 && inv[0] == file && actual[file] != nil && !actual[file].dir {
			if actual[file].err != nil {
				continue // must be reported by fsck, checked by the caller
			}
			if err := tornOK(*pend, before[file].data, after[file].data, actual[file]); err != nil {
				t.Errorf("round %d worker %d: /%s after the interrupted %+v: %v", k, w, file, *pend, err)
			} else {
				v.torn++
			}
			continue
		}
		for _, p := range inv {
			t.Errorf("round %d worker %d: /%s is %v; before the interrupted %+v it was %v, after %v",
				k, w, p, actual[p], *pend, before[p], after[p])
		}
	}
	// Every fsync the workload checked, unless a later op changed the file.
	for w, l := range logs {
		prefix := fmt.Sprintf("%s/w%d", roundDir, w)
		for _, s := range l.syncs {
			touched := false
			for i, op := range l.ops {
				if l.seqs[i] > s.N && op.involves(s.Path) {
					touched = true
				}
			}
			if touched {
				continue
			}
			v.fsyncsChecked++
			if e := got[prefix+"/"+s.Path]; e == nil || e.err != nil || e.dir || e.sum != s.Sum || e.size != s.Size {
				t.Errorf("round %d: /%s/%s fsynced with %d bytes sha256 %.16s is %v", k, prefix, s.Path, s.Size, s.Sum, e)
			}
		}
	}
	return ioErrs
}

func mergeKeys(maps ...map[string]*crashEntry) map[string]bool {
	all := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			all[k] = true
		}
	}
	return all
}

func lastDone(l *crashWorkerLog) any {
	for i := len(l.ops) - 1; i >= 0; i-- {
		if l.done[i] {
			return l.ops[i]
		}
	}
	return nil
}

// checkFsck matches fsck's findings with the ops in flight: nothing else
// may be damaged, and every read error must be among them.
func (v *crashVolume) checkFsck(k int, rep *fsck.Report, logs []*crashWorkerLog, ioErrs map[string]error) {
	t := v.t
	t.Helper()
	var pend []string // involved paths of the mounted view
	for w, l := range logs {
		if l.pending >= 0 {
			op := l.ops[l.pending]
			for _, p := range []string{op.Path, op.To} {
				if p != "" {
					pend = append(pend, fmt.Sprintf("/r%d/w%d/%s", k, w, p))
				}
			}
		}
	}
	inFlight := func(plain string) bool {
		for _, p := range pend {
			if plain == p || strings.HasPrefix(plain, p+"/") {
				return true
			}
		}
		return false
	}
	reported := map[string]bool{}
	orphans := 0
	for _, p := range rep.Problems {
		if p.Quarantined {
			continue
		}
		v.findings[p.Kind]++
		reported[p.Plain] = true
		switch {
		case p.Kind == fsck.ConfigLeftover || p.Kind == fsck.LowerError || p.Kind == fsck.CipherMismatch || p.Kind == fsck.BadHeader:
			t.Errorf("round %d: fsck: %s at %s (%s): never the result of a crash", k, p.Kind, p.Lower, p.Detail)
		case p.Kind == fsck.SidecarOrphaned:
			orphans++
		case p.Plain == "" || !inFlight(p.Plain):
			t.Errorf("round %d: fsck: %s at %s (%q, %s): not an operation in flight %v", k, p.Kind, p.Lower, p.Plain, p.Detail, pend)
		}
	}
	if nPend := len(pend); orphans > nPend {
		t.Errorf("round %d: fsck: %d orphaned sidecars, more than the %d paths in flight", k, orphans, nPend)
	}
	for p, err := range ioErrs {
		if !reported[p] {
			t.Errorf("round %d: %s gives %v through the mount, and fsck does not report it", k, p, err)
		}
	}
}

func TestCrashConsistency(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: the unmount-with-open-files rounds need umount(2) to report busy mounts (root)")
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (repeat with -crash.seed=%d), %d SIGKILL rounds per cipher", seed, seed, *crashRounds)
	for i, cipher := range []string{"aes-xts", "aes-cbc"} {
		t.Run(cipher, func(t *testing.T) {
			crashVolumeTest(t, cipher, seed+uint64(i)*1000003)
		})
	}
}

func crashVolumeTest(t *testing.T, cipher string, seed uint64) {
	pf := writePassfile(t, "crash passphrase")
	v := &crashVolume{t: t, pf: pf, lower: initVolume(t, pf, "--cipher", cipher),
		mnt: newMountpoint(t), journal: filepath.Join(tempDir(t), "journal"), findings: map[fsck.Kind]int{}}
	unmountOnCleanup(t, v.mnt)
	var err error
	if v.config, err = os.ReadFile(filepath.Join(v.lower, config.FileName)); err != nil {
		t.Fatal(err)
	}
	pid := v.mount()
	v.writeStable()
	v.base = crashWalk(t, v.mnt, "")

	rng := rand.New(rand.NewPCG(seed, 7))
	var plans []crashPlan
	for i := 0; i < *crashRounds; i++ {
		plans = append(plans, crashPlan{kind: "kill"})
		switch i {
		case 0:
			plans = append(plans, crashPlan{kind: "lazy-stop"})
		case 2:
			plans = append(plans, crashPlan{kind: "lazy-kill"})
		}
	}
	if *crashRounds < 3 {
		plans = append(plans, crashPlan{kind: "lazy-kill"})
	}
	start := time.Now()
	for k := range plans {
		plan := &plans[k]
		plan.seed = rng.Uint64()
		plan.delay = time.Duration(20+rng.IntN(900)) * time.Millisecond
		plan.after = time.Duration(20+rng.IntN(400)) * time.Millisecond
		if err := os.Truncate(v.journal, 0); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		killMono := v.runRound(k, *plan, pid)
		v.rounds++
		logs := v.readJournal(killMono, 2)

		code, rep := v.fsck(false)
		if plan.kind == "lazy-stop" && code != exitOK {
			t.Errorf("round %d (%s): fsck exit %d after a clean unmount: %+v", k, plan.kind, code, rep.Problems)
		}
		pid = v.mount()
		got := crashWalk(t, v.mnt, fmt.Sprintf("r%d/", k))
		ioErrs := v.check(k, logs, got)
		v.checkFsck(k, rep, logs, ioErrs)

		var inFlight []string
		for w, l := range logs {
			if l.pending >= 0 {
				inFlight = append(inFlight, fmt.Sprintf("w%d %s %s", w, l.ops[l.pending].Kind, l.errs[l.pending]))
			}
		}
		t.Logf("round %d %-9s seed %d delay %v/%v: %d ops journaled, in flight %q, fsck %d problems, %d read errors",
			k, plan.kind, plan.seed, plan.delay, plan.after, len(logs[0].ops)+len(logs[1].ops), inFlight, rep.Found, len(ioErrs))

		if code != exitOK {
			v.umount()
			// Exit 0 is right when the mount has healed it already (it
			// gives an empty directory without IV a new one).
			rc, rrep := v.fsck(true)
			if rc != exitFsckRepaired && rc != exitOK {
				t.Errorf("round %d: fsck --repair exit %d, want %d: %+v", k, rc, exitFsckRepaired, rrep.Problems)
			}
			if c, crep := v.fsck(false); c != exitOK {
				t.Errorf("round %d: fsck after --repair exit %d: %+v", k, c, crep.Problems)
			}
			pid = v.mount()
			got = crashWalk(t, v.mnt, "")
		}
		for p, e := range got {
			e.data = nil
			if e.err != nil && !strings.HasPrefix(p, fsck.LostFound+"/") {
				t.Errorf("round %d: /%s still gives %v after the repair", k, p, e.err)
			}
		}
		v.base = got
		if now, err := os.ReadFile(filepath.Join(v.lower, config.FileName)); err != nil || !bytes.Equal(now, v.config) {
			t.Fatalf("round %d: the config changed (%v)", k, err)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	v.umount()
	if c, rep := v.fsck(false); c != exitOK {
		t.Errorf("final fsck exit %d: %+v", c, rep.Problems)
	}
	var kinds []string
	for _, k := range sortedKeys(v.findings) {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v.findings[k]))
	}
	t.Logf("%s: %d rounds (%d kill -9, %d umount --lazy) in %v; %d completed ops verified, %d ops in flight at a kill (%d left a torn file), "+
		"%d fsynced files verified, %d file reads / %d MiB read back; fsck findings: %v",
		cipher, v.rounds, v.kills, v.lazies, time.Since(start).Round(time.Millisecond), v.ops, v.pending, v.torn,
		v.fsyncsChecked, v.filesChecked, v.bytesChecked>>20, kinds)
}

// TestCrashLeftovers builds, in LOWER, what an interruption between the
// steps of a multi-step operation leaves (FORMAT.md §7), and checks what
// the mount shows of each, what fsck reports, and that --repair clears it.
func TestCrashLeftovers(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "leftovers")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", append([]string{"mount", "-b", "-q", "--passfile", pf}, append(transportArgs(), lower, mnt)...)...).expectExit(t, 0, "mount")
	requireTestTransport(t, mnt)

	// Each entry is made alone, so that the lower names it adds are its.
	added := func(fn func()) []string {
		t.Helper()
		before, _ := os.ReadDir(lower)
		fn()
		after, _ := os.ReadDir(lower)
		had := map[string]bool{}
		for _, e := range before {
			had[e.Name()] = true
		}
		var names []string
		for _, e := range after {
			if !had[e.Name()] {
				names = append(names, e.Name())
			}
		}
		return names // sorted: an entry before its ".name" sidecar
	}
	write := func(name string, data []byte) func() {
		return func() {
			if err := os.WriteFile(filepath.Join(mnt, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mkdir := func(name string) func() {
		return func() {
			if err := os.Mkdir(filepath.Join(mnt, name), 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	torn := crashData(42, 3*crashExtent+100)
	long1, long2 := "one-"+strings.Repeat("l", 200), "two-"+strings.Repeat("l", 200)
	hdr := added(write("hdr", []byte("first write")))
	noIV := added(mkdir("noiv"))
	emptyIV := added(mkdir("emptyiv"))
	orphan := added(write(long1, []byte("one")))
	hidden := added(write(long2, []byte("two")))
	tornLower := added(write("torn", torn))
	for what, n := range map[string]int{"hdr": len(hdr), "noiv": len(noIV), "emptyiv": len(emptyIV),
		"long1": len(orphan), "long2": len(hidden), "torn": len(tornLower)} {
		want := 1
		if strings.HasPrefix(what, "long") {
			want = 2
		}
		if n != want {
			t.Fatalf("%s added %d lower entries, want %d", what, n, want)
		}
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	do := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// First write: the header, not the data.
	do(os.Truncate(filepath.Join(lower, hdr[0]), 32))
	// Mkdir: the directory, not its IV; or the IV file, not its bytes.
	do(os.Remove(filepath.Join(lower, noIV[0], ".twincrypt.diriv")))
	do(os.Truncate(filepath.Join(lower, emptyIV[0], ".twincrypt.diriv"), 0))
	// Unlink of a long name: the entry, not the sidecar.
	do(os.Remove(filepath.Join(lower, orphan[0])))
	// Rename over a long name: its sidecar truncated, not rewritten.
	do(os.Truncate(filepath.Join(lower, hidden[1]), 0))
	// Machine crash: a page of extent 1 that never reached the disk.
	f, err := os.OpenFile(filepath.Join(lower, tornLower[0]), os.O_WRONLY, 0)
	do(err)
	_, err = f.WriteAt(make([]byte, 64), 32+crashExtent+1024)
	do(err)
	do(f.Close())

	code, rep := (&crashVolume{t: t, pf: pf, lower: lower}).fsck(false)
	if code != exitFsckProblems {
		t.Errorf("fsck exit %d, want %d", code, exitFsckProblems)
	}
	found := map[string]fsck.Kind{}
	for _, p := range rep.Problems {
		found[p.Lower] = p.Kind
	}
	want := map[string]fsck.Kind{
		noIV[0]: fsck.DirIVMissing, emptyIV[0]: fsck.DirIVDamaged, orphan[1]: fsck.SidecarOrphaned,
		hidden[0]: fsck.SidecarMismatch, tornLower[0]: fsck.TornExtent,
	}
	if fmt.Sprint(found) != fmt.Sprint(want) {
		t.Errorf("fsck found %v, want %v", found, want)
	}

	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if data, err := os.ReadFile(filepath.Join(mnt, "hdr")); err != nil || len(data) != 0 {
		t.Errorf("a header-only file reads %q, %v; want empty", data, err)
	}
	if ents, err := os.ReadDir(filepath.Join(mnt, "noiv")); err != nil || len(ents) != 0 {
		t.Errorf("an empty directory without IV lists %v, %v; want empty", ents, err)
	}
	if _, err := os.Stat(filepath.Join(lower, noIV[0], ".twincrypt.diriv")); err != nil {
		t.Errorf("listing it did not give it a new IV: %v", err)
	}
	// An empty directory whose IV write was torn (an empty IV file) is
	// healed like one without IV: nothing in it depends on the IV.
	if ents, err := os.ReadDir(filepath.Join(mnt, "emptyiv")); err != nil || len(ents) != 0 {
		t.Errorf("an empty directory with an empty IV file lists %v, %v; want empty", ents, err)
	}
	if fi, err := os.Stat(filepath.Join(lower, emptyIV[0], ".twincrypt.diriv")); err != nil || fi.Size() != 16 {
		t.Errorf("listing it did not give it a new IV: %v", err)
	}
	// Neither long name is listed. (A lookup by name still finds the
	// entry whose sidecar is empty: it needs only the name's hash.)
	ents, err := os.ReadDir(mnt)
	do(err)
	var listed []string
	for _, e := range ents {
		listed = append(listed, e.Name())
	}
	if got := strings.Join(listed, " "); got != "emptyiv hdr noiv torn" {
		t.Errorf("root lists %q, want %q", got, "emptyiv hdr noiv torn")
	}
	if _, err := os.Lstat(filepath.Join(mnt, long1)); !os.IsNotExist(err) {
		t.Errorf("the unlinked long name: %v, want ENOENT", err)
	}
	data, err := os.ReadFile(filepath.Join(mnt, "torn"))
	if err != nil || len(data) != len(torn) {
		t.Fatalf("torn file: %d bytes, %v", len(data), err)
	}
	for i := range data {
		if e := i / crashExtent; data[i] != torn[i] && e != 1 {
			t.Fatalf("torn file differs at byte %d, outside the torn extent 1", i)
		}
	}
	if bytes.Equal(data, torn) {
		t.Error("torn extent reads as the original data")
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	v := &crashVolume{t: t, pf: pf, lower: lower}
	if code, rep := v.fsck(true); code != exitFsckRepaired {
		t.Errorf("fsck --repair exit %d, want %d: %+v", code, exitFsckRepaired, rep.Problems)
	}
	if code, rep := v.fsck(false); code != exitOK {
		t.Errorf("fsck after --repair exit %d: %+v", code, rep.Problems)
	}
	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount after repair")
	if ents, err := os.ReadDir(filepath.Join(mnt, "emptyiv")); err != nil || len(ents) != 0 {
		t.Errorf("repaired directory lists %v, %v", ents, err)
	}
	// The hidden entry, named by its lower name, keeps its content.
	if data, err := os.ReadFile(filepath.Join(mnt, fsck.LostFound, hidden[0])); err != nil || string(data) != "two" {
		t.Errorf("/lost+found/%s: %q, %v", hidden[0], data, err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, fsck.LostFound, "torn")); err != nil {
		t.Errorf("/lost+found/torn: %v", err)
	}
}
