package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

func TestQuery(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	mnt := t.TempDir()
	rec := measure.NewRecorder("m")
	rec.Start(measure.OpRead, 1).End(0)
	srv, err := Listen(mnt, rec.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	snap, err := Query(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Ops) != 1 || snap.Ops[0].Op != "read" || snap.Ops[0].Count != 1 {
		t.Fatalf("snapshot %+v", snap.Ops)
	}
	st, err := os.Stat(srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
	dst, _ := os.Stat(filepath.Dir(srv.Path()))
	if dst.Mode().Perm() != 0700 {
		t.Errorf("socket directory mode %v, want 0700", dst.Mode().Perm())
	}
	// The daemon is this process, and the socket says so.
	if pid, err := ServerPID(mnt); err != nil || pid != os.Getpid() {
		t.Errorf("ServerPID = %d, %v; want %d", pid, err, os.Getpid())
	}
	// A second daemon for the same mount point is refused.
	if _, err := Listen(mnt, rec.Snapshot); err == nil {
		t.Error("second server on the same mount point accepted")
	}
	srv.Close()
	if _, err := Query(mnt); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("query after close: %v", err)
	}
	if _, err := ServerPID(mnt); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("ServerPID after close: %v", err)
	}
	// A socket left behind by a killed daemon does not block a new one.
	srv2, err := Listen(mnt, rec.Snapshot)
	if err != nil {
		t.Fatalf("listen after close: %v", err)
	}
	srv2.Close()
}

// The test binary doubles as a daemon or client run as another user:
// started with controlHelperEnv set to "listen" or "query", it acts on the
// mount point in controlHelperEnv_MNT and prints one line.
const controlHelperEnv = "TWINCRYPT_CONTROL_HELPER"

func init() {
	mode := os.Getenv(controlHelperEnv)
	if mode == "" {
		return
	}
	mnt := os.Getenv(controlHelperEnv + "_MNT")
	switch mode {
	case "listen":
		// Listen, say so, serve until stdin closes.
		srv, err := Listen(mnt, func() measure.Snapshot { return measure.Snapshot{Mount: "helper"} })
		if err != nil {
			fmt.Printf("err unsafe=%v %v\n", errors.Is(err, ErrUnsafeDir), err)
			os.Exit(1)
		}
		fmt.Printf("ok %s\n", srv.Path())
		io.Copy(io.Discard, os.Stdin)
		srv.Close()
	case "query":
		snap, err := Query(mnt)
		if err != nil {
			fmt.Printf("err permission=%v foreign=%v %v\n", errors.Is(err, ErrPermission), errors.Is(err, ErrForeignServer), err)
			os.Exit(1)
		}
		fmt.Printf("ok %s\n", snap.Mount)
	case "pid":
		pid, err := ServerPID(mnt)
		if err != nil {
			fmt.Printf("err permission=%v foreign=%v %v\n", errors.Is(err, ErrPermission), errors.Is(err, ErrForeignServer), err)
			os.Exit(1)
		}
		fmt.Printf("ok %d\n", pid)
	case "fake":
		// Another user's server in the socket's place, in a directory it
		// left open to all: it answers every connection with made-up
		// numbers and terminal escapes, until stdin closes.
		path := SocketPath(mnt)
		os.MkdirAll(filepath.Dir(path), 0o777)
		os.Chmod(filepath.Dir(path), 0o777)
		ln, err := net.Listen("unix", path)
		if err != nil {
			fmt.Printf("err %v\n", err)
			os.Exit(1)
		}
		os.Chmod(path, 0o777)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				bufio.NewReader(c).ReadString('\n')
				m, _ := json.Marshal(forgedMount)
				fmt.Fprintf(c, "{\"mount\":%s,\"ops\":[{\"op\":\"read\",\"count\":999999}]}\n", m)
				c.Close()
			}
		}()
		fmt.Printf("ok %s\n", path)
		io.Copy(io.Discard, os.Stdin)
		ln.Close()
	}
	os.Exit(0)
}

// forgedMount is what a fake server puts in its answer: a sequence that
// would set the terminal's title and clear the screen if printed raw.
const forgedMount = "\x1b]0;owned\x07\x1b[2J/mnt/shared"

const (
	uidNobody = 65534 // the helper's user: owns nothing the tests made
	uidOther  = 65533 // a third user, for the stats client
)

// otherUserBase makes a directory like /tmp (root's, 01777) that users
// other than root may reach, and a copy of the test binary they may run.
func otherUserBase(t *testing.T) (base, helper string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as other users")
	}
	top, err := os.MkdirTemp("", "tc-control-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	base = filepath.Join(top, "tmp")
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o1777); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	helper = filepath.Join(top, "helper")
	if err := os.WriteFile(helper, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return base, helper
}

// asUser prepares the helper in mode as uid with env (XDG_RUNTIME_DIR and
// TMPDIR cleared unless env sets them).
func asUser(helper string, uid uint32, mode, mnt string, env ...string) *exec.Cmd {
	cmd := exec.Command(helper)
	cmd.Dir = "/"
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "XDG_RUNTIME_DIR=") && !strings.HasPrefix(kv, "TMPDIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, controlHelperEnv+"="+mode, controlHelperEnv+"_MNT="+mnt)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}

func permOf(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

// TestListenRefusesUnsafeDir plants what another user could put at
// $TMPDIR/twincrypt-UID before the daemon of user UID (nobody, with
// XDG_RUNTIME_DIR unset) starts: a symlink to a directory of the victim's,
// a directory of the attacker's, a directory of the victim's own that is
// open to others. Each is refused with a message that says why, and none
// is changed; with nothing planted the daemon serves.
func TestListenRefusesUnsafeDir(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, dir string) (check string)
		want  string
	}{
		{"symlink", func(t *testing.T, dir string) string {
			// The link is root's, not nobody's; its target is a directory
			// of nobody's that the daemon would chmod 0700 and fill.
			target := filepath.Join(filepath.Dir(filepath.Dir(dir)), "victim")
			if err := os.Mkdir(target, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(target, uidNobody, uidNobody); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(target, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dir); err != nil {
				t.Fatal(err)
			}
			return target
		}, "is a symlink"},
		{"others-directory", func(t *testing.T, dir string) string {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "is owned by uid 0"},
		{"open-mode", func(t *testing.T, dir string) string {
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, uidNobody, uidNobody); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "has mode 0750"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base, helper := otherUserBase(t)
			dir := filepath.Join(base, fmt.Sprintf("twincrypt-%d", uidNobody))
			check := c.plant(t, dir)
			modeBefore := permOf(t, check)
			out, err := asUser(helper, uidNobody, "listen", "/mnt/planted", "TMPDIR="+base).CombinedOutput()
			line := strings.TrimSpace(string(out))
			if err == nil || !strings.HasPrefix(line, "err unsafe=true ") || !strings.Contains(line, c.want) || !strings.Contains(line, "refusing") {
				t.Errorf("daemon of nobody with %s planted: %v: %q, want a refusal saying %q", c.name, err, line, c.want)
			}
			if m := permOf(t, check); m != modeBefore {
				t.Errorf("%s changed from %v to %v", check, modeBefore, m)
			}
			if ents, _ := os.ReadDir(check); len(ents) != 0 {
				t.Errorf("%s got a socket: %v", check, ents)
			}
			t.Logf("daemon said: %s", line)
		})
	}
	t.Run("normal", func(t *testing.T) {
		base, helper := otherUserBase(t)
		dir := filepath.Join(base, fmt.Sprintf("twincrypt-%d", uidNobody))
		srv := asUser(helper, uidNobody, "listen", "/mnt/normal", "TMPDIR="+base)
		stdin, err := srv.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := srv.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		defer srv.Wait()
		defer stdin.Close()
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		if !strings.HasPrefix(line, "ok "+dir+"/") {
			t.Fatalf("daemon of nobody: %q, want ok and a socket in %s", line, dir)
		}
		st, err := os.Lstat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !st.IsDir() || st.Mode().Perm() != 0o700 || st.Sys().(*syscall.Stat_t).Uid != uidNobody {
			t.Errorf("socket directory %v uid %d, want a 0700 directory of nobody's", st.Mode(), st.Sys().(*syscall.Stat_t).Uid)
		}
		out, err := asUser(helper, uidNobody, "query", "/mnt/normal", "TMPDIR="+base).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok helper" {
			t.Errorf("query by the daemon's user: %v: %s", err, out)
		}
	})
}

// TestQueryOtherUserPermissionDenied: a user who may not reach the
// daemon's socket (its directory is another user's, 0700) is told
// "permission denied", not that no daemon serves the mount.
func TestQueryOtherUserPermissionDenied(t *testing.T) {
	base, helper := otherUserBase(t)
	xdg := "XDG_RUNTIME_DIR=" + base // both users look in the same place
	stop := startAsNobody(t, helper, "listen", xdg)
	defer stop()
	out, err := asUser(helper, uidOther, "query", "/mnt/shared", xdg).CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err == nil || !strings.HasPrefix(line, "err permission=true ") || !strings.Contains(line, "permission denied") {
		t.Errorf("query by another user: %v: %q, want permission denied", err, line)
	}
	// The daemon's own user gets the answer.
	if out, err := asUser(helper, uidNobody, "query", "/mnt/shared", xdg).CombinedOutput(); err != nil {
		t.Errorf("query by the daemon's user: %v: %s", err, out)
	}
}

// TestQueryRefusesForeignServer (issue #16 (4)): another user (nobody)
// serves a socket at the name the client will use, in a directory it left
// open to all (XDG_RUNTIME_DIR shared), and answers with made-up numbers
// and terminal escapes. The client of a third user checks the server's
// credentials (SO_PEERCRED) and refuses the answer; the daemon's own user
// (here nobody, for whom the fake is "its own" server) would read it.
func TestQueryRefusesForeignServer(t *testing.T) {
	base, helper := otherUserBase(t)
	xdg := "XDG_RUNTIME_DIR=" + base
	stop := startAsNobody(t, helper, "fake", xdg)
	defer stop()
	out, err := asUser(helper, uidOther, "query", "/mnt/shared", xdg).CombinedOutput()
	line := strings.TrimSpace(string(out))
	if err == nil || !strings.HasPrefix(line, "err permission=false foreign=true ") {
		t.Errorf("query by another user of a fake server: %v: %q, want the answer refused (ErrForeignServer)", err, line)
	}
	if strings.Contains(line, "\x1b") {
		t.Errorf("the client's message carries the server's escapes: %q", line)
	}
	// Nor does umount take the fake's process for the daemon to wait for.
	out, err = asUser(helper, uidOther, "pid", "/mnt/shared", xdg).CombinedOutput()
	if line := strings.TrimSpace(string(out)); err == nil || !strings.HasPrefix(line, "err permission=false foreign=true ") {
		t.Errorf("ServerPID by another user of a fake server: %v: %q, want ErrForeignServer", err, line)
	}
	// Proof that the fake answers: its own user reads it.
	if out, err := asUser(helper, uidNobody, "query", "/mnt/shared", xdg).CombinedOutput(); err != nil || !strings.Contains(string(out), "owned") {
		t.Errorf("query by the fake server's own user: %v: %s", err, out)
	}
}

// startAsNobody starts the helper's server mode verb ("listen", "fake")
// for /mnt/shared as user nobody and waits until it serves; stop ends it
// (closing its stdin) and waits for it.
func startAsNobody(t *testing.T, helper, verb, xdg string) (stop func()) {
	t.Helper()
	srv := asUser(helper, uidNobody, verb, "/mnt/shared", xdg)
	stdin, err := srv.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		stdin.Close()
		srv.Wait()
	}
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); !strings.HasPrefix(line, "ok ") {
		stop()
		t.Fatalf("%s server of nobody: %q", verb, line)
	}
	return stop
}
