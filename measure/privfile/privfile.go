// Package privfile opens the files a daemon writes for its own user:
// logs (with -o debug they hold plaintext names), op logs (with
// --oplog-paths, plaintext paths) and summaries. Their paths are often
// in shared directories such as /tmp, where another user may have put a
// symlink (to make us overwrite a file of our own choosing) or a file of
// their own, readable by all, under the name first: O_CREAT alone would
// follow the one and keep the other's owner and mode.
package privfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotOurs means the path names something this user must not write
// private data to: a symlink, another user's file, a file with more
// than one name, or neither a regular file nor a FIFO nor a device.
var ErrNotOurs = errors.New("refusing to write private data to it")

// Open opens path for writing, creating it with mode 0600; appending
// when trunc is false, else emptied (after the checks: a file we refuse
// is left as it was). The last component is never followed (O_NOFOLLOW).
// An existing regular file or FIFO must be the caller's own (euid) and
// have a single link; a regular file's mode is then set to 0600. A
// character device (/dev/null, a terminal) is written as it is.
func Open(path string, trunc bool) (*os.File, error) {
	flag := unix.O_WRONLY | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	if !trunc {
		flag |= unix.O_APPEND
	}
	fd, err := unix.Open(path, flag, 0o600)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symlink (someone may have planted it; give the file's own path): %w", path, ErrNotOurs)
	}
	if errors.Is(err, unix.ENXIO) {
		return nil, fmt.Errorf("%s is a FIFO that nobody reads yet: %w", path, err)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if err := check(fd, path, trunc); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// O_NONBLOCK was only for opening a FIFO without a reader.
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil {
		unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	return os.NewFile(uintptr(fd), path), nil
}

func check(fd int, path string, trunc bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	typ := st.Mode & unix.S_IFMT
	switch typ {
	case unix.S_IFCHR:
		return nil
	case unix.S_IFREG, unix.S_IFIFO:
	default:
		return fmt.Errorf("%s is not a regular file: %w", path, ErrNotOurs)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d); remove it or choose another path: %w", path, st.Uid, euid, ErrNotOurs)
	}
	if typ == unix.S_IFIFO {
		return nil
	}
	if st.Nlink != 1 {
		return fmt.Errorf("%s has %d hard links: %w", path, st.Nlink, ErrNotOurs)
	}
	if st.Mode&0o7777 != 0o600 {
		if err := unix.Fchmod(fd, 0o600); err != nil {
			return &os.PathError{Op: "chmod", Path: path, Err: err}
		}
	}
	if trunc {
		if err := unix.Ftruncate(fd, 0); err != nil {
			return &os.PathError{Op: "truncate", Path: path, Err: err}
		}
	}
	return nil
}

// WriteFile writes data to path through Open (emptied first).
func WriteFile(path string, data []byte) error {
	f, err := Open(path, true)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
