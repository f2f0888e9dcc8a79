package integration

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestApps runs real programs on a fresh mount of each variant: the two
// encrypted ones and the passthrough twin. Each application works in its
// own directory of the mount; at the end of each, the lower directory of
// the encrypted variants must not show the plaintext names it used.
func TestApps(t *testing.T) {
	RequireFUSE(t)
	apps := []struct {
		name string
		fn   func(*testing.T, *Volume)
	}{
		{"tar", testTar},
		{"git", testGit},
		{"go build", testGoBuild},
		{"gcc", testGCC},
		{"sqlite", testSQLite},
		{"mmap", testMmap},
		{"gzip", testGzip},
		{"cp -a", testCpA},
	}
	for _, v := range Variants {
		t.Run(v.Name, func(t *testing.T) {
			vol := MountVariant(t, v)
			for _, app := range apps {
				t.Run(app.name, func(t *testing.T) {
					RequireMounted(t, vol.Mnt)
					app.fn(t, vol)
				})
			}
			t.Run("lower consistent", func(t *testing.T) {
				checkLowerConsistent(t, vol)
			})
		})
	}
}

// goRoot returns the GOROOT of the go command, or of this test binary.
func goRoot(t *testing.T) string {
	if _, err := exec.LookPath("go"); err == nil {
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			if r := strings.TrimSpace(string(out)); r != "" {
				return r
			}
		}
	}
	// runtime.GOROOT is deprecated: where the test binary was built is
	// not where a toolchain is. GOROOT is set by the go command.
	return os.Getenv("GOROOT")
}

// testTar extracts a real source tree into the mount, compares it with the
// original, archives it again from the mount and removes it.
func testTar(t *testing.T, vol *Volume) {
	needProgs(t, "tar", "diff", "rm")
	srcParent := filepath.Join(goRoot(t), "src", "net")
	src := filepath.Join(srcParent, "http")
	if _, err := os.Stat(filepath.Join(src, "server.go")); err != nil {
		t.Skipf("no Go source tree to archive: %v", err)
	}
	tmp := t.TempDir()
	orig := filepath.Join(tmp, "orig.tar")
	runIn(t, tmp, nil, "tar", "--sort=name", "-C", srcParent, "-cf", orig, "http")

	work := mustMkdir(t, filepath.Join(vol.Mnt, "tar"))
	runIn(t, work, nil, "tar", "-xf", orig)
	// What is compared next comes from the lower directory, not from
	// pages the kernel kept from the writes.
	vol.Remount(t)
	runIn(t, work, nil, "diff", "-r", "--no-dereference", src, filepath.Join(work, "http"))

	// Archive it again from the mount, onto the mount, in the same member
	// order: the member lists (with modes, owners, sizes and times) must
	// be identical, and so must the archives themselves.
	back := filepath.Join(work, "back.tar")
	runIn(t, work, nil, "tar", "--sort=name", "-cf", back, "http")
	wantList := runIn(t, tmp, nil, "tar", "--full-time", "-tvf", orig)
	gotList := runIn(t, tmp, nil, "tar", "--full-time", "-tvf", back)
	if gotList != wantList {
		t.Errorf("tar listing of the tree re-archived from the mount differs from the original: %s", firstDiff(wantList, gotList))
	}
	if n := strings.Count(wantList, "\n"); n < 100 {
		t.Errorf("the source tarball lists only %d members; expected a real tree", n)
	}
	a, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("the archive made from the mount (%d bytes) differs from the original (%d bytes)", len(b), len(a))
	}

	checkNamesHidden(t, vol, "tar", "http", "httptest", "httputil", "cookiejar", "server.go", "transport.go", "back.tar")
	checkContentHidden(t, vol, []byte("The Go Authors. All rights reserved."))

	runIn(t, work, nil, "rm", "-rf", "http")
	if err := os.Remove(back); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(work); err != nil || len(ents) != 0 {
		t.Errorf("after rm -rf the directory still lists %d entries (%v)", len(ents), err)
	}
	if err := os.Remove(work); err != nil {
		t.Errorf("rmdir after rm -rf: %v", err)
	}
}

// gitEnv makes git reproducible: fixed identity and dates (so commit ids
// are the same on any filesystem), no system or user config, no
// background maintenance that could outlive the test, fsync everything.
var gitEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_AUTHOR_NAME=Twin Crypt", "GIT_AUTHOR_EMAIL=twin@example.com", "GIT_AUTHOR_DATE=2024-01-02T03:04:05Z",
	"GIT_COMMITTER_NAME=Twin Crypt", "GIT_COMMITTER_EMAIL=twin@example.com", "GIT_COMMITTER_DATE=2024-01-02T03:04:05Z",
	"GIT_CONFIG_COUNT=5",
	"GIT_CONFIG_KEY_0=gc.autoDetach", "GIT_CONFIG_VALUE_0=false",
	"GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
	"GIT_CONFIG_KEY_2=core.fsync", "GIT_CONFIG_VALUE_2=all",
	"GIT_CONFIG_KEY_3=init.defaultBranch", "GIT_CONFIG_VALUE_3=main",
	"GIT_CONFIG_KEY_4=core.fsyncMethod", "GIT_CONFIG_VALUE_4=fsync",
}

// gitScenario runs a fixed git session in dir and returns a transcript of
// everything that must not depend on the filesystem.
func gitScenario(t *testing.T, dir string) string {
	t.Helper()
	git := func(args ...string) string {
		t.Helper()
		return runIn(t, dir, gitEnv, "git", args...)
	}
	repo := filepath.Join(dir, "repo")
	var tr strings.Builder
	note := func(label, s string) { fmt.Fprintf(&tr, "== %s\n%s\n", label, s) }

	git("init", "-q", "repo")
	mustWrite(t, filepath.Join(repo, "README.md"), []byte("# twincrypt git test\n\nfirst version\n"), 0o644)
	mustWrite(t, filepath.Join(repo, "src", "main.c"), []byte("#include \"util.h\"\nint main(void) { return util(); }\n"), 0o644)
	mustWrite(t, filepath.Join(repo, "src", "util.h"), []byte("static inline int util(void) { return 0; }\n"), 0o644)
	mustWrite(t, filepath.Join(repo, "script.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	mustWrite(t, filepath.Join(repo, "data", "blob.bin"), randBytes(7, 300<<10), 0o644)
	for i := 0; i < 40; i++ {
		mustWrite(t, filepath.Join(repo, "docs", fmt.Sprintf("file-%02d.txt", i)), bytes.Repeat([]byte(fmt.Sprintf("doc %d\n", i)), i*10+1), 0o644)
	}
	if err := os.Symlink("README.md", filepath.Join(repo, "link")); err != nil {
		t.Fatal(err)
	}
	git("-C", "repo", "add", "-A")
	git("-C", "repo", "commit", "-q", "-m", "first commit")

	// Edit, delete, add, rename, chmod, and change a binary file.
	mustWrite(t, filepath.Join(repo, "README.md"), []byte("# twincrypt git test\n\nsecond version\nwith one more line\n"), 0o644)
	if err := os.Remove(filepath.Join(repo, "docs", "file-03.txt")); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(repo, "docs", "new.txt"), []byte("new file\n"), 0o644)
	git("-C", "repo", "mv", "src/util.h", "src/util2.h")
	mustWrite(t, filepath.Join(repo, "script.sh"), []byte("#!/bin/sh\necho hi\n"), 0o644)
	blob := randBytes(7, 300<<10)
	copy(blob[150<<10:], "changed in the middle")
	mustWrite(t, filepath.Join(repo, "data", "blob.bin"), blob, 0o644)

	status := git("-C", "repo", "status", "--porcelain=v1")
	for _, want := range []string{" M README.md", " D docs/file-03.txt", "?? docs/new.txt", "R  src/util.h -> src/util2.h", " M script.sh", " M data/blob.bin"} {
		if !strings.Contains(status, want+"\n") {
			t.Errorf("git status in %s lacks %q:\n%s", dir, want, status)
		}
	}
	note("status", status)
	diff := git("-C", "repo", "diff")
	for _, want := range []string{"+second version", "-first version", "old mode 100755", "new mode 100644", "Binary files a/data/blob.bin and b/data/blob.bin differ"} {
		if !strings.Contains(diff, want) {
			t.Errorf("git diff in %s lacks %q:\n%s", dir, want, clip(diff))
		}
	}
	note("diff", diff)
	git("-C", "repo", "add", "-A")
	git("-C", "repo", "commit", "-q", "-m", "second commit")
	log := git("-C", "repo", "log", "--format=%H %T %s")
	if n := strings.Count(log, "\n"); n != 2 {
		t.Errorf("git log shows %d commits, want 2:\n%s", n, log)
	}
	note("log", log)

	git("-C", "repo", "gc", "-q", "--prune=now")
	git("-C", "repo", "fsck", "--full", "--strict", "--no-progress")
	counts := git("-C", "repo", "count-objects", "-v")
	if !strings.Contains(counts, "count: 0\n") || strings.Contains(counts, "in-pack: 0\n") {
		t.Errorf("after git gc the objects are not packed:\n%s", counts)
	}
	note("show", git("-C", "repo", "show", "--stat", "--format=%H", "HEAD"))
	note("archive", hexSum([]byte(git("-C", "repo", "archive", "--format=tar", "HEAD"))))

	// A local clone hard-links the packed objects.
	git("clone", "-q", "repo", "clone")
	git("-C", "clone", "fsck", "--full", "--strict", "--no-progress")
	note("clone log", git("-C", "clone", "log", "--format=%H %T %s"))
	note("clone status", git("-C", "clone", "status", "--porcelain=v1"))
	got, err := os.ReadFile(filepath.Join(dir, "clone", "data", "blob.bin"))
	if err != nil || !bytes.Equal(got, blob) {
		t.Errorf("the clone's data/blob.bin does not match (%v)", err)
	}
	return tr.String()
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// testGit runs the same git session on a plain temporary directory and on
// the mount; every command must succeed and the transcripts (commit ids,
// status, diff, archive) must be identical.
func testGit(t *testing.T, vol *Volume) {
	needProgs(t, "git")
	want := gitScenario(t, t.TempDir())
	work := mustMkdir(t, filepath.Join(vol.Mnt, "git"))
	got := gitScenario(t, work)
	if got != want {
		t.Errorf("git on the mount behaves differently from git on a plain directory: %s", firstDiff(want, got))
	}
	vol.Remount(t)
	for _, r := range []string{"repo", "clone"} {
		runIn(t, work, gitEnv, "git", "-C", r, "fsck", "--full", "--strict", "--no-progress")
		if st := runIn(t, work, gitEnv, "git", "-C", r, "status", "--porcelain=v1"); st != "" {
			t.Errorf("after remount, git status in %s is not clean:\n%s", r, st)
		}
	}
	checkNamesHidden(t, vol, "git", "repo", "clone", ".git", "objects", "refs", "HEAD", "README.md", "main.c", "blob.bin")
}

// testGoBuild builds a small Go program whose source, output and build
// cache are all on the mount, and runs it from there.
func testGoBuild(t *testing.T, vol *Volume) {
	needProgs(t, "go")
	work := mustMkdir(t, filepath.Join(vol.Mnt, "gobuild"))
	mod := filepath.Join(work, "hello")
	mustWrite(t, filepath.Join(mod, "go.mod"), []byte("module example.com/hello\n\ngo 1.21\n"), 0o644)
	// println needs only the runtime: a cold cache builds ~200 files
	// onto the mount in a few seconds, not the whole standard library.
	mustWrite(t, filepath.Join(mod, "main.go"), []byte("package main\n\nimport \"example.com/hello/greet\"\n\nfunc main() { println(greet.Hello()) }\n"), 0o644)
	greet := func(v int) {
		mustWrite(t, filepath.Join(mod, "greet", "greet.go"),
			[]byte(fmt.Sprintf("// Package greet greets.\npackage greet\n\n// Hello greets.\nfunc Hello() string { return \"hello from twincrypt, version %d\" }\n", v)), 0o644)
	}
	greet(1)
	cache := filepath.Join(work, "gocache")
	gopath := t.TempDir()
	env := []string{"GOCACHE=" + cache, "GOPATH=" + gopath, "GOMODCACHE=" + filepath.Join(gopath, "mod"),
		"GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0", "GOWORK=off", "GOENV=off",
		"TMPDIR=" + mustMkdir(t, filepath.Join(work, "tmp"))}
	bin := filepath.Join(work, "bin", "hello")

	start := time.Now()
	runIn(t, mod, env, "go", "build", "-o", bin, ".")
	t.Logf("cold build with the cache on the mount: %v", time.Since(start).Round(time.Millisecond))
	if out := runStderr(t, work, nil, bin); out != "hello from twincrypt, version 1\n" {
		t.Errorf("running the binary built on the mount: %q", out)
	}

	// Rebuild after an edit: only the two packages of the module may be
	// compiled again, the runtime must come from the cache on the mount.
	greet(2)
	rebuilt := runStderr(t, mod, env, "go", "build", "-v", "-o", bin, ".")
	if strings.Contains(rebuilt, "runtime") || !strings.Contains(rebuilt, "example.com/hello/greet") {
		t.Errorf("incremental build compiled %q; want only the module's packages (the cache on the mount is not being used)", rebuilt)
	}
	if out := runStderr(t, work, nil, bin); out != "hello from twincrypt, version 2\n" {
		t.Errorf("running the rebuilt binary: %q", out)
	}
	// After a remount the cache is read back from the lower directory.
	vol.Remount(t)
	if again := runStderr(t, mod, env, "go", "build", "-v", "-o", bin, "."); again != "" {
		t.Errorf("after remount, a build with nothing changed compiled %q: the cache on the mount did not read back", again)
	}
	runIn(t, mod, env, "go", "vet", "./...")
	checkNamesHidden(t, vol, "gobuild", "gocache", "hello", "main.go", "go.mod", "greet", "greet.go")
}

// testGCC compiles, archives and links a small C program on the mount.
func testGCC(t *testing.T, vol *Volume) {
	needProgs(t, "gcc", "ar")
	work := mustMkdir(t, filepath.Join(vol.Mnt, "gcc"))
	mustWrite(t, filepath.Join(work, "util.h"), []byte("unsigned long checksum(const unsigned char *p, unsigned long n);\n"), 0o644)
	mustWrite(t, filepath.Join(work, "util.c"), []byte(`#include "util.h"
unsigned long checksum(const unsigned char *p, unsigned long n) {
	unsigned long h = 1469598103934665603UL;
	for (unsigned long i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211UL; }
	return h;
}
`), 0o644)
	mustWrite(t, filepath.Join(work, "main.c"), []byte(`#include <stdio.h>
#include "util.h"
static unsigned char buf[100000];
int main(void) {
	for (unsigned long i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 7 + i / 251);
	printf("checksum %016lx\n", checksum(buf, sizeof buf));
	return 0;
}
`), 0o644)
	env := []string{"TMPDIR=" + mustMkdir(t, filepath.Join(work, "tmp"))}
	runIn(t, work, env, "gcc", "-O2", "-Wall", "-Werror", "-c", "util.c", "-o", "util.o")
	runIn(t, work, env, "ar", "rcs", "libutil.a", "util.o")
	runIn(t, work, env, "gcc", "-O2", "-Wall", "-Werror", "-o", "prog", "main.c", "-L.", "-lutil")
	vol.Remount(t)
	got := runIn(t, work, nil, filepath.Join(work, "prog"))

	// The same program built on a plain directory is the reference.
	ref := t.TempDir()
	for _, f := range []string{"util.h", "util.c", "main.c"} {
		b, err := os.ReadFile(filepath.Join(work, f))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(ref, f), b, 0o644)
	}
	runIn(t, ref, nil, "gcc", "-O2", "-o", "prog", "main.c", "util.c")
	if want := runIn(t, ref, nil, filepath.Join(ref, "prog")); got != want || !strings.HasPrefix(got, "checksum ") {
		t.Errorf("the program built on the mount prints %q, the reference %q", got, want)
	}
	checkNamesHidden(t, vol, "gcc", "util.h", "util.c", "main.c", "util.o", "libutil.a", "prog")
}

// sqliteScript is run by python3: create (2000 inserts in 20
// transactions, an update, in a rollback-journal db and a WAL db), verify
// (integrity_check and counts), and crash (commit 500 more rows to the WAL
// db with automatic checkpoints off and exit without closing, so that the
// rows live only in the -wal file).
const sqliteScript = `
import os, sqlite3, sys
mode, d = sys.argv[1], sys.argv[2]
dbs = {"rollback.db": "delete", "wal.db": "wal"}
def expect_rows(name):
    return 2500 if (name == "wal.db" and os.path.exists(os.path.join(d, "crashed"))) else 2000
if mode == "create":
    for name, journal in dbs.items():
        con = sqlite3.connect(os.path.join(d, name))
        got = con.execute("PRAGMA journal_mode=" + journal).fetchone()[0]
        assert got == journal, (name, got)
        con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL, v BLOB)")
        con.execute("CREATE INDEX t_k ON t(k)")
        for tx in range(20):
            with con:
                for i in range(100):
                    n = tx * 100 + i
                    con.execute("INSERT INTO t(k, v) VALUES (?, ?)", ("row-payload-%06d" % n, bytes([n % 251]) * (n % 1500)))
        with con:
            con.execute("UPDATE t SET k = k || '-upd' WHERE id % 7 = 0")
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        con.close()
    print("created")
elif mode == "verify":
    out = []
    for name in dbs:
        con = sqlite3.connect(os.path.join(d, name))
        ic = con.execute("PRAGMA integrity_check").fetchall()
        n, upd, total = con.execute("SELECT count(*), sum(k LIKE '%-upd'), sum(length(v)) FROM t").fetchone()
        jm = con.execute("PRAGMA journal_mode").fetchone()[0]
        out.append("%s %s %s rows=%d upd=%d bytes=%d" % (name, jm, ic[0][0] if len(ic) == 1 else ic, n, upd, total))
        assert ic == [("ok",)], (name, ic)
        assert n == expect_rows(name), (name, n)
        con.close()
    print("\n".join(out))
elif mode == "crash":
    con = sqlite3.connect(os.path.join(d, "wal.db"))
    con.execute("PRAGMA wal_autocheckpoint=0")
    with con:
        for n in range(2000, 2500):
            con.execute("INSERT INTO t(k, v) VALUES (?, ?)", ("row-payload-%06d" % n, b"w" * 100))
    open(os.path.join(d, "crashed"), "w").close()
    sys.stdout.flush()
    os._exit(0)
`

// testSQLite runs sqlite (through python3's sqlite3 module) on the mount:
// a rollback-journal and a WAL database, verified in place and after a
// remount, including a WAL that is only recovered by the next open.
func testSQLite(t *testing.T, vol *Volume) {
	needProgs(t, "python3")
	if out, err := exec.Command("python3", "-c", "import sqlite3").CombinedOutput(); err != nil {
		t.Skipf("python3 has no sqlite3 module: %v %s", err, out)
	}
	script := filepath.Join(t.TempDir(), "db.py")
	mustWrite(t, script, []byte(sqliteScript), 0o644)
	work := mustMkdir(t, filepath.Join(vol.Mnt, "sqlite"))
	py := func(mode string) string { return runIn(t, work, nil, "python3", script, mode, work) }

	if out := py("create"); out != "created\n" {
		t.Fatalf("create: %q", out)
	}
	// The same on a plain directory gives the reference for verify.
	ref := t.TempDir()
	runIn(t, ref, nil, "python3", script, "create", ref)
	want := runIn(t, ref, nil, "python3", script, "verify", ref)
	if got := py("verify"); got != want {
		t.Errorf("verify on the mount:\n%s\nwant (plain directory):\n%s", got, want)
	}

	py("crash")
	runIn(t, ref, nil, "python3", script, "crash", ref)
	if st, err := os.Stat(filepath.Join(work, "wal.db-wal")); err != nil || st.Size() == 0 {
		t.Errorf("after the crash the WAL should hold the last transaction: %v", err)
	}
	checkNamesHidden(t, vol, "sqlite", "rollback.db", "wal.db", "wal.db-wal", "wal.db-shm")
	checkContentHidden(t, vol, []byte("row-payload-"))

	vol.Remount(t)
	want = runIn(t, ref, nil, "python3", script, "verify", ref)
	if got := py("verify"); got != want {
		t.Errorf("verify after remount (WAL recovery):\n%s\nwant (plain directory):\n%s", got, want)
	}
	if !strings.Contains(want, "wal.db wal ok rows=2500") {
		t.Errorf("reference run does not show the recovered WAL rows:\n%s", want)
	}
}

// testGzip compresses and decompresses a 20 MB generated file on the mount.
func testGzip(t *testing.T, vol *Volume) {
	needProgs(t, "gzip", "gunzip", "cmp")
	work := mustMkdir(t, filepath.Join(vol.Mnt, "gzip"))
	big := filepath.Join(work, "big.txt")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	w := bufio.NewWriterSize(f, 1<<20)
	x := uint64(88172645463325252)
	size := 0
	for i := 0; size < 20<<20; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		line := fmt.Sprintf("%08d the quick twincrypt fox %016x jumps %d\n", i, x, x%1000)
		w.WriteString(line)
		h.Write([]byte(line))
		size += len(line)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	sum := h.Sum(nil)

	runIn(t, work, nil, "gzip", "-k", "big.txt")
	runIn(t, work, nil, "gzip", "-t", "big.txt.gz")
	if err := os.Rename(big, filepath.Join(work, "big.orig")); err != nil {
		t.Fatal(err)
	}
	runIn(t, work, nil, "gunzip", "big.txt.gz")
	vol.Remount(t)
	runIn(t, work, nil, "cmp", "big.txt", "big.orig")
	got, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != size || !bytes.Equal(hashOf(got), sum) {
		t.Errorf("big.txt after gzip and gunzip: %d bytes, sha256 %x; want %d bytes, %x", len(got), hashOf(got), size, sum)
	}
	checkNamesHidden(t, vol, "gzip", "big.txt", "big.orig")
	checkContentHidden(t, vol, []byte("the quick twincrypt fox"))
	for _, n := range []string{"big.txt", "big.orig"} {
		if err := os.Remove(filepath.Join(work, n)); err != nil {
			t.Error(err)
		}
	}
}

func hashOf(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

// testCpA copies a tree with every kind of entry into the mount with
// cp -a and checks content (cmp), types, modes, owners, times, symlink
// targets and hard links.
func testCpA(t *testing.T, vol *Volume) {
	needProgs(t, "cp", "cmp")
	src := filepath.Join(t.TempDir(), "tree")
	long := strings.Repeat("L", 250) + ".long"
	files := []struct {
		path string
		size int
		mode os.FileMode
	}{
		{"a.txt", 100, 0o644}, {"empty", 0, 0o644}, {"exe.sh", 50, 0o755}, {"private", 4097, 0o600},
		{"readonly", 4096, 0o444}, {"big.bin", 1<<20 + 7, 0o644}, {"sub/file", 17, 0o640},
		{"sub/nested/deep.txt", 70000, 0o640}, {long, 200, 0o644}, {"sub/" + long, 4095, 0o644}, {"hard1", 10000, 0o644},
	}
	for i, f := range files {
		mustWrite(t, filepath.Join(src, f.path), randBytes(uint64(100+i), f.size), f.mode)
	}
	mustMkdir(t, filepath.Join(src, "emptydir"))
	for _, l := range [][2]string{{"a.txt", "link-rel"}, {"does/not/exist", "link-dangling"}, {"sub", "link-dir"}, {"../" + long, "sub/link-up"}} {
		if err := os.Symlink(l[0], filepath.Join(src, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(src, "hard1"), filepath.Join(src, "sub", "hard2")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Distinct times with nanoseconds, children before their directories.
	var paths []string
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	base := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for i := len(paths) - 1; i >= 0; i-- {
		ts := base.Add(time.Duration(i)*time.Hour + time.Duration(i*123457)*time.Nanosecond)
		uts := []unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], uts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(src, "sub", "nested"), 0o700)
	os.Chmod(filepath.Join(src, "sub"), 0o750)

	work := mustMkdir(t, filepath.Join(vol.Mnt, "cp"))
	runIn(t, work, nil, "cp", "-a", src, work)
	dst := filepath.Join(work, "tree")
	vol.Remount(t)

	var n int
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(src, p)
		q := filepath.Join(dst, rel)
		var s, g syscall.Stat_t
		if err := syscall.Lstat(p, &s); err != nil {
			return err
		}
		if err := syscall.Lstat(q, &g); err != nil {
			t.Errorf("cp -a: %s missing on the mount: %v", rel, err)
			return nil
		}
		if s.Mode != g.Mode || s.Uid != g.Uid || s.Gid != g.Gid {
			t.Errorf("cp -a: %s: mode %#o uid %d gid %d, want %#o %d %d", rel, g.Mode, g.Uid, g.Gid, s.Mode, s.Uid, s.Gid)
		}
		if s.Mtim != g.Mtim {
			t.Errorf("cp -a: %s: mtime %v, want %v", rel, time.Unix(g.Mtim.Unix()), time.Unix(s.Mtim.Unix()))
		}
		switch s.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			if s.Size != g.Size {
				t.Errorf("cp -a: %s: size %d, want %d", rel, g.Size, s.Size)
			}
			if _, err := tryRun(t, work, nil, "cmp", p, q); err != nil {
				t.Errorf("cp -a: content differs: %v", err)
			}
		case syscall.S_IFLNK:
			a, _ := os.Readlink(p)
			b, err := os.Readlink(q)
			if a != b || err != nil {
				t.Errorf("cp -a: symlink %s -> %q, want %q (%v)", rel, b, a, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var m int
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		m++
		return err
	})
	if m != n {
		t.Errorf("cp -a: the copy on the mount has %d entries, the source %d", m, n)
	}
	var h1, h2 syscall.Stat_t
	if syscall.Lstat(filepath.Join(dst, "hard1"), &h1) != nil || syscall.Lstat(filepath.Join(dst, "sub", "hard2"), &h2) != nil ||
		h1.Ino != h2.Ino || h1.Nlink != 2 || h2.Nlink != 2 {
		t.Errorf("cp -a: hard1 and sub/hard2 are not one file with two links: ino %d/%d nlink %d/%d", h1.Ino, h2.Ino, h1.Nlink, h2.Nlink)
	}
	checkNamesHidden(t, vol, "cp", "tree", "a.txt", "exe.sh", "deep.txt", "hard1", "hard2", "fifo", long, "link-dangling")
}
