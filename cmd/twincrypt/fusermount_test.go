package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// uidNobody is the unprivileged user the tests below run the binary as.
const uidNobody = 65534

// nobodyWorld is a directory tree user nobody can use: a copy of the
// binary, a LOWER and a mount point of nobody's, and a 01777 TMPDIR.
type nobodyWorld struct {
	bin, lower, mnt, tmp string
}

func newNobodyWorld(t *testing.T) *nobodyWorld {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the binary as user nobody")
	}
	top, err := os.MkdirTemp("", "tc-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if top, err = filepath.EvalSymlinks(top); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	w := &nobodyWorld{
		bin:   filepath.Join(top, "twincrypt"),
		lower: filepath.Join(top, "lower"),
		mnt:   filepath.Join(top, "mnt"),
		tmp:   filepath.Join(top, "tmp"),
	}
	b, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{w.lower, w.mnt, w.tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{w.lower, w.mnt} {
		if err := os.Chown(d, uidNobody, uidNobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(w.tmp, 0o1777); err != nil {
		t.Fatal(err)
	}
	// Should the mount succeed after all, it must not outlive the test.
	unmountOnCleanup(t, w.mnt)
	return w
}

// run runs the binary as nobody, with XDG_RUNTIME_DIR unset and TMPDIR
// in the world.
func (w *nobodyWorld) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/", "TMPDIR=" + w.tmp}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uidNobody, Gid: uidNobody}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("twincrypt %s as nobody: %v", strings.Join(args, " "), err)
	}
	return r
}

// userAllowOther reports whether /etc/fuse.conf lets users mount with
// allow_other.
func userAllowOther() bool {
	f, err := os.Open("/etc/fuse.conf")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "user_allow_other" {
			return true
		}
	}
	return false
}

// fusermountReason is what fusermount3 says when user nobody may not
// mount with allow_other: the option itself, or, where /dev/fuse is
// root's alone, the device.
var fusermountReason = regexp.MustCompile(`fusermount3?: (option allow_other only allowed if 'user_allow_other' is set in /etc/fuse\.conf|failed to open /dev/fuse: Permission denied) \(fusermount exited with status 1\)`)

// TestMountFusermountMessage mounts as user nobody with -o allow_other,
// which /etc/fuse.conf does not allow (or /dev/fuse is root's alone): the
// foreground and the background mount both fail with exit code 14 and the
// same one-line error carrying fusermount3's own message and exit status,
// not go-fuse's raw wait status ("code 256").
func TestMountFusermountMessage(t *testing.T) {
	requireFUSE(t)
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("needs fusermount3 (Debian package fuse3)")
	}
	if userAllowOther() {
		t.Skip("/etc/fuse.conf sets user_allow_other: nothing refuses allow_other here")
	}
	w := newNobodyWorld(t)
	var stderrs []string
	for _, bg := range []bool{false, true} {
		args := []string{"mount", "--passthrough", "-o", "allow_other", w.lower, w.mnt}
		if bg {
			args = append([]string{"mount", "--background"}, args[1:]...)
		}
		r := w.run(t, args...)
		r.expectExit(t, exitMountFailed, strings.Join(args, " ")+" as nobody")
		if !fusermountReason.MatchString(r.stderr) || strings.Contains(r.stderr, "code 256") {
			t.Errorf("%s as nobody: stderr %q, want fusermount3's message and exit status", strings.Join(args, " "), r.stderr)
		}
		stderrs = append(stderrs, r.stderr)
	}
	if stderrs[0] != stderrs[1] {
		t.Errorf("foreground and background say different things:\n%s%s", stderrs[0], stderrs[1])
	}
	t.Logf("foreground: %s", stderrs[0])
}

// TestMountWarnsOfPlantedStatsDir: with XDG_RUNTIME_DIR unset, another
// user (root here) has planted a symlink at $TMPDIR/twincrypt-65534 before
// nobody mounts in the background. The mount says on the terminal that it
// refuses the directory and runs without live stats (the mount itself may
// fail afterwards where nobody may not mount; the warning comes first).
func TestMountWarnsOfPlantedStatsDir(t *testing.T) {
	requireFUSE(t)
	w := newNobodyWorld(t)
	target := filepath.Join(filepath.Dir(w.tmp), "victim")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(target, uidNobody, uidNobody); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(w.tmp, "twincrypt-65534")
	if err := os.Symlink(target, planted); err != nil {
		t.Fatal(err)
	}
	r := w.run(t, "mount", "--background", "--passthrough", w.lower, w.mnt)
	want := "twincrypt: warning: stats socket directory " + planted + " is a symlink (owned by uid 0): refusing it; live stats off\n"
	if !strings.HasPrefix(r.stderr, want) {
		t.Errorf("background mount as nobody with a planted symlink: exit %d, stderr %q, want it to start with %q", r.code, r.stderr, want)
	}
	if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("symlink target changed: %v %v", st.Mode(), err)
	}
}
