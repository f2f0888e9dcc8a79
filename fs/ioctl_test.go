package fs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	testImmutableFl = 0x00000010 // FS_IMMUTABLE_FL
	testNodumpFl    = 0x00000040 // FS_NODUMP_FL
	testNoatimeFl   = 0x00000080 // FS_NOATIME_FL
	testXflagNoatim = 0x00000040 // FS_XFLAG_NOATIME
)

func ioctlFlags(t *testing.T, p string) uint32 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	v, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("FS_IOC_GETFLAGS %s: %v", p, err)
	}
	return v
}

func setIoctlFlags(p string, v uint32) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(v))
}

func fsxattrFlags(t *testing.T, p string) uint32 {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	var x [fsxattrSize]byte
	if errno := fsxattr(untimed, fd, fsIocFsgetxattr, &x); errno != 0 {
		t.Fatalf("FS_IOC_FSGETXATTR %s: %v", p, errno)
	}
	return binary.NativeEndian.Uint32(x[:])
}

// TestInodeFlags: lsattr and chattr (FS_IOC_GETFLAGS/SETFLAGS, and
// FS_IOC_FSGETXATTR as xfs_io asks) give on the mounts what they give
// natively: the same flags, set flags that last over a remount, an
// immutable file that refuses writes and removal, the ctime moved by a
// change. The append-only flag is the one difference, refused with
// EOPNOTSUPP (docs/differences.md, "Inode flags").
func TestInodeFlags(t *testing.T) {
	native := t.TempDir()
	if _, err := os.Create(filepath.Join(native, "probe")); err != nil {
		t.Fatal(err)
	}
	if err := setIoctlFlags(filepath.Join(native, "probe"), 0); errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EOPNOTSUPP) {
		t.Skipf("the filesystem under %s has no inode flags: %v", native, err)
	}
	if os.Geteuid() != 0 {
		t.Skip("setting the immutable flag needs CAP_LINUX_IMMUTABLE (root)")
	}
	type seen struct{ file, dir, fileSet, dirSet uint32 }
	check := func(t *testing.T, dir string, remount func()) seen {
		f, d := filepath.Join(dir, "f"), filepath.Join(dir, "d")
		must(t, os.WriteFile(f, []byte("content"), 0644))
		must(t, os.Mkdir(d, 0755))
		var s seen
		s.file, s.dir = ioctlFlags(t, f), ioctlFlags(t, d)

		var before, after unix.Stat_t
		must(t, unix.Stat(f, &before))
		time.Sleep(30 * time.Millisecond) // past the kernel clock's tick
		must(t, setIoctlFlags(f, s.file|testNoatimeFl))
		must(t, setIoctlFlags(d, s.dir|testNodumpFl))
		must(t, unix.Stat(f, &after))
		if after.Ctim == before.Ctim {
			t.Errorf("chattr +A left the ctime at %d.%09d", before.Ctim.Sec, before.Ctim.Nsec)
		}
		s.fileSet, s.dirSet = ioctlFlags(t, f), ioctlFlags(t, d)
		if s.fileSet&testNoatimeFl == 0 || s.dirSet&testNodumpFl == 0 {
			t.Errorf("flags set %#x / %#x, read back %#x / %#x", s.file|testNoatimeFl, s.dir|testNodumpFl, s.fileSet, s.dirSet)
		}
		if x := fsxattrFlags(t, f); x&testXflagNoatim == 0 {
			t.Errorf("FS_IOC_FSGETXATTR: xflags %#x without FS_XFLAG_NOATIME after chattr +A", x)
		}

		must(t, setIoctlFlags(f, s.fileSet|testImmutableFl))
		t.Cleanup(func() { setIoctlFlags(f, 0) }) // else nothing can remove it
		if _, err := os.OpenFile(f, os.O_WRONLY, 0); !errors.Is(err, syscall.EPERM) {
			t.Errorf("open for writing an immutable file: %v, want EPERM", err)
		}
		if err := os.Remove(f); !errors.Is(err, syscall.EPERM) {
			t.Errorf("unlink of an immutable file: %v, want EPERM", err)
		}
		must(t, setIoctlFlags(f, s.fileSet))
		must(t, os.WriteFile(f, []byte("changed"), 0644))

		if remount != nil {
			remount()
			if got := ioctlFlags(t, f); got != s.fileSet {
				t.Errorf("after a remount: file flags %#x, set %#x", got, s.fileSet)
			}
			if got := ioctlFlags(t, d); got != s.dirSet {
				t.Errorf("after a remount: directory flags %#x, set %#x", got, s.dirSet)
			}
		}
		return s
	}
	want := check(t, native, nil)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			got := check(t, tm.mnt, func() { tm.unmountNow(t); tm.mount(t); tm.unmounted = false })
			if got != want {
				t.Errorf("flags (file, dir, after chattr) %#x, natively %#x", got, want)
			}
			f := filepath.Join(tm.mnt, "f")
			if err := setIoctlFlags(f, ioctlFlags(t, f)|fsAppendFl); !errors.Is(err, syscall.EOPNOTSUPP) {
				t.Errorf("chattr +a: %v, want EOPNOTSUPP", err)
			}
			if fd, err := unix.Open(f, unix.O_RDONLY, 0); err == nil {
				_, err := unix.IoctlGetUint32(fd, 0x80087601) // FS_IOC_GETVERSION
				unix.Close(fd)
				if !errors.Is(err, syscall.ENOTTY) {
					t.Errorf("FS_IOC_GETVERSION: %v, want ENOTTY (not passed on)", err)
				}
			}
		})
	}
}
