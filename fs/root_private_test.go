package fs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// TestRootPrivatePermissions: on a mount that only root may use, the
// kernel leaves permission checks to the daemon (rootPrivate: no
// default_permissions, no FUSE_POSIX_ACL, which would cost a GETATTR of
// a directory after each change in it). Root's view must stay native:
// access(2) with every mask, chdir, open for reading and writing, and
// exec, of files and directories of every mode that matters (no execute
// bit, one execute bit, none at all, an ACL), give what they give on a
// native directory. The mount must really be root-private (no
// default_permissions in /proc/mounts, ACCESS reaching the daemon), or
// the test would prove nothing.
func TestRootPrivatePermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a root-private mount needs root")
	}
	modes := []uint32{0000, 0644, 0600, 0700, 0744, 0010, 0001, 0111, 0755}
	type probe struct {
		name string
		do   func(p string) error
	}
	probes := []probe{
		{"F_OK", func(p string) error { return unix.Access(p, unix.F_OK) }},
		{"R_OK", func(p string) error { return unix.Access(p, unix.R_OK) }},
		{"W_OK", func(p string) error { return unix.Access(p, unix.W_OK) }},
		{"X_OK", func(p string) error { return unix.Access(p, unix.X_OK) }},
		{"RWX", func(p string) error { return unix.Access(p, unix.R_OK|unix.W_OK|unix.X_OK) }},
		{"faccessat-eaccess-X", func(p string) error { return unix.Faccessat(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS) }},
		{"open-rdwr", func(p string) error {
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"exec", func(p string) error {
			// Through sh: this process serves the mount, and an exec
			// it forks itself could wait on it mid-fork. The script
			// exits 3 when it ran; sh exits 126 when execve failed.
			err := exec.Command("/bin/sh", "-c", `exec "$0"`, p).Run()
			if ee, ok := err.(*exec.ExitError); ok {
				return fmt.Errorf("exit %d", ee.ExitCode())
			}
			return err
		}},
	}
	dirProbes := []probe{
		{"X_OK", func(p string) error { return unix.Access(p, unix.X_OK) }},
		{"W_OK", func(p string) error { return unix.Access(p, unix.W_OK) }},
		{"chdir", func(p string) error {
			fd, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				return err
			}
			defer func() { unix.Fchdir(fd); unix.Close(fd) }()
			return unix.Chdir(p)
		}},
		{"list", func(p string) error { _, err := os.ReadDir(p); return err }},
		{"create-in", func(p string) error {
			q := filepath.Join(p, "new")
			err := os.WriteFile(q, nil, 0644)
			os.Remove(q)
			return err
		}},
	}
	run := func(root string) []string {
		var out []string
		for _, m := range modes {
			f := filepath.Join(root, fmt.Sprintf("f%04o", m))
			must(t, os.WriteFile(f, []byte("#!/bin/sh\nexit 3\n"), 0600))
			must(t, os.Chmod(f, os.FileMode(m)))
			for _, p := range probes {
				out = append(out, fmt.Sprintf("file %04o %s: %v", m, p.name, p.do(f)))
			}
			d := filepath.Join(root, fmt.Sprintf("d%04o", m))
			must(t, os.Mkdir(d, 0700))
			must(t, os.Chmod(d, os.FileMode(m)))
			for _, p := range dirProbes {
				out = append(out, fmt.Sprintf("dir %04o %s: %v", m, p.name, p.do(d)))
			}
		}
		// An ACL that gives an execute bit to a named user only.
		f := filepath.Join(root, "acl")
		must(t, os.WriteFile(f, []byte("#!/bin/sh\nexit 3\n"), 0644))
		if err := unix.Setxattr(f, "system.posix_acl_access", aclBytes(t), 0); err != nil {
			t.Fatalf("setfacl %s: %v", f, err)
		}
		for _, p := range probes {
			out = append(out, fmt.Sprintf("acl file %s: %v", p.name, p.do(f)))
		}
		return out
	}
	native := t.TempDir()
	want := run(native)
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			mounts, err := os.ReadFile("/proc/self/mountinfo")
			must(t, err)
			for _, l := range strings.Split(string(mounts), "\n") {
				if strings.Contains(l, " "+tm.mnt+" ") && strings.Contains(l, "default_permissions") {
					t.Fatalf("the mount is not root-private: %s", l)
				}
			}
			got := run(tm.mnt)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				for i := range want {
					if i < len(got) && got[i] != want[i] {
						t.Errorf("mount: %s; natively: %s", got[i], want[i])
					}
				}
			}
			var access int64
			for _, s := range rec.Snapshot().Ops {
				if s.Op == "access" {
					access = s.Count
				}
			}
			if access == 0 {
				t.Errorf("no ACCESS reached the daemon: the kernel checked permissions itself")
			}
		})
	}
}
