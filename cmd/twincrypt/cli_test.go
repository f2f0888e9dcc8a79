package main

// End-to-end tests of the twincrypt binary: TestMain builds it once, the
// tests run it as a user would and look at the results from outside
// (/proc/mounts, the lower directory, exit codes and stderr).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/config"
)

// binPath is the twincrypt binary built by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "twincrypt-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "twincrypt")
	build := exec.Command("go", "build", "-o", binPath, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cheapKDF keeps init and unlock fast in tests: the cheapest argon2id
// setting above the minimums (OWASP 2023: 7 MiB x 5 passes).
var cheapKDF = []string{"--kdf", "argon2id", "--kdf-time", "5", "--kdf-memory", "7168", "--kdf-threads", "1"}

type cliResult struct {
	code           int
	stdout, stderr string
}

// twincrypt runs the binary with stdin and returns its exit code and output.
func twincrypt(t *testing.T, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("twincrypt %s: %v", strings.Join(args, " "), err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// expectExit checks the exit code and, for failures, the one-line
// "twincrypt: " error on stderr.
func (r cliResult) expectExit(t *testing.T, code int, what string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", what, r.code, code, r.stdout, r.stderr)
	}
	if code != 0 && (!strings.HasPrefix(r.stderr, "twincrypt: ") || strings.Count(r.stderr, "\n") != 1) {
		t.Errorf("%s: stderr is not one 'twincrypt: ' line: %q", what, r.stderr)
	}
}

// tempDir is t.TempDir with symlinks resolved, so that it matches the
// mount points the kernel lists in /proc/mounts.
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func writePassfile(t *testing.T, pass string) string {
	t.Helper()
	path := filepath.Join(tempDir(t), "passfile")
	if err := os.WriteFile(path, []byte(pass+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// initVolume creates an encrypted volume with a cheap KDF and returns LOWER.
func initVolume(t *testing.T, passfile string, extra ...string) string {
	t.Helper()
	lower := filepath.Join(tempDir(t), "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"init", "--quiet", "--passfile", passfile}, cheapKDF...)
	args = append(append(args, extra...), lower)
	twincrypt(t, "", args...).expectExit(t, 0, "init")
	return lower
}

func newMountpoint(t *testing.T) string {
	t.Helper()
	mnt := filepath.Join(tempDir(t), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// requireFUSE skips tests that mount when this machine cannot.
func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: mounting needs /dev/fuse (%v)", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("skipping: not root and fusermount3 is not installed, so nothing can be mounted")
		}
	}
}

// isMounted reports whether /proc/mounts lists mnt.
func isMounted(t *testing.T, mnt string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 1 && unescapeMountPath(fields[1]) == mnt {
			return true
		}
	}
	return false
}

// unmountOnCleanup makes sure mnt is gone after the test, whatever
// happened, and that the background process serving it has exited.
func unmountOnCleanup(t *testing.T, mnt string) {
	t.Helper()
	t.Cleanup(func() {
		if isMounted(t, mnt) {
			if r := twincrypt(t, "", "umount", mnt); r.code != 0 || isMounted(t, mnt) {
				twincrypt(t, "", "umount", "--lazy", mnt)
			}
		}
		waitDaemonGone(t, mnt)
	})
}

// daemonPIDs lists background mount processes serving mnt.
func daemonPIDs(t *testing.T, mnt string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && args[0] == binPath && bytes.Contains(cmdline, []byte("--"+childFlag)) &&
			bytes.Contains(cmdline, []byte("\x00"+mnt+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitDaemonGone waits for the background process of mnt to exit, and
// kills it (by pid; it is this test's) if it does not.
func waitDaemonGone(t *testing.T, mnt string) {
	t.Helper()
	// The daemon writes its summary and closes LOWER after the unmount;
	// on a loaded machine that can take seconds.
	deadline := time.Now().Add(60 * time.Second)
	for {
		pids := daemonPIDs(t, mnt)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("background process %v for %s still running after unmount; killing it", pids, mnt)
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// assertNoPlaintext checks that LOWER holds neither the plaintext name nor
// the plaintext content.
func assertNoPlaintext(t *testing.T, lower, name string, content []byte) {
	t.Helper()
	err := filepath.WalkDir(lower, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == name {
			t.Errorf("LOWER holds the plaintext name: %s", path)
		}
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if bytes.Contains(data, content) {
				t.Errorf("LOWER file %s holds the plaintext content", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestInitCreatesConfig(t *testing.T) {
	pf := writePassfile(t, "correct horse")
	lower := filepath.Join(tempDir(t), "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init")
	keyLine := regexp.MustCompile(`(?m)^    [0-9a-f]{8}(-[0-9a-f]{8}){7}-$\n^    [0-9a-f]{8}(-[0-9a-f]{8}){7}$`)
	if !keyLine.MatchString(r.stdout) {
		t.Errorf("init does not print a 512-bit master key in groups of 8:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "aes-xts") || !strings.Contains(r.stdout, "512-bit") || !strings.Contains(r.stdout, "argon2id") {
		t.Errorf("init summary lacks cipher, key bits or kdf:\n%s", r.stdout)
	}
	fi, err := os.Stat(filepath.Join(lower, config.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %v, want 0600", fi.Mode().Perm())
	}

	// Again on the same directory: refused, config untouched.
	before, _ := os.ReadFile(filepath.Join(lower, config.FileName))
	r = twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, exitInitRefused, "second init")
	after, _ := os.ReadFile(filepath.Join(lower, config.FileName))
	if !bytes.Equal(before, after) {
		t.Error("second init changed the config")
	}
}

func TestInitRefusesNonEmptyDir(t *testing.T) {
	pf := writePassfile(t, "pw")
	lower := tempDir(t)
	if err := os.WriteFile(filepath.Join(lower, "precious"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, exitInitRefused, "init of a non-empty dir")
	if _, err := os.Stat(filepath.Join(lower, config.FileName)); err == nil {
		t.Error("init wrote a config into a non-empty dir")
	}
}

func TestInitQuietAndCBC(t *testing.T) {
	lower := tempDir(t)
	// Passphrase from a stdin pipe; --quiet prints nothing.
	r := twincrypt(t, "from stdin\n", append(append([]string{"init", "--quiet", "--cipher", "aes-cbc", "--key-bytes", "16"}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init --quiet")
	if r.stdout != "" || r.stderr != "" {
		t.Errorf("--quiet printed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	data, err := os.ReadFile(filepath.Join(lower, config.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var c config.Config
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if c.Cipher != "aes-cbc" || c.KeyBytes != 16 || c.KDF.Algorithm != "argon2id" || c.KDF.MemoryKiB != 7168 || c.KDF.Time != 5 {
		t.Errorf("config does not reflect the flags: %+v", c)
	}
}

func TestMountMissingConfig(t *testing.T) {
	pf := writePassfile(t, "pw")
	r := twincrypt(t, "", "mount", "--passfile", pf, tempDir(t), newMountpoint(t))
	r.expectExit(t, exitConfigMissing, "mount without config")
}

func TestMountUnknownCipher(t *testing.T) {
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	path := filepath.Join(lower, config.FileName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	raw["cipher"] = "rot13"
	data, err = json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := newMountpoint(t)
	r := twincrypt(t, "", "mount", "--passfile", pf, lower, mnt)
	r.expectExit(t, exitConfigInvalid, "mount with an unknown cipher")
	if isMounted(t, mnt) {
		t.Error("mounted anyway")
	}
}

func TestMountWrongPassphrase(t *testing.T) {
	requireFUSE(t)
	lower := initVolume(t, writePassfile(t, "right"))
	wrong := writePassfile(t, "wrong")
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	for _, mode := range [][]string{nil, {"--background"}} {
		args := append(append([]string{"mount"}, mode...), "--passfile", wrong, lower, mnt)
		r := twincrypt(t, "", args...)
		r.expectExit(t, exitWrongPassphrase, strings.Join(args, " "))
		if !strings.Contains(r.stderr, "wrong passphrase") {
			t.Errorf("stderr does not say why: %q", r.stderr)
		}
		if isMounted(t, mnt) {
			t.Fatalf("%v: %s is mounted after a wrong passphrase", mode, mnt)
		}
	}
	// From stdin, too.
	r := twincrypt(t, "wrong\n", "mount", lower, mnt)
	r.expectExit(t, exitWrongPassphrase, "mount, wrong passphrase on stdin")
}

func TestMountBackgroundCrypt(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "s3cret passphrase")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)

	r := twincrypt(t, "", "mount", "--background", "--passfile", pf, lower, mnt)
	r.expectExit(t, 0, "mount --background")
	if !isMounted(t, mnt) {
		t.Fatalf("%s not in /proc/mounts after mount --background", mnt)
	}
	if len(daemonPIDs(t, mnt)) != 1 {
		t.Errorf("background processes for %s: %v, want one", mnt, daemonPIDs(t, mnt))
	}

	const name = "plaintext-name-7f3a.txt"
	content := []byte("attack at dawn, twincrypt end-to-end test content\n")
	if err := os.WriteFile(filepath.Join(mnt, name), content, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(mnt, name))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("read back %q, %v; want %q", got, err, content)
	}
	assertNoPlaintext(t, lower, name, content)

	// Busy-free unmount through the CLI; the daemon exits.
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	if isMounted(t, mnt) {
		t.Fatalf("%s still mounted after umount", mnt)
	}
	waitDaemonGone(t, mnt)
	twincrypt(t, "", "umount", mnt).expectExit(t, exitMountpoint, "umount of a non-mount")

	// Mount again: the file survives and still decrypts.
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "remount")
	got, err = os.ReadFile(filepath.Join(mnt, name))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("after remount: read back %q, %v", got, err)
	}
}

// TestUmountWaitsForDaemon: when `twincrypt umount` returns, the daemon
// has exited (LOWER closed, the --summary file written), so that a script
// may unmount LOWER's filesystem or read the summary next. A mount
// without live stats (--no-stats: no socket to find the daemon by)
// unmounts all the same.
func TestUmountWaitsForDaemon(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	summary := filepath.Join(tempDir(t), "summary.json")
	for round := 0; round < 3; round++ {
		os.Remove(summary)
		twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, "--summary", summary, lower, mnt).expectExit(t, 0, "mount")
		pids := daemonPIDs(t, mnt)
		if len(pids) != 1 {
			t.Fatalf("background processes for %s: %v, want one", mnt, pids)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
		if _, alive := procStart(pids[0]); alive {
			t.Errorf("round %d: the daemon (pid %d) is still running when umount returns", round, pids[0])
		}
		b, err := os.ReadFile(summary)
		if err != nil || !json.Valid(b) {
			t.Errorf("round %d: the --summary file when umount returns: %v (%d bytes, valid JSON: %v)", round, err, len(b), json.Valid(b))
		}
		waitDaemonGone(t, mnt)
	}
	twincrypt(t, "", "mount", "--background", "--quiet", "--no-stats", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount --no-stats")
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount of a --no-stats mount")
	waitDaemonGone(t, mnt)
}

// TestMountIdle: --idle unmounts once nothing a user does reaches the
// daemon for the given time, and not while operations keep coming or a
// file is open; df polling the mount (STATFS, GETATTR of the root) does
// not keep it mounted. Every wait is on an event (the unmount, the
// daemon's log line saying it tried), bounded generously: on a loaded
// machine a wake-up can come seconds late.
func TestMountIdle(t *testing.T) {
	requireFUSE(t)
	dfPath, err := exec.LookPath("df")
	if err != nil {
		t.Skip("skipping: df is not installed")
	}
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--idle", "-1s", "--passfile", pf, lower, mnt).expectExit(t, exitUsage, "mount --idle -1s")
	const idle = 2 * time.Second
	dir := tempDir(t)
	summary := filepath.Join(dir, "summary.json")
	logFile := filepath.Join(dir, "mount.log")
	// --debug: the log then says when the daemon tried to unmount and
	// the kernel refused (the event the open-file step waits for).
	twincrypt(t, "", "mount", "--background", "--quiet", "--debug", "--log", logFile, "--idle", idle.String(),
		"--summary", summary, "--passfile", pf, lower, mnt).expectExit(t, 0, "mount --idle")

	// Operations that reach the daemon (new names: no cache answers
	// them), one after another for three idle periods. Only a gap of a
	// whole idle period between two of them could unmount.
	n := 0
	for start := time.Now(); time.Since(start) < 3*idle; n++ {
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprintf("busy%d", n)), []byte("x"), 0o600); err != nil {
			t.Fatalf("after %d ops: %v", n, err)
		}
		time.Sleep(idle / 20)
	}
	if !isMounted(t, mnt) {
		t.Fatalf("unmounted while operations kept coming (%d files written)", n)
	}
	last := fmt.Sprintf("busy%d", n-1)

	// A file held open keeps the mount busy: the kernel refuses the
	// unmount, however long nothing happens. Wait until the daemon has
	// tried and been refused.
	f, err := os.Open(filepath.Join(mnt, "busy0"))
	if err != nil {
		t.Fatal(err)
	}
	refused := waitFor(t, 120*time.Second, func() bool {
		b, _ := os.ReadFile(logFile)
		return bytes.Contains(b, []byte("not unmounted"))
	})
	still := isMounted(t, mnt)
	f.Close()
	if !refused {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("no refused idle unmount in the log within 120 s while a file was open (mounted: %v); log tail:\n%s", still, tail(b, 2000))
	}
	if !still {
		t.Fatal("unmounted while a file was open")
	}

	// Closed and left alone but for df, polling the mount as a desktop
	// applet or a monitoring agent does: gone all the same, the daemon
	// exited cleanly (its summary written), LOWER intact.
	dfStop := make(chan struct{})
	dfDone := make(chan int)
	go func() {
		runs := 0
		defer func() { dfDone <- runs }()
		for {
			select {
			case <-dfStop:
				return
			default:
			}
			// df stats the mount point and statfs's it; after the
			// unmount it reports the directory's own filesystem.
			_ = exec.Command(dfPath, mnt).Run()
			runs++
			time.Sleep(idle / 20)
		}
	}()
	gone := waitFor(t, 120*time.Second, func() bool { return !isMounted(t, mnt) })
	close(dfStop)
	dfRuns := <-dfDone
	if !gone {
		t.Fatalf("still mounted 120 s after the last operation (--idle %v) with df polling it (%d runs)", idle, dfRuns)
	}
	waitDaemonGone(t, mnt)
	b, err := os.ReadFile(summary)
	if err != nil || !json.Valid(b) {
		t.Fatalf("summary after the idle unmount: %v (%d bytes)", err, len(b))
	}
	// df's requests did reach the daemon: the kernel's caches did not
	// answer them for it.
	var sum struct {
		Ops []struct {
			Op    string `json:"op"`
			Count int64  `json:"count"`
		} `json:"ops"`
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	var statfs int64
	for _, s := range sum.Ops {
		if s.Op == "statfs" {
			statfs = s.Count
		}
	}
	if statfs == 0 || dfRuns == 0 {
		t.Errorf("df ran %d times and the daemon served %d STATFS: the df loop did not reach the mount", dfRuns, statfs)
	}
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount again")
	if got, err := os.ReadFile(filepath.Join(mnt, last)); err != nil || string(got) != "x" {
		t.Errorf("a file written before the idle unmount: %q, %v", got, err)
	}
}

// waitFor polls cond until it holds or bound has passed, and reports
// whether it held. The bound is for a machine at load 10, not a measure
// of speed.
func waitFor(t *testing.T, bound time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func TestMountBackgroundReadOnly(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	// Read-write first, to put a file there (a volume also needs one
	// read-write mount before it can be mounted read-only).
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.WriteFile(filepath.Join(mnt, "kept"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	twincrypt(t, "", "mount", "--background", "--quiet", "-o", "ro", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount -o ro")
	if got, err := os.ReadFile(filepath.Join(mnt, "kept")); err != nil || string(got) != "kept" {
		t.Errorf("read on a read-only mount: %q, %v", got, err)
	}
	err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600)
	if !errors.Is(err, syscall.EROFS) {
		t.Errorf("write to a read-only mount: %v, want EROFS", err)
	}
}

func TestMountPassthroughTwin(t *testing.T) {
	requireFUSE(t)
	lower := tempDir(t)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)

	// No config and no passphrase: stdin is empty and must not be read.
	r := twincrypt(t, "", "mount", "--background", "--passthrough", lower, mnt)
	r.expectExit(t, 0, "mount --passthrough --background")
	if !isMounted(t, mnt) {
		t.Fatalf("%s not in /proc/mounts", mnt)
	}
	content := []byte("twin content")
	if err := os.WriteFile(filepath.Join(mnt, "plain.txt"), content, 0o600); err != nil {
		t.Fatal(err)
	}
	// The twin is a null transform: same name, same bytes below.
	got, err := os.ReadFile(filepath.Join(lower, "plain.txt"))
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("LOWER/plain.txt = %q, %v; want %q", got, err, content)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount twin")
	if isMounted(t, mnt) {
		t.Fatalf("%s still mounted", mnt)
	}
	waitDaemonGone(t, mnt)
}

func TestMountForegroundSIGINT(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)

	cmd := exec.Command(binPath, "mount", "--passfile", pf, lower, mnt)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !isMounted(t, mnt) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("foreground mount exited early: %v\nstderr: %s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not mounted after 30 s; stderr: %s", mnt, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("foreground mount after SIGINT: %v\nstderr: %s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("foreground mount did not exit within 60 s of SIGINT")
	}
	if isMounted(t, mnt) {
		t.Errorf("%s still mounted after SIGINT", mnt)
	}
	if !strings.Contains(stdout.String(), "Mounted "+lower+" at "+mnt) {
		t.Errorf("no ready message on stdout: %q", stdout.String())
	}
}

func TestMountRefusesBadMountpoints(t *testing.T) {
	pf := writePassfile(t, "pw")
	lower := tempDir(t)
	if err := os.Mkdir(filepath.Join(lower, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	full := tempDir(t)
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(full, "x")
	for _, mnt := range []string{filepath.Join(lower, "sub"), lower, full, file, filepath.Join(full, "missing")} {
		r := twincrypt(t, "", "mount", "--passfile", pf, lower, mnt)
		r.expectExit(t, exitMountpoint, "mount at "+mnt)
		if isMounted(t, mnt) {
			t.Errorf("%s mounted", mnt)
		}
	}
}

func TestBenchDemo(t *testing.T) {
	requireFUSE(t)
	// Usage errors come before anything is set up.
	for _, args := range [][]string{
		{"bench", "--size", "huge"},
		{"bench", "--repeat", "0"},
		{"bench", "--targets", "native,zfs"},
		{"bench", "--workloads", "nosuch"},
		{"bench", "extra-argument"},
		{"bench", "--compare", "only-one.json"},
	} {
		twincrypt(t, "", args...).expectExit(t, exitUsage, strings.Join(args, " "))
	}

	on, out := tempDir(t), tempDir(t)
	r := twincrypt(t, "", "bench", "--size", "tiny", "--repeat", "2", "--targets", "native,twin",
		"--workloads", "seqwrite,srctree", "--on", on, "--out", out)
	r.expectExit(t, 0, "bench")
	for _, want := range []string{
		"twincrypt bench: size tiny, 2 repeat(s), lower data on ",
		"workload   unit", "native", "twin",
		"seqwrite  MiB/s", "srctree       s", "  untar       s", "  rm          s",
		"Cost relative to native", "Cost relative to twin", "Daemon CPU seconds per GiB",
		"Per-operation latency in the daemon", "seqwrite   write",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("bench output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Progress goes to stderr, one line per run, in interleaved order,
	// the second repeat starting with the second target.
	var order []string
	for _, m := range regexp.MustCompile(`(?m)^\[ *\d+/\d+\] (r\d+) (\S+) +(\S+) `).FindAllStringSubmatch(r.stderr, -1) {
		order = append(order, m[1]+" "+m[2]+" "+m[3])
	}
	if want := "r1 seqwrite native,r1 seqwrite twin,r1 srctree native,r1 srctree twin," +
		"r2 seqwrite twin,r2 seqwrite native,r2 srctree twin,r2 srctree native"; strings.Join(order, ",") != want {
		t.Errorf("runs in order %q, want %q\nstderr:\n%s", order, want, r.stderr)
	}
	for _, f := range []string{"report.md", "results.csv", "results.json", "overhead.svg", "overhead.png", "latency.svg", "latency.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("--out lacks %s: %v", f, err)
		}
	}
	left, err := os.ReadDir(on)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("bench left %d entries in --on", len(left))
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	if bytes.Contains(mounts, []byte(on)) {
		t.Errorf("bench left a mount under %s", on)
	}

	// A run compared with itself: nothing changed.
	js := filepath.Join(out, "results.json")
	c := twincrypt(t, "", "bench", "--compare", js, js)
	c.expectExit(t, 0, "bench --compare")
	if !strings.Contains(c.stdout, "new/old") || !strings.Contains(c.stdout, " 1.00x") || !strings.Contains(c.stdout, "\n0 of ") {
		t.Errorf("compare output:\n%s", c.stdout)
	}
}

func TestUmountBusyAndLazy(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: fusermount3 -u without -z does not report busy mounts the same way as umount(2)")
	}
	lower := tempDir(t)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passthrough", lower, mnt).expectExit(t, 0, "mount twin")

	f, err := os.Create(filepath.Join(mnt, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := twincrypt(t, "", "umount", mnt)
	r.expectExit(t, exitError, "umount of a busy mount")
	if !strings.Contains(r.stderr, "busy") || !isMounted(t, mnt) {
		t.Fatalf("busy umount: stderr %q, mounted %v", r.stderr, isMounted(t, mnt))
	}
	twincrypt(t, "", "umount", "--lazy", mnt).expectExit(t, 0, "umount --lazy")
	if isMounted(t, mnt) {
		t.Fatal("still listed after umount --lazy")
	}
	// The open file still works until it is closed; then the daemon exits.
	if _, err := f.WriteString("still open"); err != nil {
		t.Errorf("write to a file on a lazily unmounted mount: %v", err)
	}
	f.Close()
	waitDaemonGone(t, mnt)
}

// TestExtpass: a volume made and mounted with --extpass (the passphrase
// printed by a program) works; a program printing the wrong passphrase
// gives the wrong-passphrase exit code and mounts nothing, and one that
// fails mounts nothing either.
func TestExtpass(t *testing.T) {
	requireFUSE(t)
	dir := tempDir(t)
	lower := filepath.Join(dir, "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"init", "--quiet", "--extpass", "echo from a program"}, cheapKDF...)
	twincrypt(t, "", append(args, lower)...).expectExit(t, 0, "init --extpass")
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)

	r := twincrypt(t, "", "mount", "--background", "--extpass", "echo from a wrong program", lower, mnt)
	r.expectExit(t, exitWrongPassphrase, "mount --extpass with a wrong passphrase")
	r = twincrypt(t, "", "mount", "--background", "--extpass", "sh", "--extpass", "-c", "--extpass", "exit 7", lower, mnt)
	r.expectExit(t, exitError, "mount --extpass of a failing program")
	if !strings.Contains(r.stderr, "exit status 7") {
		t.Errorf("stderr does not say why: %q", r.stderr)
	}
	if isMounted(t, mnt) {
		t.Fatalf("%s is mounted after a failed --extpass", mnt)
	}
	// The passfile's passphrase is the program's: the same volume opens
	// with either.
	pf := writePassfile(t, "from a program")
	twincrypt(t, "", "mount", "--background", "--quiet", "--extpass", "echo from a program", lower, mnt).expectExit(t, 0, "mount --extpass")
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount --passfile")
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "x" {
		t.Errorf("read back %q, %v", got, err)
	}
}

// TestPathCommand: 'twincrypt path' prints the lower path of a plaintext
// path of a mounted volume (the same inode), --decrypt maps it back, and
// a path that is not there exits 1 with one line per path on stderr;
// a wrong passphrase exits 12.
func TestPathCommand(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "path pass")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.MkdirAll(filepath.Join(mnt, "dir", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "dir", "sub", "file.txt"), []byte("content"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", "path", "--passfile", pf, lower, "/dir/sub/file.txt", "dir")
	r.expectExit(t, 0, "path")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || strings.Contains(r.stdout, "file.txt") {
		t.Fatalf("path printed %q", r.stdout)
	}
	var pst, lst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "dir", "sub", "file.txt"), &pst); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(filepath.Join(lower, lines[0]), &lst); err != nil || lst.Ino != pst.Ino {
		t.Errorf("lower %s: inode %d (%v), the mount's file is inode %d", lines[0], lst.Ino, err, pst.Ino)
	}
	// "--": an encrypted name may begin with "-" (base64url), which would
	// be read as a flag (one name in 64).
	r = twincrypt(t, "", "path", "--decrypt", "--passfile", pf, "--", lower, lines[0], filepath.Join(lower, lines[1]))
	r.expectExit(t, 0, "path --decrypt")
	if r.stdout != "/dir/sub/file.txt\n/dir\n" {
		t.Errorf("path --decrypt printed %q", r.stdout)
	}
	r = twincrypt(t, "", "path", "--passfile", pf, lower, "/dir/absent")
	if r.code != exitError || !strings.Contains(r.stderr, "no such entry") || r.stdout == "" {
		t.Errorf("path of an absent entry: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = twincrypt(t, "", "path", "--decrypt", "--passfile", pf, lower, "twincrypt.conf")
	if r.code != exitError || !strings.Contains(r.stderr, "not a name of this volume") {
		t.Errorf("path --decrypt of the config: exit %d, stderr %q", r.code, r.stderr)
	}
	twincrypt(t, "", "path", "--passfile", writePassfile(t, "wrong"), lower, "/dir").expectExit(t, exitWrongPassphrase, "path, wrong passphrase")
}
