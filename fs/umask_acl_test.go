package fs

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Creates, POSIX ACLs and xattr namespaces compared with the native
// filesystem. The umask is per process and the ACL checks are about other
// users, so the calls are made by child processes: the test binary again
// (TestModeHelper), run with a script, as root or as uid 1000.

// modeVariants are the mounts under test: every cipher, plaintext names
// and the twin.
var modeVariants = append(append([]variant(nil), variants...),
	variant{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true})

// modeTargets mounts every variant (with allow_other, so that other users
// get in) and returns them and a native directory, all reachable by other
// users, with the names in order (native first).
func modeTargets(t *testing.T) (names []string, dirs map[string]string) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as other users, and the daemon's root-only paths")
	}
	names = []string{"native"}
	dirs = map[string]string{"native": t.TempDir()}
	for _, v := range modeVariants {
		tm := newVolume(t, v)
		tm.mount(t, func(o *Options) { o.AllowOther = true })
		names = append(names, v.name)
		dirs[v.name] = tm.mnt
	}
	for _, dir := range dirs {
		// Test temp dirs are 0700: let other users reach the mounts.
		for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
			must(t, os.Chmod(p, 0777))
		}
	}
	return names, dirs
}

const modeHelperEnv = "TWINCRYPT_MODE_HELPER"

// helperBin is a copy of the test binary that other users may run (the
// build directory is private to root).
func helperBin(t *testing.T) string {
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0755))
	for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
		must(t, os.Chmod(p, 0755))
	}
	src, err := os.Open(os.Args[0])
	must(t, err)
	defer src.Close()
	bin := filepath.Join(dir, "helper.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0755)
	must(t, err)
	_, err = io.Copy(dst, src)
	must(t, err)
	must(t, dst.Close())
	return bin
}

// runScript runs script (one call per line, see TestModeHelper) in base as
// uid (0: root) and returns one result line per call.
func runScript(t *testing.T, bin string, uid uint32, base, script string) []string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestModeHelper$")
	cmd.Env = append(os.Environ(), modeHelperEnv+"="+base)
	// From /, never from a mount this process serves; no descriptor of
	// this process is open on a mount here (see startMmapHelper).
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid %d in %s: %v: %s", uid, base, err, out)
	}
	var res []string
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "RES "); ok {
			res = append(res, r)
		}
	}
	if n := len(strings.Split(strings.TrimSpace(script), "\n")); len(res) != n {
		t.Fatalf("helper as uid %d in %s: %d results for %d calls: %s", uid, base, len(res), n, out)
	}
	return res
}

// TestModeHelper is not a test: the tests of this file run the test binary
// with TWINCRYPT_MODE_HELPER=<base directory> and a script on stdin, one
// call per line with paths relative to the base; it prints "RES <call>:
// <result>" per line (an errno name, or ok and what was read).
func TestModeHelper(t *testing.T) {
	base := os.Getenv(modeHelperEnv)
	if base == "" {
		t.Skip("helper process for the mode and ACL tests")
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		fmt.Printf("RES %s: %s\n", sc.Text(), helperCall(base, f))
	}
	os.Exit(0)
}

func helperCall(base string, f []string) string {
	p := func(i int) string { return filepath.Join(base, f[i]) }
	num := func(i int) uint32 {
		n, _ := strconv.ParseUint(f[i], 8, 32)
		return uint32(n)
	}
	res := func(err error) string {
		if err != nil {
			return faultErrnoName(errnoOf(err))
		}
		return "ok"
	}
	switch f[0] {
	case "umask":
		syscall.Umask(int(num(1)))
		return "ok"
	case "create":
		fd, err := unix.Open(p(1), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, num(2))
		if err == nil {
			unix.Close(fd)
		}
		return res(err)
	case "mkdir":
		return res(unix.Mkdir(p(1), num(2)))
	case "mkfifo":
		return res(unix.Mkfifo(p(1), num(2)))
	case "symlink":
		return res(unix.Symlink(f[2], p(1)))
	case "lstat":
		var st unix.Stat_t
		if err := unix.Lstat(p(1), &st); err != nil {
			return res(err)
		}
		return fmt.Sprintf("mode %07o", st.Mode)
	case "read":
		b, err := os.ReadFile(p(1))
		if err != nil {
			return res(err)
		}
		return fmt.Sprintf("ok %q", b)
	case "append":
		fd, err := unix.Open(p(1), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
		if err == nil {
			_, err = unix.Write(fd, []byte("x"))
			unix.Close(fd)
		}
		return res(err)
	case "getxattr":
		buf := make([]byte, 4096)
		n, err := unix.Lgetxattr(p(1), f[2], buf)
		if err != nil {
			return res(err)
		}
		return "ok " + hex.EncodeToString(buf[:n])
	case "setxattr":
		v, _ := hex.DecodeString(f[3])
		return res(unix.Lsetxattr(p(1), f[2], v, 0))
	case "removexattr":
		return res(unix.Lremovexattr(p(1), f[2]))
	case "listxattr":
		buf := make([]byte, 4096)
		n, err := unix.Llistxattr(p(1), buf)
		if err != nil {
			return res(err)
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		return "ok " + strings.Join(names, ",")
	}
	return "unknown call"
}

// compareTargets fails for every result line of a target that differs
// from the native one.
func compareTargets(t *testing.T, what string, names []string, got map[string][]string) {
	t.Helper()
	ref := got["native"]
	for _, name := range names[1:] {
		for i, line := range got[name] {
			if i < len(ref) && line != ref[i] {
				t.Errorf("%s on %s: %s, natively %s", what, name, line, ref[i])
			}
		}
	}
}

// createScript makes one of each kind of entry with various modes under
// dir, then lstats them all.
func createScript(dir string) string {
	calls := []string{
		"create f0666 0666", "create f0620 0620", "create f0777 0777", "create f4777 4777", "create f0600 0600",
		"mkdir d0777 0777", "mkdir d0750 0750", "mkdir d1777 1777",
		"mkfifo p0666 0666", "mkfifo p0640 0640",
		"symlink l f0666",
	}
	var b strings.Builder
	for _, c := range calls {
		f := strings.Fields(c)
		fmt.Fprintf(&b, "%s %s/%s %s\n", f[0], dir, f[1], strings.Join(f[2:], " "))
	}
	for _, c := range calls {
		fmt.Fprintf(&b, "lstat %s/%s\n", dir, strings.Fields(c)[1])
	}
	return b.String()
}

// Fixed here (issue #11, item 2): the daemon's own umask was applied on
// top of the caller's, which the kernel had applied already. A daemon
// started with umask 0022 made a 0620 file 0600, a 0666 FIFO 0644, the
// files of a user with umask 0002 0644 instead of 0664, and a 04777 file
// 04755. Each umask is set in the child process that creates.
func TestCreateModesFollowCallerUmask(t *testing.T) {
	names, dirs := modeTargets(t)
	bin := helperBin(t)
	// The daemon is this process: give it a umask unlike most callers'.
	defer syscall.Umask(syscall.Umask(0027))
	for _, umask := range []string{"0000", "0002", "0022", "0077"} {
		got := map[string][]string{}
		for _, name := range names {
			sub := "u" + umask
			must(t, os.Mkdir(filepath.Join(dirs[name], sub), 0777))
			must(t, os.Chmod(filepath.Join(dirs[name], sub), 0777))
			got[name] = runScript(t, bin, 0, dirs[name], "umask "+umask+"\n"+createScript(sub))
		}
		compareTargets(t, "umask "+umask, names, got)
		// The oracle applies the umask, so the comparison has teeth.
		want := map[string]string{"0000": "f0666: mode 0100666", "0002": "f0666: mode 0100664",
			"0022": "f0620: mode 0100600", "0077": "d0777: mode 0040700"}[umask]
		found := false
		for _, line := range got["native"] {
			found = found || strings.Contains(line, want)
		}
		if !found {
			t.Errorf("umask %s natively: no %q in %q", umask, want, got["native"])
		}
	}
}

// Fixed here (issue #11, item 2): a 04777 file made by root under umask 0
// came out 04755, so another user's write failed with EACCES instead of
// succeeding and clearing the set-user-ID bit.
func TestSetuidFileWrittenByOtherUser(t *testing.T) {
	names, dirs := modeTargets(t)
	bin := helperBin(t)
	defer syscall.Umask(syscall.Umask(0022))
	got := map[string][]string{}
	for _, name := range names {
		res := runScript(t, bin, 0, dirs[name], "umask 0\ncreate suid 4777\n")
		res = append(res, runScript(t, bin, 1000, dirs[name], "append suid\n")...)
		res = append(res, runScript(t, bin, 0, dirs[name], "lstat suid\n")...)
		got[name] = res
	}
	compareTargets(t, "set-uid file", names, got)
	if n := got["native"]; len(n) != 4 || !strings.HasSuffix(n[2], ": ok") || !strings.HasSuffix(n[3], "mode 0100777") {
		t.Errorf("natively: %q, want the write to succeed and clear the set-user-ID bit", n)
	}
}
