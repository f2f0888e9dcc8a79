package fs

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// setgidChildEnv makes the test binary a one-shot child that runs one
// file operation (TestSetgidChild) under the credentials its parent gave
// it through syscall.Credential: a real non-root uid, not an fsuid.
const setgidChildEnv = "TWINCRYPT_SETGID_CHILD"

// TestSetgidChild is not a test: TestSetgidDirOtherUser runs the test
// binary with TWINCRYPT_SETGID_CHILD="op path mode" as another user.
func TestSetgidChild(t *testing.T) {
	spec := os.Getenv(setgidChildEnv)
	if spec == "" {
		t.Skip("child process of TestSetgidDirOtherUser")
	}
	f := strings.Fields(spec)
	mode, _ := strconv.ParseUint(f[2], 8, 32)
	unix.Umask(022)
	var err error
	switch f[0] {
	case "create":
		var fd int
		if fd, err = unix.Open(f[1], unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, uint32(mode)); err == nil {
			unix.Close(fd)
		}
	case "mkdir":
		err = unix.Mkdir(f[1], uint32(mode))
	case "chmod":
		err = unix.Chmod(f[1], uint32(mode))
	}
	fmt.Printf("RESULT errno %d\n", errnoOf(err))
}

// copyTestBinary copies this test binary where any user may run it (go
// test builds it in a 0700 directory) and returns its path.
func copyTestBinary(t *testing.T) string {
	b, err := os.ReadFile(os.Args[0])
	must(t, err)
	dir, err := os.MkdirTemp("", "twincrypt-bin-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0755))
	bin := filepath.Join(dir, "fs.test")
	must(t, os.WriteFile(bin, b, 0755))
	return bin
}

// setgidAs runs op on p with mode as uid:gid 1000:1000 with the given
// supplementary groups, and returns the child's result line.
func setgidAs(t *testing.T, bin string, groups []uint32, op, p string, mode uint32) string {
	cmd := exec.Command(bin, "-test.run=^TestSetgidChild$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %o", setgidChildEnv, op, p, mode))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: groups}}
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if res, ok := strings.CutPrefix(line, "RESULT "); ok {
			return res
		}
	}
	t.Fatalf("%s %s as uid 1000: %v: %s", op, p, err, out)
	return ""
}

// TestSetgidDirOtherUser checks issue #16 (3) on mounts with allow_other
// served by root, against a plain directory: in a set-group-ID directory
// of group 2000, a new subdirectory keeps S_ISGID and the group whoever
// makes it; a file of a real non-root caller who is not in group 2000
// gets the group but not S_ISGID, even if asked for (the kernel's rule:
// a set-group-ID file only for members of its group), one of a member
// keeps it; and chmod g+s by a non-member owner is refused silently
// (S_ISGID cleared), as natively.
func TestSetgidDirOtherUser(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user and to serve allow_other")
	}
	bin := copyTestBinary(t)
	dirs := map[string]string{"native": t.TempDir()}
	names := []string{"native"}
	for _, v := range diffVariants {
		tm := newVolume(t, v)
		tm.mount(t, func(o *Options) { o.AllowOther = true })
		dirs[v.name] = tm.mnt
		names = append(names, v.name)
	}
	for _, dir := range dirs {
		for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
			must(t, os.Chmod(p, 0777)) // test temp dirs are 0700
		}
	}
	const group = 2000
	steps := []struct {
		who      string // root, other (uid 1000, not in the group), member (uid 1000 in it)
		op, path string
		mode     uint32
		wantMode uint32 // natively
		wantUid  uint32
		wantGid  uint32
	}{
		{"other", "create", "d/f", 02755, 0755, 1000, group},
		{"member", "create", "d/g", 02755, 02755, 1000, group},
		{"other", "mkdir", "d/e", 0777, 02755, 1000, group},
		{"root", "mkdir", "d/r", 0755, 02755, 0, group},
		{"other", "create", "d/e/h", 0644, 0644, 1000, group},
		{"other", "chmod", "d/f", 02750, 0750, 1000, group},
		{"member", "chmod", "d/g", 02750, 02750, 1000, group},
	}
	results := map[string][]string{}
	for _, name := range names {
		dir := dirs[name]
		d := filepath.Join(dir, "d")
		must(t, os.Mkdir(d, 0777))
		must(t, os.Chown(d, 0, group))
		must(t, os.Chmod(d, 0777|os.ModeSetgid))
		for _, s := range steps {
			p := filepath.Join(dir, s.path)
			var res string
			switch s.who {
			case "root":
				res = fmt.Sprintf("errno %d", errnoOf(unix.Mkdir(p, s.mode)))
			case "other":
				res = setgidAs(t, bin, nil, s.op, p, s.mode)
			case "member":
				res = setgidAs(t, bin, []uint32{group}, s.op, p, s.mode)
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				res += fmt.Sprintf(" lstat: %v", err)
			} else {
				res += " " + statLine(&st)
				if name == "native" && (st.Mode&07777 != s.wantMode || st.Uid != s.wantUid || st.Gid != s.wantGid) {
					t.Errorf("native: %s %s %s %#o: %s, want mode %04o uid %d gid %d (is the kernel's rule another?)",
						s.who, s.op, s.path, s.mode, res, s.wantMode, s.wantUid, s.wantGid)
				}
			}
			results[name] = append(results[name], fmt.Sprintf("%s %s %s %#o: %s", s.who, s.op, s.path, s.mode, res))
		}
	}
	for _, name := range names[1:] {
		for i, want := range results["native"] {
			if got := results[name][i]; got != want {
				t.Errorf("%s: %s\n  native: %s", name, got, want)
			}
		}
	}
}
