package integration

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPostgres runs PostgreSQL on each variant: initdb with data checksums,
// pgbench's TPC-B-like load, a SIGKILL of the whole server in the middle of
// it, WAL recovery, then the checks PostgreSQL itself ships: pg_amcheck
// (heap and B-tree structure, every heap tuple found in its indexes) and,
// with the server stopped, pg_checksums over every page, again after a
// remount. pgbench's invariant ties it together: every committed
// transaction adds the same delta to one account, teller and branch and
// inserts it into the history, so the four sums must be equal after any
// crash. A database is the application that leans hardest on fsync, on
// O_DIRECT-free 8 KiB page writes over existing data, on fdatasync of the
// WAL and on renames of WAL segments; the server runs as an unprivileged
// user, through allow_other, as PostgreSQL refuses to run as root.
func TestPostgres(t *testing.T) {
	RequireFUSE(t)
	bin := postgresBin(t)
	if os.Geteuid() != 0 {
		t.Skip("PostgreSQL must run as another user than the mount's: this test needs root")
	}
	needProgs(t, "setpriv")
	uid, gid := postgresUser(t)
	for _, v := range Variants {
		t.Run(v.Name, func(t *testing.T) {
			vol := NewVolume(t, v)
			vol.AllowOther = true
			vol.Mount(t, false)
			openPath(t, vol.Mnt)
			testPostgres(t, vol, bin, uid, gid)
		})
	}
}

// postgresBin returns the directory of the newest PostgreSQL server
// programs installed (Debian keeps them in /usr/lib/postgresql/N/bin), or
// skips the test.
func postgresBin(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_amcheck")); err == nil {
			return d
		}
	}
	t.Skip("PostgreSQL (14 or later, with pg_amcheck) is not installed: apt-get install postgresql")
	return ""
}

// postgresUser returns the uid and gid the server runs as: the postgres
// user the package made, else nobody.
func postgresUser(t *testing.T) (int, int) {
	t.Helper()
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if uid != 0 {
			return uid, gid
		}
	}
	t.Skip("no unprivileged user (postgres or nobody) to run PostgreSQL as")
	return 0, 0
}

// openPath lets other users through every directory above dir that the
// test made (t.TempDir's are mode 0700).
func openPath(t *testing.T, dir string) {
	t.Helper()
	tmp := os.TempDir()
	for d := filepath.Dir(dir); strings.HasPrefix(d, tmp+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func testPostgres(t *testing.T, vol *Volume, bin string, uid, gid int) {
	data := filepath.Join(vol.Mnt, "pg", "data")
	mustMkdir(t, filepath.Dir(data))
	if err := os.Chown(filepath.Dir(data), uid, gid); err != nil {
		t.Fatal(err)
	}
	// The socket and the server log live outside the mount.
	sock, err := os.MkdirTemp("", "twincrypt-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	if err := os.Chown(sock, uid, gid); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(sock, "server.log")
	const port = "5491"
	env := []string{"PGHOST=" + sock, "PGPORT=" + port, "PGDATABASE=postgres", "LANG=C"}
	as := func(prog string, args ...string) []string {
		return append([]string{"--reuid=" + strconv.Itoa(uid), "--regid=" + strconv.Itoa(gid),
			"--clear-groups", "--", filepath.Join(bin, prog)}, args...)
	}
	pg := func(prog string, args ...string) string {
		t.Helper()
		out, stderr, err := run3Within(t, 3*time.Minute, sock, env, "setpriv", as(prog, args...)...)
		if err != nil {
			if b, rerr := os.ReadFile(logFile); rerr == nil {
				t.Logf("server log:\n%s", clip(string(b)))
			}
			t.Fatal(err)
		}
		return out + stderr
	}
	start := func() {
		t.Helper()
		pg("pg_ctl", "-D", data, "-l", logFile, "-w", "-t", "120", "-o", "-p "+port+" -k "+sock+" -c listen_addresses=''", "start")
	}
	stop := func() {
		t.Helper()
		pg("pg_ctl", "-D", data, "-w", "-t", "120", "-m", "fast", "stop")
	}
	// Whatever happens, no server is left running on the mount: the
	// unmount (registered first, so it runs after this) needs it gone.
	t.Cleanup(func() {
		if pid := postmasterPID(data); pid > 0 {
			killServer(pid)
		}
	})

	pg("initdb", "-k", "-A", "trust", "-U", "postgres", "-D", data)
	start()
	pg("pgbench", "-U", "postgres", "-i", "-s", "2", "-q")
	pg("pgbench", "-U", "postgres", "-n", "-c", "4", "-j", "2", "-T", "5")

	// The crash: SIGKILL to the postmaster and every backend while pgbench
	// runs, so that nothing is flushed or synced on the way out.
	done := make(chan error, 1)
	go func() {
		_, _, err := run3Within(t, 3*time.Minute, sock, env, "setpriv",
			as("pgbench", "-U", "postgres", "-n", "-c", "4", "-j", "2", "-T", "30")...)
		done <- err
	}()
	// Kill once pgbench's four clients are connected and their
	// transactions are committing (not after a guessed time: on a
	// loaded machine pgbench may take seconds to start).
	committed := func() int {
		out := pg("psql", "-U", "postgres", "-At", "-c",
			"select count(*) from pg_stat_activity where application_name = 'pgbench'; select xact_commit from pg_stat_database where datname = 'postgres'")
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("psql: %q", out)
		}
		clients, _ := strconv.Atoi(f[0])
		if clients < 4 {
			return -1
		}
		n, _ := strconv.Atoi(f[1])
		return n
	}
	base := -1
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("pgbench ended before the kill: %v", err)
		default:
		}
		n := committed()
		if base < 0 {
			base = n
		} else if n >= 0 && n > base+100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pgbench's clients were not committing 2 minutes after it started")
		}
	}
	pid := postmasterPID(data)
	if pid <= 0 {
		t.Fatal("no postmaster.pid in the data directory while pgbench runs")
	}
	killServer(pid)
	if err := <-done; err == nil {
		t.Fatal("pgbench went on after its server was killed")
	}
	start()
	if b, err := os.ReadFile(logFile); err != nil || !strings.Contains(string(b), "redo done") {
		t.Errorf("the server did not replay its WAL after the crash (log: %v):\n%s", err, clip(string(b)))
	}

	// The checks PostgreSQL ships, and pgbench's invariant.
	pg("pg_amcheck", "-U", "postgres", "--install-missing", "--heapallindexed", "--rootdescend", "-d", "postgres")
	sums := pgbenchSums(t, pg)
	pg("pgbench", "-U", "postgres", "-n", "-c", "2", "-j", "2", "-t", "200")
	after := pgbenchSums(t, pg)
	stop()
	if out := pg("pg_checksums", "--check", "-D", data); !strings.Contains(out, "Bad checksums:  0") {
		t.Errorf("pg_checksums:\n%s", out)
	}
	checkNamesHidden(t, vol, "pg", "data", "pg_wal", "postgresql.conf", "base")
	checkContentHidden(t, vol, []byte("pgbench_accounts"))

	// Everything again from LOWER alone.
	vol.Remount(t)
	openPath(t, vol.Mnt)
	start()
	if again := pgbenchSums(t, pg); again != after {
		t.Errorf("after a remount the database holds %s, before it %s", again, after)
	}
	pg("pg_amcheck", "-U", "postgres", "--heapallindexed", "-d", "postgres")
	stop()
	if out := pg("pg_checksums", "--check", "-D", data); !strings.Contains(out, "Bad checksums:  0") {
		t.Errorf("pg_checksums after the remount:\n%s", out)
	}
	t.Logf("after the crash: %s; at the end: %s", sums, after)
}

// pgbenchSums checks pgbench's invariant: every committed transaction added
// its delta to one account, one teller, one branch and the history, so the
// four sums are equal; it returns them with the history's length.
func pgbenchSums(t *testing.T, pg func(string, ...string) string) string {
	t.Helper()
	out := strings.TrimSpace(pg("psql", "-U", "postgres", "-X", "-A", "-t", "-c",
		"select (select sum(abalance) from pgbench_accounts), (select sum(tbalance) from pgbench_tellers), "+
			"(select sum(bbalance) from pgbench_branches), (select coalesce(sum(delta), 0) from pgbench_history), "+
			"(select count(*) from pgbench_history)"))
	f := strings.Split(out, "|")
	if len(f) != 5 {
		t.Fatalf("unexpected psql output %q", out)
	}
	if f[0] != f[1] || f[1] != f[2] || f[2] != f[3] {
		t.Errorf("pgbench's invariant broken: accounts %s, tellers %s, branches %s, history %s", f[0], f[1], f[2], f[3])
	}
	if n, _ := strconv.Atoi(f[4]); n == 0 {
		t.Errorf("no committed transaction in the history: %q", out)
	}
	return fmt.Sprintf("sum %s over %s transactions", f[0], f[4])
}

// postmasterPID reads the server's PID from its data directory, 0 if none.
func postmasterPID(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// killServer sends SIGKILL to the postmaster pid and to every process it
// started (its backends and helpers: they would otherwise hold the shared
// memory and the data directory until they noticed), and waits until they
// are gone. The postmaster's parent is init, which reaps it in its own
// time; until then its PID answers kill(pid, 0) and a new postmaster takes
// the lock file for a live one's, so a zombie that stays counts as gone
// only after 30 s (it has then let go of everything).
func killServer(pid int) {
	victims := append(childrenOf(pid), pid)
	for _, p := range victims {
		syscall.Kill(p, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range victims {
		for time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, p)
		}
	}
	return kids
}
