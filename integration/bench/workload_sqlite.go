package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sqliteRows is the number of rows sqlite inserts.
var sqliteRows = scale[int]{tiny: 2000, small: 20000, dflt: 100000, large: 1000000}

// sqliteBatch is the number of rows per transaction.
const sqliteBatch = 100

// SQLite is a real database in one file: python3's sqlite3 module inserts
// rows in transactions of 100 into a WAL database (journal_mode=WAL,
// synchronous=NORMAL: a commit appends to the -wal file, checkpoints
// write the database), then a second process, after the files' cached
// pages are dropped, counts the rows, runs PRAGMA integrity_check and
// hashes every row in order against the hash computed here.
//
// The measured part is the insert phase as Python times it (from connect
// to close, which checkpoints), and its CPU is Python's own rusage over
// the same span: the interpreter's start (through a version manager's
// shim it can take 100 ms) is left out. Without python3 and its sqlite3
// module the workload is skipped.
type SQLite struct {
	python string // found by Prepare
}

func (*SQLite) Name() string { return "sqlite" }

func (*SQLite) Describe() string {
	return "python3 sqlite3: inserts in transactions of 100 into a WAL database, then integrity_check and a row hash"
}

// sqliteScript is the Python side. argv: mode, database, rows, batch.
// Row i (from 1) is (i, i*2654435761 mod 2^32, "row-%08d" % i,
// sha256("twincrypt-%d" % i) * 4); sqliteRowsHash computes the same.
const sqliteScript = `
import hashlib, json, resource, sqlite3, sys, time
mode, path, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def row(i):
    return (i, (i * 2654435761) % 4294967296, "row-%08d" % i, hashlib.sha256(b"twincrypt-%d" % i).digest() * 4)
if mode == "insert":
    c0, t0 = cpu(), time.perf_counter()
    con = sqlite3.connect(path, isolation_level=None)
    jm = con.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k INTEGER NOT NULL, name TEXT NOT NULL, payload BLOB NOT NULL)")
    con.execute("CREATE INDEX t_k ON t (k)")
    for start in range(1, n + 1, batch):
        con.execute("BEGIN")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [row(i) for i in range(start, min(start + batch, n + 1))])
        con.execute("COMMIT")
    con.close()
    print(json.dumps({"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "journal_mode": jm}))
else:
    con = sqlite3.connect(path)
    count = con.execute("SELECT count(*) FROM t").fetchone()[0]
    check = [r[0] for r in con.execute("PRAGMA integrity_check")]
    sum_k = con.execute("SELECT sum(k) FROM t").fetchone()[0]
    h = hashlib.sha256()
    for i, k, name, payload in con.execute("SELECT id, k, name, payload FROM t ORDER BY id"):
        h.update(b"%d|%d|%s|" % (i, k, name.encode()) + payload)
    con.close()
    print(json.dumps({"count": count, "integrity": check, "sum_k": sum_k, "hash": h.hexdigest()}))
`

// sqliteRowsHash is what the verify mode's hash must be for n rows.
func sqliteRowsHash(n int) (hash string, sumK int64) {
	h := sha256.New()
	var line []byte
	for i := 1; i <= n; i++ {
		k := int64(uint64(i) * 2654435761 % (1 << 32))
		sumK += k
		p := sha256.Sum256(fmt.Appendf(nil, "twincrypt-%d", i))
		line = fmt.Appendf(line[:0], "%d|%d|row-%08d|", i, k, i)
		for range 4 {
			line = append(line, p[:]...)
		}
		h.Write(line)
	}
	return hex.EncodeToString(h.Sum(nil)), sumK
}

// findPython returns python3 when it has the sqlite3 module.
func findPython(ctx context.Context) (string, error) {
	p := lookProgram("python3", false)
	if p == "" {
		return "", fmt.Errorf("%w: no python3 sqlite3 (python3 not installed)", ErrSkipped)
	}
	// The interpreter itself, not a version manager's shim (pyenv's
	// takes a good fraction of a second to start it).
	var out bytes.Buffer
	if _, _, err := (shellCmd{dir: "/", script: `exec "$1" -c "import sqlite3, sys; print(sys.executable)"`,
		args: []string{p}, stdout: &out}).run(ctx); err != nil {
		return "", fmt.Errorf("%w: no python3 sqlite3 (%v)", ErrSkipped, err)
	}
	if exe := strings.TrimSpace(out.String()); filepath.IsAbs(exe) {
		if _, err := os.Stat(exe); err == nil {
			return exe, nil
		}
	}
	return p, nil
}

func (w *SQLite) Prepare(ctx context.Context, _ *Env) error {
	p, err := findPython(ctx)
	if err != nil {
		return err
	}
	w.python = p
	return nil
}

func (w *SQLite) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	if w.python == "" {
		if err := w.Prepare(ctx, env); err != nil {
			return Result{}, err
		}
	}
	n := sqliteRows.pick(env.Size)
	const db = "bench.db"
	var out bytes.Buffer
	args := []string{w.python, "-c", sqliteScript, "insert", db, strconv.Itoa(n), strconv.Itoa(sqliteBatch)}
	_, _, err := shellCmd{dir: dir, script: `exec "$@"`, args: args, stdout: &out}.run(ctx)
	if err != nil {
		return Result{}, err
	}
	var ins struct {
		Wall, CPU   float64
		JournalMode string `json:"journal_mode"`
	}
	if err := json.Unmarshal(out.Bytes(), &ins); err != nil {
		return Result{}, fmt.Errorf("sqlite insert: parse %q: %w", out.String(), err)
	}
	if ins.JournalMode != "wal" {
		return Result{}, fmt.Errorf("sqlite: journal_mode is %q, want wal", ins.JournalMode)
	}
	verifyHook("sqlite.inserted", dir)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if _, err := os.Stat(filepath.Join(dir, db+suffix)); err == nil {
			if err := dropPathCache(filepath.Join(dir, db+suffix)); err != nil {
				return Result{}, err
			}
		}
	}
	out.Reset()
	args[3] = "verify"
	if _, _, err := (shellCmd{dir: dir, script: `exec "$@"`, args: args, stdout: &out}).run(ctx); err != nil {
		return Result{}, fmt.Errorf("verify: %w", err)
	}
	var ver struct {
		Count     int
		Integrity []string
		SumK      int64 `json:"sum_k"`
		Hash      string
	}
	if err := json.Unmarshal(out.Bytes(), &ver); err != nil {
		return Result{}, fmt.Errorf("sqlite verify: parse %q: %w", out.String(), err)
	}
	wantHash, wantSum := sqliteRowsHash(n)
	switch {
	case len(ver.Integrity) != 1 || ver.Integrity[0] != "ok":
		return Result{}, fmt.Errorf("verify: PRAGMA integrity_check: %q: %w", ver.Integrity, errContent)
	case ver.Count != n:
		return Result{}, fmt.Errorf("verify: %d rows, inserted %d: %w", ver.Count, n, errContent)
	case ver.SumK != wantSum:
		return Result{}, fmt.Errorf("verify: sum(k) is %d, want %d: %w", ver.SumK, wantSum, errContent)
	case ver.Hash != wantHash:
		return Result{}, fmt.Errorf("verify: hash of the rows in order is %s, want %s: %w", ver.Hash, wantHash, errContent)
	}
	// Bytes is what the database holds at the end; the WAL moved about as
	// much again (each page is written to the WAL, then checkpointed).
	var bytesOnDisk int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(filepath.Join(dir, db+suffix)); err == nil {
			bytesOnDisk += fi.Size()
		}
	}
	if err := removeAndCheck(dir, db, db+"-wal", db+"-shm", db+"-journal"); err != nil {
		return Result{}, err
	}
	wall := time.Duration(ins.Wall * float64(time.Second))
	return Result{
		Wall: wall, WorkloadCPU: time.Duration(ins.CPU * float64(time.Second)),
		Ops: int64(n), Bytes: bytesOnDisk, Verified: true,
		Metrics: map[string]float64{"inserts_per_s": perSecond(int64(n), wall), "commits_per_s": perSecond(int64((n+sqliteBatch-1)/sqliteBatch), wall)},
		Note:    "python3 sqlite3",
	}, nil
}
