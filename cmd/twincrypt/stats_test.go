package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/control"
)

// TestStatsAndOpLog mounts in the background with an op log, mirror mode
// and a summary file, asks `stats` (table and JSON), unmounts, and checks
// the summary and the op log.
func TestStatsAndOpLog(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "stats passphrase")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	twin := tempDir(t)
	logPath := filepath.Join(tempDir(t), "op.log")
	summary := filepath.Join(tempDir(t), "summary.json")
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, "--oplog", logPath, "--oplog-paths",
		"--mirror", twin, "--summary", summary, lower, mnt).expectExit(t, 0, "mount with instruments")

	data := bytes.Repeat([]byte("measured "), 100000)
	if err := os.WriteFile(filepath.Join(mnt, "file"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}

	r := twincrypt(t, "", "stats", mnt)
	r.expectExit(t, 0, "stats")
	for _, want := range []string{"write", "mkdir", "twin p50", "op log:", "CPU:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stats table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = twincrypt(t, "", "stats", "--json", mnt)
	r.expectExit(t, 0, "stats --json")
	var snap measure.Snapshot
	if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	counts := map[string]int64{}
	for _, s := range snap.Ops {
		counts[s.Op] = s.Count
	}
	if counts["mkdir"] != 1 || counts["write"] == 0 || len(snap.Twin) == 0 {
		t.Errorf("stats --json counts %v, twin ops %d", counts, len(snap.Twin))
	}
	// The twin holds the plaintext.
	if got, err := os.ReadFile(filepath.Join(twin, "file")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("mirror twin file: %v", err)
	}

	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)
	twincrypt(t, "", "stats", mnt).expectExit(t, exitMountpoint, "stats without a daemon")

	b, err := os.ReadFile(summary)
	if err != nil {
		t.Fatalf("no summary file: %v", err)
	}
	var final measure.Snapshot
	if err := json.Unmarshal(b, &final); err != nil || len(final.Ops) == 0 {
		t.Fatalf("summary: %v\n%s", err, b)
	}
	lines := parseOpLog(t, logPath, false)
	paths := map[string]bool{}
	for _, l := range lines {
		paths[l.Path] = true
		if l.TwinNs == 0 && l.Op == "write" {
			t.Errorf("write line without twin timing: %+v", l)
		}
	}
	if !paths["/file"] || !paths["/dir"] {
		t.Errorf("op log paths %v lack /file or /dir", paths)
	}
	if int64(len(lines)) != final.LogLines {
		t.Errorf("op log has %d lines, summary says %d", len(lines), final.LogLines)
	}
}

// parseOpLog parses every line of an op log; with killed, a last line
// without its newline (cut by SIGKILL in the middle of a write) is allowed.
func parseOpLog(t *testing.T, path string, killed bool) []measure.LogLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []measure.LogLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l measure.LogLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			last := !bytes.HasSuffix(b, []byte("\n")) && bytes.HasSuffix(b, sc.Bytes())
			if killed && last {
				continue
			}
			t.Fatalf("op log line does not parse: %v: %q", err, sc.Text())
		}
		lines = append(lines, l)
	}
	return lines
}

// TestKilledDaemonLeavesValidOpLog kills the daemon with SIGKILL while a
// workload runs: the op log parses up to its last flushed line.
func TestKilledDaemonLeavesValidOpLog(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "kill passphrase")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	logPath := filepath.Join(tempDir(t), "op.log")
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, "--oplog", logPath, lower, mnt).expectExit(t, 0, "mount")
	pids := daemonPIDs(t, mnt)
	if len(pids) != 1 {
		t.Fatalf("daemon pids %v", pids)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Errors are expected once the daemon is gone.
			if os.WriteFile(filepath.Join(mnt, "f"+strings.Repeat("x", i%50)), []byte("data"), 0o644) != nil {
				return
			}
		}
	}()
	// Kill once the log has been flushed a few times (its size grew
	// thrice): the kill then lands between flushes, in mid-workload.
	grown, size := 0, int64(0)
	if !waitFor(t, 60*time.Second, func() bool {
		if fi, err := os.Stat(logPath); err == nil && fi.Size() > size {
			grown, size = grown+1, fi.Size()
		}
		return grown >= 3
	}) {
		t.Fatalf("the op log grew %d times in 60 s of workload", grown)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	close(stop)
	<-done
	lines := parseOpLog(t, logPath, true)
	if len(lines) == 0 {
		t.Fatal("no op log lines survived the kill")
	}
	// The dead mount is removed by the CLI, and with it the stats socket
	// the killed daemon could not remove.
	sock := control.SocketPath(mnt)
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the killed daemon's socket %s: %v (the check below would prove nothing)", sock, err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount of a dead mount")
	if isMounted(t, mnt) {
		t.Error("dead mount still present")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("stale socket %s still there after umount: %v", sock, err)
	}
}

// TestStatsOtherUserPermissionDenied: user nobody asks for the stats of
// root's mount. Its socket is in root's directory, which nobody may not
// reach: the answer is "permission denied", not "no daemon".
func TestStatsOtherUserPermissionDenied(t *testing.T) {
	requireFUSE(t)
	w := newNobodyWorld(t)
	lower := filepath.Join(tempDir(t), "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "-q", "--passthrough", lower, mnt).expectExit(t, 0, "mount")
	twincrypt(t, "", "stats", mnt).expectExit(t, 0, "stats as root")
	r := w.run(t, "stats", mnt)
	r.expectExit(t, exitError, "stats as nobody")
	if !strings.Contains(r.stderr, "mounted by uid 0: permission denied") || strings.Contains(r.stderr, "no twincrypt daemon") {
		t.Errorf("stats as nobody: %q, want permission denied", r.stderr)
	}
}
