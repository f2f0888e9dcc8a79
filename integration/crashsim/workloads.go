package crashsim

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// longName is a name whose encrypted form is longer than 255 bytes: a
// long name with a sidecar on the encrypted-names variants.
func longName(tag string) string {
	return tag + "-" + strings.Repeat("a-rather-long-name-", 10) + tag
}

func data(seed, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(int64(seed))).Read(b)
	return b
}

// makeBystanders fills keep/ with files the workloads never touch: after
// any crash they must read as before, byte for byte.
func makeBystanders(e *Env) error {
	if err := os.MkdirAll(e.Path("keep/sub"), 0755); err != nil {
		return err
	}
	for i, f := range []struct {
		name string
		size int
	}{{"empty", 0}, {"small", 100}, {"page", 4096}, {"big", 3*4096 + 123}, {longName("keep"), 5000}, {"sub/deep", 9000}} {
		if err := e.WriteFileSync("keep/"+f.name, data(1000+i, f.size)); err != nil {
			return err
		}
	}
	if err := os.Symlink("small", e.Path("keep/link")); err != nil {
		return err
	}
	if err := os.Symlink(strings.Repeat("long-target/", 30), e.Path("keep/longlink")); err != nil {
		return err
	}
	if err := unix.Setxattr(e.Path("keep/small"), "user.crashsim", []byte("bystander"), 0); err != nil {
		return err
	}
	return nil
}

// Workloads are the application patterns of issue #15.
var Workloads = []Workload{
	{Name: "atomic-replace", Setup: atomicReplaceSetup, Run: atomicReplace},
	{Name: "append-log", Run: appendLog},
	{Name: "sqlite-wal", Run: func(e *Env) error { return sqliteRun(e, "WAL") }},
	{Name: "sqlite-rollback", Run: func(e *Env) error { return sqliteRun(e, "DELETE") }},
	{Name: "git-commit", Setup: gitSetup, Run: gitCommit},
	{Name: "untar-sync", Setup: untarSetup, Run: untarSync},
}

// --- atomic replace: write tmp, fsync, rename over, fsync the directory.

var (
	arTarget = WorkDir + "/" + longName("config") + ".json"
	arTmp    = WorkDir + "/" + longName("config") + ".json.tmp"
)

const arVersions = 3

func arVersion(k int) []byte { return data(2000+k, 5000+k*700) }

func atomicReplaceSetup(e *Env) error {
	if err := e.WriteFileSync(arTarget, arVersion(0)); err != nil {
		return err
	}
	return e.FsyncDir(WorkDir)
}

func atomicReplace(e *Env) error {
	durable := []int{0} // durable[k]: from where version k is the durable one
	e.Durable(arTarget, arVersion(0))
	for k := 1; k <= arVersions; k++ {
		if err := e.WriteFileSync(arTmp, arVersion(k)); err != nil {
			return err
		}
		e.Until(arTarget)
		if err := os.Rename(e.Path(arTmp), e.Path(arTarget)); err != nil {
			return err
		}
		if err := e.FsyncDir(WorkDir); err != nil {
			return err
		}
		durable = append(durable, e.Mark())
		e.Durable(arTarget, arVersion(k))
	}
	// The application's promise: the file is always one whole version,
	// never older than the last one whose rename was made durable.
	e.Check("atomic replace", func(mnt string, crash int) error {
		got, err := os.ReadFile(filepath.Join(mnt, arTarget))
		if err != nil {
			return err
		}
		lo := 0
		for k, p := range durable {
			if p <= crash {
				lo = k
			}
		}
		for k := lo; k <= arVersions; k++ {
			if bytes.Equal(got, arVersion(k)) {
				return nil
			}
		}
		return fmt.Errorf("%d bytes, not one of versions %d..%d", len(got), lo, arVersions)
	})
	return nil
}

// --- append-only log: append a record, fsync, repeat.

var appendSizes = []int{700, 3000, 5000, 123, 4096, 2500}

func appendLog(e *Env) error {
	path := WorkDir + "/" + longName("journal") + ".log"
	var all []byte
	for i, n := range appendSizes {
		all = append(all, data(3000+i, n)...)
	}
	f, err := os.OpenFile(e.Path(path), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	if err := e.FsyncDir(WorkDir); err != nil {
		return err
	}
	created := e.Mark()
	type point struct{ pos, n int }
	var durable []point
	off := 0
	for _, n := range appendSizes {
		if _, err := f.Write(all[off : off+n]); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		off += n
		durable = append(durable, point{e.Mark(), off})
	}
	e.Check("append-only log", func(mnt string, crash int) error {
		got, err := os.ReadFile(filepath.Join(mnt, path))
		if crash < created {
			if os.IsNotExist(err) {
				return nil
			}
		}
		if err != nil {
			return err
		}
		want := 0
		for _, d := range durable {
			if d.pos <= crash {
				want = d.n
			}
		}
		if len(got) < want || !bytes.Equal(got[:want], all[:want]) {
			return fmt.Errorf("%d bytes; the first %d fsynced bytes are not intact (first difference at %d)", len(got), want, firstDiff(got, all[:want]))
		}
		if len(got) > len(all) {
			return fmt.Errorf("%d bytes, longer than all %d written", len(got), len(all))
		}
		return nil
	})
	return nil
}

// --- SQLite (the sqlite3 CLI): one transaction per run, synchronous=FULL.

const sqliteTxns, sqliteRows = 4, 3

func sqlite(ctx context.Context, db, script string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sqlite3", "-batch", "-bail", db)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("sqlite3: %v: %s", err, out)
	}
	return string(out), nil
}

func sqliteRun(e *Env, mode string) error {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return fmt.Errorf("sqlite3 is not installed (Debian package sqlite3)")
	}
	db := WorkDir + "/" + longName("db") + ".sqlite"
	committed := []int{}
	for k := 1; k <= sqliteTxns; k++ {
		var s strings.Builder
		// FULL makes a WAL commit durable; a rollback-journal commit is
		// the journal's unlink, durable only with EXTRA (the directory is
		// synced after it), as SQLite documents.
		sync := "FULL"
		if mode != "WAL" {
			sync = "EXTRA"
		}
		fmt.Fprintf(&s, "PRAGMA journal_mode=%s;\nPRAGMA synchronous=%s;\n", mode, sync)
		s.WriteString("CREATE TABLE IF NOT EXISTS t(txn INTEGER, i INTEGER, v BLOB);\nBEGIN;\n")
		for i := 0; i < sqliteRows; i++ {
			fmt.Fprintf(&s, "INSERT INTO t VALUES (%d, %d, randomblob(%d));\n", k, i, 1500+900*i)
		}
		if k > 1 {
			// An update of an earlier transaction's rows: pages rewritten.
			fmt.Fprintf(&s, "UPDATE t SET v = randomblob(2000) WHERE txn = %d;\n", k-1)
		}
		s.WriteString("COMMIT;\n")
		if _, err := sqlite(context.Background(), e.Path(db), s.String()); err != nil {
			return err
		}
		committed = append(committed, e.Mark())
	}
	e.Check("sqlite "+mode, func(mnt string, crash int) error {
		want := 0
		for k, p := range committed {
			if p <= crash {
				want = k + 1
			}
		}
		p := filepath.Join(mnt, db)
		if _, err := os.Stat(p); os.IsNotExist(err) && want == 0 {
			return nil
		}
		out, err := sqlite(context.Background(), p, "PRAGMA integrity_check;\n")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "ok" {
			return fmt.Errorf("integrity_check: %s", truncate(out, 300))
		}
		out, err = sqlite(context.Background(), p, "SELECT txn, count(*) FROM t GROUP BY txn ORDER BY txn;\n")
		if err != nil {
			if want == 0 && strings.Contains(out, "no such table") {
				return nil
			}
			return err
		}
		got := 0
		for _, line := range strings.Fields(out) {
			f := strings.Split(line, "|")
			txn, _ := strconv.Atoi(f[0])
			if len(f) != 2 || txn != got+1 || f[1] != strconv.Itoa(sqliteRows) {
				return fmt.Errorf("transactions not whole or not in order: %q", out)
			}
			got = txn
		}
		if got < want {
			return fmt.Errorf("%d transactions present, %d committed", got, want)
		}
		return nil
	})
	return nil
}

// --- git commit, with core.fsync=all.

func git(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent", "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func gitSetup(e *Env) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("git is not installed (Debian package git)")
	}
	dir := e.Path(WorkDir)
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"config", "user.name", "crashsim"}, {"config", "user.email", "crashsim@example.org"},
		{"config", "core.fsync", "all"}, {"config", "core.fsyncMethod", "fsync"}, {"config", "gc.auto", "0"},
	} {
		if _, err := git(dir, args...); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), data(4000, 3000), 0644); err != nil {
		return err
	}
	if _, err := git(dir, "add", "-A"); err != nil {
		return err
	}
	if _, err := git(dir, "commit", "-q", "-m", "first"); err != nil {
		return err
	}
	return nil
}

func gitCommit(e *Env) error {
	dir := e.Path(WorkDir)
	head, err := git(dir, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	commits := []string{head}
	for k := 1; k <= 2; k++ {
		if err := os.WriteFile(filepath.Join(dir, "README"), data(4000+k, 3000+k*1000), 0644); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "src"), 0755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "src", longName(fmt.Sprint("file", k))), data(4100+k, 6000), 0644); err != nil {
			return err
		}
		if _, err := git(dir, "add", "-A"); err != nil {
			return err
		}
		if _, err := git(dir, "commit", "-q", "-m", fmt.Sprint("commit ", k)); err != nil {
			return err
		}
		h, err := git(dir, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		commits = append(commits, h)
		e.Mark()
	}
	e.Check("git fsck and HEAD", func(mnt string, crash int) error {
		d := filepath.Join(mnt, WorkDir)
		if out, err := git(d, "fsck", "--no-progress", "--no-dangling"); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		h, err := git(d, "rev-parse", "HEAD")
		if err != nil {
			return err
		}
		for _, c := range commits {
			if h == c {
				return nil
			}
		}
		return fmt.Errorf("HEAD %s is none of the commits made", h)
	})
	return nil
}

// --- untar, then sync(1); a second untar is left unsynced.

type tarEntry struct {
	name, link string
	size       int
	dir, hard  bool
}

var untarEntries = [][]tarEntry{
	{
		{name: "a", dir: true}, {name: "a/b", dir: true},
		{name: "a/empty"}, {name: "a/one", size: 1}, {name: "a/page", size: 4096}, {name: "a/page+1", size: 4097},
		{name: "a/b/big", size: 20000}, {name: "a/" + longName("tar"), size: 3000},
		{name: "a/sym", link: "page"}, {name: "a/hard", link: "a/one", hard: true},
	},
	{
		{name: "c", dir: true}, {name: "c/x", size: 7000}, {name: "c/" + longName("tar2"), size: 100}, {name: "c/y", size: 4096},
	},
}

func writeTar(path string, ents []tarEntry, seed int) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, en := range ents {
		h := &tar.Header{Name: en.name, Mode: 0644, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		switch {
		case en.dir:
			h.Typeflag, h.Mode = tar.TypeDir, 0755
		case en.hard:
			h.Typeflag, h.Linkname = tar.TypeLink, en.link
		case en.link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, en.link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(en.size)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(data(seed+i, en.size))
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0644)
}

func untarSetup(e *Env) error {
	for i, ents := range untarEntries {
		if err := writeTar(filepath.Join(e.Scratch, fmt.Sprint(i, ".tar")), ents, 5000+100*i); err != nil {
			return err
		}
	}
	return nil
}

func untarSync(e *Env) error {
	dir := e.Path(WorkDir)
	for i, ents := range untarEntries {
		cmd := exec.Command("tar", "-xf", filepath.Join(e.Scratch, fmt.Sprint(i, ".tar")), "-C", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("tar: %v: %s", err, out)
		}
		if i > 0 {
			break // the second one is not synced
		}
		e.Sync()
		for j, en := range ents {
			p := WorkDir + "/" + en.name
			switch {
			case en.dir:
			case en.hard:
				e.Durable(p, data(5000+100*i+indexOf(ents, en.link), ents[indexOf(ents, en.link)].size))
			case en.link != "":
				e.DurableLink(p, en.link)
			default:
				e.Durable(p, data(5000+100*i+j, en.size))
			}
		}
	}
	return nil
}

func indexOf(ents []tarEntry, name string) int {
	for i, en := range ents {
		if en.name == name {
			return i
		}
	}
	return -1
}
