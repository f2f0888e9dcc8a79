package fs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// nameMaxOps are system calls on paths under dir whose names are built
// from long, a name of some length: each returns its errno.
func nameMaxOps(dir, long string) []struct {
	name string
	run  func() error
} {
	p := func(rel string) string { return filepath.Join(dir, rel) }
	L := p(long)
	return []struct {
		name string
		run  func() error
	}{
		{"stat", func() error { var st unix.Stat_t; return unix.Stat(L, &st) }},
		{"lstat", func() error { var st unix.Stat_t; return unix.Lstat(L, &st) }},
		{"stat-middle", func() error { var st unix.Stat_t; return unix.Stat(L+"/x", &st) }},
		{"access", func() error { return unix.Access(L, unix.F_OK) }},
		{"open", func() error {
			fd, err := unix.Open(L, unix.O_RDONLY, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"chmod", func() error { return unix.Chmod(L, 0600) }},
		{"chown", func() error { return unix.Chown(L, 0, 0) }},
		{"lchown", func() error { return unix.Lchown(L, 0, 0) }},
		{"truncate", func() error { return unix.Truncate(L, 0) }},
		{"utimes", func() error { return unix.UtimesNano(L, []unix.Timespec{{Sec: 1}, {Sec: 1}}) }},
		{"readlink", func() error { _, err := unix.Readlink(L, make([]byte, 64)); return err }},
		{"getxattr", func() error { _, err := unix.Lgetxattr(L, "user.x", nil); return err }},
		{"link-from", func() error { return unix.Link(L, p("linked")) }},
		{"rename-from", func() error { return unix.Rename(L, p("renamed")) }},
		{"rmdir", func() error { return unix.Rmdir(L) }},
		{"unlink", func() error { return unix.Unlink(L) }},
		{"link-to", func() error { return unix.Link(p("file"), L+"2") }},
		{"rename-to", func() error { return unix.Rename(p("file"), L+"2") }},
		{"rename-dir-to", func() error { return unix.Rename(p("dir"), L+"2") }},
		{"create", func() error {
			fd, err := unix.Open(L+"3", unix.O_CREAT|unix.O_WRONLY, 0644)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"mkdir", func() error { return unix.Mkdir(L+"3", 0755) }},
		{"symlink", func() error { return unix.Symlink("file", L+"3") }},
		{"mknod", func() error { return unix.Mknod(L+"3", unix.S_IFIFO|0644, 0) }},
		// Second pass after a cached negative lookup of the same name.
		{"stat-again", func() error { var st unix.Stat_t; return unix.Stat(L, &st) }},
	}
}

// TestNameMax runs every by-name system call with a name of 256 bytes
// (one over NAME_MAX), as the last component or in the middle of a path,
// on every variant: the errno must be the native directory's,
// ENAMETOOLONG, never ENOENT.
func TestNameMax(t *testing.T) {
	long := strings.Repeat("n", 256)
	run := func(t *testing.T, dir string) map[string]syscall.Errno {
		must(t, os.WriteFile(filepath.Join(dir, "file"), []byte("x"), 0644))
		must(t, os.Mkdir(filepath.Join(dir, "dir"), 0755))
		res := map[string]syscall.Errno{}
		for _, op := range nameMaxOps(dir, long) {
			res[op.name] = errnoOf(op.run())
		}
		return res
	}
	ref := run(t, t.TempDir())
	for op, e := range ref {
		if e != syscall.ENAMETOOLONG {
			t.Fatalf("native %s of a 256-byte name: %v, want ENAMETOOLONG", op, e)
		}
	}
	for _, v := range everyVariant() {
		t.Run(v.name, func(t *testing.T) {
			got := run(t, mountVariant(t, v).mnt)
			for _, op := range nameMaxOps("", "") {
				if got[op.name] != ref[op.name] {
					t.Errorf("%s with a 256-byte name: %v, native %v", op.name, got[op.name], ref[op.name])
				}
			}
		})
	}
}

// TestNameMaxExisting works on an existing entry with a 255-byte name:
// every op succeeds as natively.
func TestNameMaxExisting(t *testing.T) {
	name := strings.Repeat("e", 255)
	run := func(t *testing.T, dir string) {
		p := filepath.Join(dir, name)
		other := filepath.Join(dir, strings.Repeat("o", 255))
		must(t, os.WriteFile(p, []byte("data"), 0644))
		var st unix.Stat_t
		steps := []struct {
			what string
			err  error
		}{
			{"stat", unix.Stat(p, &st)},
			{"chmod", unix.Chmod(p, 0600)},
			{"chown", unix.Chown(p, 0, 0)},
			{"lchown", unix.Lchown(p, 0, 0)},
			{"truncate", unix.Truncate(p, 2)},
			{"link", unix.Link(p, other)},
			{"unlink", unix.Unlink(other)},
			{"rename", unix.Rename(p, other)},
			{"rename-back", unix.Rename(other, p)},
			{"unlink-last", unix.Unlink(p)},
			{"mkdir", unix.Mkdir(p, 0755)},
			{"rmdir", unix.Rmdir(p)},
		}
		for _, s := range steps {
			if s.err != nil {
				t.Errorf("%s of a 255-byte name: %v", s.what, s.err)
			}
		}
	}
	run(t, t.TempDir())
	for _, v := range everyVariant() {
		t.Run(v.name, func(t *testing.T) { run(t, mountVariant(t, v).mnt) })
	}
}
