// Package lowerfd opens regular files in a directory tree that someone
// else can write (LOWER) without ever running the open of another type.
//
// Whoever can write LOWER can put a FIFO or a device node where a regular
// file is expected, at any time. An open(2) of a FIFO for reading waits
// for a writer; an open of a device runs its driver's open with the
// opener's rights (root, for a daemon or fsck: a watchdog starts counting,
// a tape rewinds). O_NONBLOCK plus a type check afterwards stops the FIFO
// but not the driver. So the object is first opened O_PATH, which runs no
// open of its type, its type (and, as the caller asks, its inode) is
// checked on that descriptor, and only then is it opened for real through
// the descriptor's /proc magic link: the very inode checked, nothing
// resolved in LOWER again.
//
// Directories need none of this: an open with O_DIRECTORY of anything but
// a directory fails ENOTDIR in the path walk (do_open in fs/namei.c
// checks d_can_lookup before vfs_open), before the object's own open.
// TestDirectoryOpenRunsNoDeviceOpen checks it on the running kernel (it
// held on 6.18): a 0:0 device, which no driver serves, gives ENOTDIR, not
// the driver lookup's ENXIO, and a FIFO gives ENOTDIR without waiting.
//
// It lives under cipher/ because both the config loader (cipher/config)
// and the FUSE engine (fs) read LOWER through it, and cipher may not
// import fs; it knows nothing of ciphers.
package lowerfd

import (
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// NotRegularError is the refusal of a lower object that is not a regular
// file; it is never opened.
type NotRegularError struct {
	Mode uint32 // st_mode of the object
}

func (e *NotRegularError) Error() string {
	return "not a regular file (" + TypeName(e.Mode) + ")"
}

// TypeName names the type of a lower object for a message.
func TypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

// procSelfFd is our /proc/self/fd directory, opened once: a reopen then
// resolves one name in it instead of the three of /proc/self/fd/N.
// ("self" is resolved at this open, to this process, for its lifetime.)
var procSelfFd = sync.OnceValues(func() (int, error) {
	return unix.Open("/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
})

// Reopen opens our descriptor fd anew through its /proc magic link with
// flags: the very object fd holds, whatever is under its name now. The
// caller has checked that object's type: this open runs its open.
func Reopen(fd, flags int) (int, error) {
	dir, err := procSelfFd()
	if err != nil {
		return unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags, 0)
	}
	return unix.Openat(dir, strconv.Itoa(fd), flags, 0)
}

// OpenRegular opens pfd, an O_PATH descriptor of a lower object, with
// flags (O_CLOEXEC is added), once it is known to be a regular file:
// anything else is refused with a *NotRegularError (ELOOP for a symlink)
// and never opened. Its
// attributes go to st; same, if not nil, is asked before the open whether
// they are the object the caller wants (its error is returned as is).
func OpenRegular(pfd, flags int, st *unix.Stat_t, same func(*unix.Stat_t) error) (int, error) {
	if err := unix.Fstat(pfd, st); err != nil {
		return -1, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		// What an O_NOFOLLOW open gives (pfd was opened O_PATH|O_NOFOLLOW).
		return -1, unix.ELOOP
	default:
		return -1, &NotRegularError{Mode: st.Mode}
	}
	if same != nil {
		if err := same(st); err != nil {
			return -1, err
		}
	}
	return Reopen(pfd, flags|unix.O_CLOEXEC)
}

// OpenRegularAt is OpenRegular for the entry name of the directory dfd,
// opened O_PATH without following a symlink (ELOOP for one, as an
// O_NOFOLLOW open gives).
func OpenRegularAt(dfd int, name string, flags int, st *unix.Stat_t, same func(*unix.Stat_t) error) (int, error) {
	pfd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	return OpenRegular(pfd, flags, st, same)
}
