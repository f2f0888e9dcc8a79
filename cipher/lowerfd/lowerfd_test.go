package lowerfd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mknodNoDriver makes a character device 0:0 at p. No driver serves 0:0:
// an open of it fails ENXIO in the driver lookup (chrdev_open), so ENXIO
// is the witness that a device's open ran, and nothing else happens.
func mknodNoDriver(t *testing.T, p string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	if err := unix.Mknod(p, unix.S_IFCHR|0666, 0); err != nil {
		t.Skipf("mknod: %v", err)
	}
}

// within runs f and fails the test if it does not return in 30 s (a FIFO's
// open waiting for a writer); the FIFO at fifo is opened for writing then,
// so that a failing run ends.
func within(t *testing.T, what, fifo string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Errorf("%s: no answer in 30 s (waiting in a FIFO's open)", what)
		if fd, err := unix.Open(fifo, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
		return <-done
	}
}

// TestDirectoryOpenRunsNoDeviceOpen checks on the running kernel what
// package lowerfd relies on for directories: an O_DIRECTORY open of a
// device node or FIFO fails ENOTDIR before the object's own open (a plain
// open of the same device reaches its driver: ENXIO), and does not wait.
func TestDirectoryOpenRunsNoDeviceOpen(t *testing.T) {
	dir := t.TempDir()
	dev, fifo := filepath.Join(dir, "dev"), filepath.Join(dir, "fifo")
	mknodNoDriver(t, dev)
	if err := unix.Mkfifo(fifo, 0666); err != nil {
		t.Fatal(err)
	}
	if fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); !errors.Is(err, unix.ENXIO) {
		if err == nil {
			unix.Close(fd)
		}
		t.Fatalf("plain open of a 0:0 device: %v, want ENXIO (the driver lookup): the witness does not work here", err)
	}
	for _, p := range []string{dev, fifo} {
		err := within(t, "O_DIRECTORY open of "+p, fifo, func() error {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			return err
		})
		if !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("O_DIRECTORY open of %s: %v, want ENOTDIR before its open", filepath.Base(p), err)
		}
	}
}

// TestOpenRegularAt: a device node, a FIFO (opened for reading without
// O_NONBLOCK, which a real open would wait in), a socket and a symlink are
// refused without their open; a regular file opens and reads; the
// caller's inode check runs before the open.
func TestOpenRegularAt(t *testing.T) {
	dir := t.TempDir()
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	mknodNoDriver(t, filepath.Join(dir, "dev"))
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0666); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "file"), []byte("content"), 0644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want string
	}{{"dev", "character device"}, {"fifo", "fifo"}} {
		var st unix.Stat_t
		err := within(t, "OpenRegularAt of "+c.name, fifo, func() error {
			fd, err := OpenRegularAt(dfd, c.name, unix.O_RDONLY, &st, nil)
			if err == nil {
				unix.Close(fd)
			}
			return err
		})
		var nr *NotRegularError
		if !errors.As(err, &nr) || TypeName(nr.Mode) != c.want {
			t.Errorf("OpenRegularAt(%s): %v, want a refusal of a %s (never opened)", c.name, err, c.want)
		}
	}
	var st unix.Stat_t
	if fd, err := OpenRegularAt(dfd, "link", unix.O_RDONLY, &st, nil); !errors.Is(err, unix.ELOOP) {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("OpenRegularAt(link): %v, want ELOOP", err)
	}
	errOther := errors.New("another inode")
	if fd, err := OpenRegularAt(dfd, "file", unix.O_RDONLY, &st, func(*unix.Stat_t) error { return errOther }); err != errOther {
		if err == nil {
			unix.Close(fd)
		}
		t.Errorf("OpenRegularAt with a failing inode check: %v, want its error", err)
	}
	fd, err := OpenRegularAt(dfd, "file", unix.O_RDONLY, &st, nil)
	if err != nil {
		t.Fatalf("OpenRegularAt(file): %v", err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	n, err := unix.Read(fd, buf)
	if err != nil || string(buf[:n]) != "content" || st.Size != 7 {
		t.Errorf("read %q, %v (size %d), want \"content\"", buf[:n], err, st.Size)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("descriptor without FD_CLOEXEC: %#x, %v", fl, err)
	}
}
