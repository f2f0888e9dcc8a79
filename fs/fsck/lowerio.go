package fsck

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/lowerfd"
)

// openAt opens name in the directory dfd without following a symlink and
// checks that it is still the inode want describes (nil: any regular file
// or directory, as flags ask). Whoever can write LOWER may have planted a
// FIFO or a device node under a file's name (or swapped one in since the
// listing): a regular file is opened only after an O_PATH descriptor
// showed its type and inode (lowerfd.OpenRegularAt), so that no FIFO's
// open waits and no device's driver runs with fsck's rights. A directory
// is opened with O_DIRECTORY, which refuses any other type in the path
// walk, before its open (see package lowerfd). Non-blocking at the open:
// a lease held on the file makes it fail, not wait.
func openAt(dfd int, name string, flags int, want *unix.Stat_t) (*os.File, error) {
	if err := checkComponent(name); err != nil {
		return nil, err
	}
	same := func(st *unix.Stat_t) error {
		if want != nil && (st.Dev != want.Dev || st.Ino != want.Ino || st.Mode&unix.S_IFMT != want.Mode&unix.S_IFMT) {
			return errChanged
		}
		return nil
	}
	var fd int
	var err error
	var st unix.Stat_t
	if flags&unix.O_DIRECTORY != 0 {
		if fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|flags, 0); err != nil {
			return nil, err
		}
		if err = unix.Fstat(fd, &st); err == nil {
			err = same(&st)
		}
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
	} else {
		fd, err = lowerfd.OpenRegularAt(dfd, name, unix.O_RDONLY|unix.O_NONBLOCK|flags, &st, same)
		var nr *lowerfd.NotRegularError
		switch {
		case errors.As(err, &nr) && want != nil:
			return nil, errChanged // a regular file was listed
		case err != nil:
			return nil, err
		}
	}
	// Back to blocking I/O: os.File would otherwise hand a regular file
	// to the poller, which gains nothing.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// readSmall reads at most max bytes of the regular file name in dfd.
func readSmall(dfd int, name string, max int) ([]byte, error) {
	f, err := openAt(dfd, name, 0, nil)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, max)
	n, err := preadFull(int(f.Fd()), buf, 0)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// preadFull reads until buf is full or the file ends.
func preadFull(fd int, buf []byte, off int64) (int, error) {
	total := 0
	for total < len(buf) {
		n, err := unix.Pread(fd, buf[total:], off+int64(total))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			break
		}
		total += n
	}
	return total, nil
}

// checkComponent refuses a path component that could leave its directory.
// Names come from readdir and cannot be any of these; the check is the
// backstop that keeps every path fsck builds inside LOWER.
func checkComponent(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("fsck: refusing path component %q: it would leave its directory", name)
	}
	return nil
}

// openDirRel opens the directory at the lower path rel ("" for LOWER)
// component by component from the root descriptor, following no symlink.
func (c *checker) openDirRel(rel string) (*os.File, error) {
	fd, err := unix.Openat(int(c.root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if rel != "" {
		for _, comp := range strings.Split(rel, "/") {
			if err := checkComponent(comp); err != nil {
				unix.Close(fd)
				return nil, err
			}
			next, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("open %s: %w", rel, err)
			}
			fd = next
		}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// xattrList returns the xattr names of the open file fd.
func xattrList(fd int) ([]string, error) {
	for {
		sz, err := unix.Flistxattr(fd, nil)
		if err != nil {
			return nil, err
		}
		if sz == 0 {
			return nil, nil
		}
		buf := make([]byte, sz)
		n, err := unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // the list grew in between
		}
		if err != nil {
			return nil, err
		}
		var list []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				list = append(list, name)
			}
		}
		return list, nil
	}
}

// xattrGet returns the value of attr on the open file fd.
func xattrGet(fd int, attr string) ([]byte, error) {
	for {
		sz, err := unix.Fgetxattr(fd, attr, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, sz)
		n, err := unix.Fgetxattr(fd, attr, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// writeNew creates name in dfd with data, failing if it exists, and
// fsyncs it.
func writeNew(dfd int, name string, data []byte, mode uint32) (err error) {
	if err := checkComponent(name); err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			unix.Unlinkat(dfd, name, 0)
		}
	}()
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		off += n
	}
	return unix.Fsync(fd)
}

// syncDir fsyncs a directory; filesystems that cannot are not an error.
func syncDir(fd int) error {
	err := unix.Fsync(fd)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	return err
}

// exists reports whether name exists in dfd (as anything, links included).
func exists(dfd int, name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, err
}
