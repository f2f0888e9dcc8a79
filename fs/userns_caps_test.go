package fs

import (
	"encoding/binary"
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// minimalACLValue is a system.posix_acl_access value (version 2) with no
// named entry (user rwx, group r-x, others r-x), which a process in a user
// namespace that maps only its own uid may set: the kernel still applies
// its set-group-ID rule to it (posix_acl_update_mode).
func minimalACLValue() string {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 2)
	for _, e := range [][2]uint16{{0x01, 7}, {0x04, 5}, {0x20, 5}} {
		b = binary.LittleEndian.AppendUint16(b, e[0])
		b = binary.LittleEndian.AppendUint16(b, e[1])
		b = binary.LittleEndian.AppendUint32(b, 0xffffffff)
	}
	return hex.EncodeToString(b)
}

// runScriptUserns is runScript as uid 1000 inside `unshare -Ur`: a user
// namespace of its own where it is root, with every capability in CapEff
// of /proc/PID/status, none of which counts outside that namespace.
func runScriptUserns(t *testing.T, bin, base, script string) []string {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) (util-linux)")
	}
	cmd := exec.Command(unshare, "-Ur", bin, "-test.run=^TestModeHelper$")
	cmd.Env = append(os.Environ(), modeHelperEnv+"="+base)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "unshare failed") {
			t.Skipf("no unprivileged user namespaces here: %s", out)
		}
		t.Fatalf("helper as uid 1000 in unshare -Ur in %s: %v: %s", base, err, out)
	}
	var res []string
	for _, line := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(line, "RES "); ok {
			res = append(res, r)
		}
	}
	if n := len(strings.Split(strings.TrimSpace(script), "\n")); len(res) != n {
		t.Fatalf("helper in unshare -Ur: %d results for %d calls: %s", len(res), n, out)
	}
	return res
}

// Fixed here (issue #39, finding 4): the daemon took a caller's
// capabilities from CapEff of /proc/PID/status, which counts the
// capabilities of the caller's own user namespace. Uid 1000 in
// `unshare -Ur` (root of a namespace it made) saw trusted.* names that
// only CAP_SYS_ADMIN of the initial namespace lists, and its ACL change
// kept a set-group-ID bit (group 2000, not its own) that the native
// filesystem clears. Root of the initial namespace keeps both. On every
// variant and both transports, compared with a native directory.
func TestUsernsCallerNotCapable(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user and to serve allow_other")
	}
	bin := helperBin(t)
	acl := minimalACLValue()
	const group = 2000
	for _, tr := range []string{TransportDev, TransportUring} {
		t.Run(tr, func(t *testing.T) {
			if tr == TransportUring {
				requireUringKernel(t)
			}
			names := []string{"native"}
			dirs := map[string]string{"native": t.TempDir()}
			for _, v := range modeVariants {
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.AllowOther = true; o.Transport = tr })
				if info := TransportOf(tm.srv); info.Name != tr {
					t.Fatalf("%s: asked for %s, runs on %s", v.name, tr, info)
				}
				names = append(names, v.name)
				dirs[v.name] = tm.mnt
			}
			for _, dir := range dirs {
				for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
					must(t, os.Chmod(p, 0777))
				}
			}
			got := map[string][]string{}
			for _, name := range names {
				for _, f := range []string{"u", "r"} {
					x := filepath.Join(dirs[name], f)
					must(t, os.WriteFile(x, nil, 0644))
					must(t, os.Chown(x, 1000, group))
					must(t, os.Chmod(x, 0775|os.ModeSetgid))
					must(t, unix.Setxattr(x, "trusted.t", []byte("x"), 0))
					must(t, unix.Setxattr(x, "user.u", []byte("y"), 0))
				}
				res := runScriptUserns(t, bin, dirs[name], strings.Join([]string{
					"listxattr u", "setxattr u system.posix_acl_access " + acl, "lstat u",
				}, "\n")+"\n")
				res = append(res, runScript(t, bin, 0, dirs[name], strings.Join([]string{
					"lstat u", "listxattr r", "setxattr r system.posix_acl_access " + acl, "lstat r",
				}, "\n")+"\n")...)
				got[name] = res
			}
			compareTargets(t, "uid 1000 in unshare -Ur, then root", names, got)
			n := strings.Join(got["native"], "\n")
			for _, want := range []string{"listxattr u: ok user.u", "lstat u: mode 0100755",
				"listxattr r: ok trusted.t,user.u", "lstat r: mode 0102755"} {
				if !strings.Contains(n, want) {
					t.Errorf("natively no %q in:\n%s", want, n)
				}
			}
		})
	}
}
