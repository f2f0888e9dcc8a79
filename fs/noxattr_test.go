package fs

import (
	"errors"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoXattr: with Options.NoXattr every xattr call fails with
// EOPNOTSUPP (a POSIX ACL reads as absent), and after the first of each kind the kernel stops asking
// the daemon; the umask is the caller's (the kernel applies it, there
// being no ACLs), access follows the mode bits, and the xattrs already
// in the volume are still there for the next mount without the option.
func TestNoXattr(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			// Set an xattr and an ACL through a mount with xattrs.
			tm.mount(t)
			f := filepath.Join(tm.mnt, "f")
			must(t, os.WriteFile(f, []byte("data"), 0o644))
			must(t, unix.Setxattr(f, "user.kept", []byte("value"), 0))
			tm.unmountNow(t)

			var dbg syncBuffer
			xattrRequests := func() int {
				return debugRequests(&dbg, "GETXATTR|LISTXATTR|SETXATTR|REMOVEXATTR")
			}
			tm.unmounted = false
			tm.mount(t, func(o *Options) {
				o.NoXattr = true
				o.AllowOther = true
				o.Debug = true
				o.DebugLog = log.New(&dbg, "", 0)
			})
			fd, err := unix.Open(f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if fd >= 0 {
					unix.Close(fd)
				}
			}()
			buf := make([]byte, 256)
			calls := []struct {
				name string
				call func() error
			}{
				{"getxattr", func() error { _, err := unix.Fgetxattr(fd, "user.kept", buf); return err }},
				{"getxattr security.selinux", func() error { _, err := unix.Fgetxattr(fd, "security.selinux", buf); return err }},
				{"getxattr ACL", func() error { _, err := unix.Fgetxattr(fd, "system.posix_acl_access", buf); return err }},
				{"listxattr", func() error { _, err := unix.Flistxattr(fd, buf); return err }},
				{"setxattr", func() error { return unix.Fsetxattr(fd, "user.new", []byte("x"), 0) }},
				{"removexattr", func() error { return unix.Fremovexattr(fd, "user.kept") }},
			}
			for round := 0; round < 3; round++ {
				before := xattrRequests()
				for _, c := range calls {
					err := c.call()
					// A FUSE mount without ACLs has none to show: the
					// kernel answers ENODATA itself.
					if !errors.Is(err, unix.EOPNOTSUPP) && !(strings.HasSuffix(c.name, "ACL") && errors.Is(err, unix.ENODATA)) {
						t.Errorf("round %d: %s: %v, want EOPNOTSUPP", round, c.name, err)
					}
				}
				n := xattrRequests() - before
				if round == 0 && n == 0 {
					t.Errorf("the first xattr calls did not reach the daemon: is the debug log read right?")
				}
				if round > 0 && n != 0 {
					t.Errorf("round %d: the xattr calls reached the daemon %d times; the kernel should have stopped asking after ENOSYS", round, n)
				}
			}

			// The caller's umask, applied once; access by the mode bits.
			out, err := exec.Command("sh", "-c", "cd "+tm.mnt+" && umask 027 && : >u && mkdir ud && stat -c %a u ud").CombinedOutput()
			if err != nil {
				t.Fatalf("create with umask 027: %v: %s", err, out)
			}
			if got := strings.Fields(string(out)); strings.Join(got, " ") != "640 750" {
				t.Errorf("modes under umask 027: %q, want 640 750", got)
			}
			// (uid 1000 must reach the mount: t.TempDir's are 0700.)
			must(t, os.Chmod(filepath.Dir(tm.mnt), 0o755))
			must(t, os.Chmod(filepath.Dir(filepath.Dir(tm.mnt)), 0o755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "public"), []byte("open"), 0o644))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "private"), []byte("secret"), 0o600))
			for name, denied := range map[string]bool{"public": false, "private": true} {
				cat := exec.Command("cat", filepath.Join(tm.mnt, name))
				cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
				out, err := cat.CombinedOutput()
				if denied != (err != nil) || denied && !strings.Contains(string(out), "Permission denied") {
					t.Errorf("uid 1000 reads %s (root's, mode %s): %v: %s", name, map[bool]string{true: "0600", false: "0644"}[denied], err, out)
				}
			}
			if out, err := exec.Command("ls", "-l", tm.mnt).CombinedOutput(); err != nil || strings.Contains(string(out), "+ ") {
				t.Errorf("ls -l: %v: %s", err, out)
			}
			unix.Close(fd)
			fd = -1
			tm.unmountNow(t)

			// Nothing was lost: the value is there without the option.
			tm.unmounted = false
			tm.mount(t)
			n, err := unix.Getxattr(f, "user.kept", buf)
			if err != nil || string(buf[:n]) != "value" {
				t.Errorf("user.kept after a mount with NoXattr: %q, %v", buf[:max(n, 0)], err)
			}
		})
	}
}
