package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// mountHandle is the daemon's hold on its own mount, so that it unmounts
// that mount and no other, wherever its path leads by then (issue #39,
// finding 3: with the mount point below a directory another user owns,
// that user renamed a parent and planted a symlink, and the daemon's
// unmount by path took a different filesystem away at SIGTERM while the
// vault stayed mounted).
//
// It holds a descriptor (O_PATH) of the directory the mount covers, taken
// before mounting, not of the mount's root: a descriptor on the mount
// would keep it busy, and umount(2) refuse. umount2 of
// /proc/self/fd/N takes away the mount on top of that very directory
// (the kernel follows the magic link to the descriptor's dentry, then
// the mounts on it), wherever the directory has been moved. Before it
// does, the handle checks in /proc/self/mountinfo that the mount there is
// still the one it recorded just after mounting (its mount ID; a mount of
// fuse type on the covered directory, with the device the daemon's
// connection got) and that nothing is mounted over it.
type mountHandle struct {
	dir      *os.File // the covered directory, O_PATH
	parentID int      // the mount the directory is in
	mntID    int      // our mount, stacked on dir
	dev      string   // its major:minor: the FUSE connection's device
}

// openMountDir opens the mount point before the mount: the directory the
// mount will cover.
func openMountDir(mnt string) (*os.File, error) {
	fd, err := unix.Open(mnt, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open mount point %s: %w", mnt, err)
	}
	return os.NewFile(uintptr(fd), mnt), nil
}

// holdMount makes a handle of dir (from openMountDir) once the mount is
// up: it records the mount now on top of dir. It owns dir from then on.
func holdMount(dir *os.File) (*mountHandle, error) {
	var st unix.Statx_t
	if err := unix.Statx(int(dir.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
		dir.Close()
		return nil, fmt.Errorf("statx of the mount point: %w", err)
	}
	if st.Mask&unix.STATX_MNT_ID == 0 {
		dir.Close()
		return nil, errors.New("statx of the mount point: no mount ID (Linux 5.8+)")
	}
	h := &mountHandle{dir: dir, parentID: int(st.Mnt_id)}
	m, over, _, err := h.top()
	if err != nil {
		dir.Close()
		return nil, err
	}
	if m.fsType != "fuse" && !strings.HasPrefix(m.fsType, "fuse.") {
		dir.Close()
		return nil, fmt.Errorf("the mount on the mount point is %s, not FUSE", m.fsType)
	}
	if over {
		dir.Close()
		return nil, errors.New("something is already mounted over the new mount")
	}
	h.mntID, h.dev = m.id, m.dev
	return h, nil
}

// top finds the mount stacked on h.dir now: the one whose parent is the
// directory's mount and whose mount point is the directory's path (the
// kernel writes both paths the same way: the path where the directory is
// now). over says whether another mount sits on top of that one. path is
// the directory's path. A rename between the two reads shows as a
// mismatch, and the reads are made again.
func (h *mountHandle) top() (m mountInfo, over bool, path string, err error) {
	link := "/proc/self/fd/" + strconv.Itoa(int(h.dir.Fd()))
	for range 5 {
		path, err = os.Readlink(link)
		if err != nil {
			return mountInfo{}, false, "", fmt.Errorf("mount point: %w", err)
		}
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			return mountInfo{}, false, path, err
		}
		mounts, err := readMountInfo(f)
		f.Close()
		if err != nil {
			return mountInfo{}, false, path, fmt.Errorf("read /proc/self/mountinfo: %w", err)
		}
		found := false
		for _, x := range mounts {
			if x.parentID == h.parentID && x.mountPoint == path {
				m, found = x, true
			}
		}
		if found {
			for _, x := range mounts {
				over = over || (x.parentID == m.id && x.mountPoint == path)
			}
			return m, over, path, nil
		}
		if again, err := os.Readlink(link); err == nil && again == path {
			break // not moved meanwhile: nothing is mounted there
		}
	}
	return mountInfo{}, false, path, fmt.Errorf("%s is not a mount point any more", path)
}

// unmount takes the mount away, if it is still there and still ours. As
// root it is umount2 through the descriptor (UMOUNT_NOFOLLOW cannot go
// with it: the magic link is the way to the directory); otherwise
// fusermount3 -u of the directory's path now, which refuses mounts that
// are not this user's.
func (h *mountHandle) unmount(lazy bool) error {
	if h == nil {
		return errors.New("the mount could not be held when it was made (see the log): not unmounting by path; use 'twincrypt umount'")
	}
	m, over, path, err := h.top()
	if err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	if m.id != h.mntID || m.dev != h.dev {
		return fmt.Errorf("unmount %s: the mount there (%s, %s) is no longer this daemon's: left alone", path, m.fsType, m.dev)
	}
	if over {
		return fmt.Errorf("unmount %s: another filesystem is mounted over it: left alone", path)
	}
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		err := unix.Unmount("/proc/self/fd/"+strconv.Itoa(int(h.dir.Fd())), flags)
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: target is busy (close the files that use it, or use --lazy)", path)
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fusermountUnmount(path, lazy)
}

// unmount and close take a nil handle: a mount that could not be held
// (holdMount failed) is never unmounted by the daemon.

// close lets go of the directory.
func (h *mountHandle) close() { h.dir.Close() }
