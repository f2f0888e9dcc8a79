package fs

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// root is shared by all nodes of one mount.
type root struct {
	lower string
	dev   uint64
	t     transform
	io    contentIO
	log   zerolog.Logger
	// kernelPassthrough hands open files to the kernel (twin only).
	kernelPassthrough bool
	// rmw: writes read partial extents back, so lower files open read-write.
	rmw      bool
	rootNode *node
}

// node is one file, directory, symlink or special file of the mounted view.
// It holds no lower path: the path is rebuilt from the parent chain on each
// operation, so renames anywhere above a node need no bookkeeping.
type node struct {
	fs.Inode
	r *root

	// io is the content state of a regular file (see ioState).
	io ioState

	// dirIVMu guards dirIVCache, the directory IV of a directory node.
	dirIVMu    sync.Mutex
	dirIVCache []byte
}

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
)

func (n *node) isRoot() bool { return n == n.r.rootNode }

func toErrno(err error) syscall.Errno { return fs.ToErrno(err) }

func randRead(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic("no randomness: " + err.Error())
	}
}

// lowerPath returns the path of n in the lower directory.
func (n *node) lowerPath() (string, syscall.Errno) {
	if n.isRoot() {
		return n.r.lower, 0
	}
	name, parent := n.Parent()
	if parent == nil {
		// Unlinked while open: only its file handles still reach it.
		return "", syscall.ENOENT
	}
	pn := parent.Operations().(*node)
	dirPath, errno := pn.lowerPath()
	if errno != 0 {
		return "", errno
	}
	lower, _, errno := n.r.t.lowerName(pn, dirPath, name)
	if errno != 0 {
		return "", errno
	}
	return dirPath + "/" + lower, 0
}

// childPath returns the lower path of the entry name in directory n, and
// the long name to keep in a sidecar when the entry is created.
func (n *node) childPath(name string) (dirPath, lower, long string, errno syscall.Errno) {
	dirPath, errno = n.lowerPath()
	if errno != 0 {
		return
	}
	lower, long, errno = n.r.t.lowerName(n, dirPath, name)
	return
}

// dirIV returns the IV of directory n, whose lower path is path.
func (n *node) dirIV(path string) ([]byte, syscall.Errno) {
	n.dirIVMu.Lock()
	defer n.dirIVMu.Unlock()
	if n.dirIVCache != nil {
		return n.dirIVCache, 0
	}
	iv, errno := n.r.t.readDirIV(path)
	if errno == 0 {
		n.dirIVCache = iv
	}
	return iv, errno
}

func (r *root) newNode() *node { return &node{r: r} }

// stableAttr composes an inode number from the lower inode and device the
// way go-fuse's loopback does, so that hard links share one node.
// The generation is the lower birth time where the filesystem has one: an
// inode number reused by a new file must not find the node (and cached
// directory IV) of the old one.
func (r *root) stableAttr(st *syscall.Stat_t, gen uint64) fs.StableAttr {
	swapped := (uint64(st.Dev) << 32) | (uint64(st.Dev) >> 32)
	swappedRootDev := (r.dev << 32) | (r.dev >> 32)
	return fs.StableAttr{
		Mode: uint32(st.Mode),
		Ino:  (swapped ^ swappedRootDev) ^ st.Ino,
		Gen:  gen,
	}
}

// lstatGen is lstat(2) that also returns a generation from the birth time.
func lstatGen(path string, st *syscall.Stat_t) (gen uint64, err error) {
	var x unix.Statx_t
	err = unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x)
	if err == unix.ENOSYS {
		return 1, syscall.Lstat(path, st)
	}
	if err != nil {
		return 0, err
	}
	*st = syscall.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    syscall.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:    syscall.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:    syscall.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	gen = 1
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return gen, nil
}

// fillAttr converts a lower stat to the plaintext view.
func (r *root) fillAttr(path string, st *syscall.Stat_t, out *fuse.Attr) {
	out.FromStat(st)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		out.Size = uint64(r.t.plainSize(st.Size))
	case syscall.S_IFLNK:
		if _, ok := r.t.(nullTransform); ok {
			return
		}
		// The size of a symlink is the length of its (plaintext) target.
		if target, errno := r.readlink(path); errno == 0 {
			out.Size = uint64(len(target))
		}
	}
}

func (r *root) readlink(path string) ([]byte, syscall.Errno) {
	buf := make([]byte, 4096)
	n, err := syscall.Readlink(path, buf)
	if err != nil {
		return nil, toErrno(err)
	}
	return r.t.decodeLink(buf[:n])
}

// newChild registers the lower entry at path (already stat'ed) as child
// name of n.
func (n *node) newChild(ctx context.Context, path string, st *syscall.Stat_t, gen uint64, out *fuse.EntryOut) *fs.Inode {
	n.r.fillAttr(path, st, &out.Attr)
	return n.NewInode(ctx, n.r.newNode(), n.r.stableAttr(st, gen))
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	dirPath, lower, _, errno := n.childPath(name)
	if errno != 0 {
		if errno == syscall.EPERM || errno == syscall.ENAMETOOLONG {
			return nil, syscall.ENOENT
		}
		return nil, errno
	}
	if n.r.t.hidden(n.isRoot(), lower) {
		return nil, syscall.ENOENT
	}
	p := dirPath + "/" + lower
	var st syscall.Stat_t
	gen, err := lstatGen(p, &st)
	if err != nil {
		return nil, toErrno(err)
	}
	return n.newChild(ctx, p, &st, gen, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*file); ok && fh != nil {
		return fh.Getattr(ctx, out)
	}
	p, errno := n.lowerPath()
	if errno != 0 {
		return errno
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return toErrno(err)
	}
	n.r.fillAttr(p, &st, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if fh, ok := f.(*file); ok && fh != nil {
		return fh.Setattr(ctx, in, out)
	}
	p, errno := n.lowerPath()
	if errno != 0 {
		return errno
	}
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
			return toErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		suid, sgid := -1, -1
		if uok {
			suid = int(uid)
		}
		if gok {
			sgid = int(gid)
		}
		if err := unix.Fchownat(unix.AT_FDCWD, p, suid, sgid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return toErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		// truncate(2) by path: open the lower file for the duration.
		fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return toErrno(err)
		}
		n.io.mu.Lock()
		n.io.lowerPath = p
		errno := n.r.io.open(&n.io, fd)
		if errno == 0 {
			errno = n.r.io.truncate(&n.io, fd, int64(sz))
		}
		n.io.mu.Unlock()
		syscall.Close(fd)
		if errno != 0 {
			return errno
		}
	}
	if errno := utimens(p, in); errno != 0 {
		return errno
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return toErrno(err)
	}
	n.r.fillAttr(p, &st, &out.Attr)
	return 0
}

// utimens applies the time fields of in to path (not following symlinks).
func utimens(path string, in *fuse.SetAttrIn) syscall.Errno {
	ts, ok := setattrTimes(in)
	if !ok {
		return 0
	}
	return toErrno(unix.UtimesNanoAt(unix.AT_FDCWD, path, ts, unix.AT_SYMLINK_NOFOLLOW))
}

func setattrTimes(in *fuse.SetAttrIn) ([]unix.Timespec, bool) {
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if !mok && !aok {
		return nil, false
	}
	ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
	if aok {
		ts[0] = unix.NsecToTimespec(atime.UnixNano())
	}
	if mok {
		ts[1] = unix.NsecToTimespec(mtime.UnixNano())
	}
	return ts, true
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.r.lower, &s); err != nil {
		return toErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

// isNotExist reports a missing file in any of the error forms we meet.
func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT)
}

var _ = filepath.Join
