package fs

import (
	"context"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

var (
	_ = (fs.NodeLookuper)((*node)(nil))
	_ = (fs.NodeGetattrer)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeStatfser)((*node)(nil))
)

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r.beginNamed(measure.OpLookup, n, name)
	defer func() { o.end(errno) }()
	m := n.r.main
	dirPath, lower, _, errno := m.child(&o.a, n, name)
	if errno != 0 {
		if errno == syscall.EPERM || errno == syscall.ENAMETOOLONG {
			errno = syscall.ENOENT
		}
		return nil, errno
	}
	if m.t.hidden(n.isRoot(), lower) {
		return nil, syscall.ENOENT
	}
	p := dirPath + "/" + lower
	var st syscall.Stat_t
	gen, err := o.a.lstatGen(p, &st)
	o.mirror(n.r, func(s *side, a *acct) syscall.Errno {
		dp, l, _, errno := s.child(a, n, name)
		if errno != 0 {
			return errno
		}
		var st syscall.Stat_t
		return toErrno(a.lstat(dp+"/"+l, &st))
	})
	if err != nil {
		return nil, toErrno(err)
	}
	m.fillAttr(&o.a, p, &st, &out.Attr)
	return n.NewInode(ctx, n.r.newNode(), n.r.stableAttr(&st, gen)), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	o := n.r.begin(measure.OpGetattr, n)
	defer func() { o.end(errno) }()
	fh := asFile(f)
	get := func(s *side, a *acct, fd int, st *syscall.Stat_t) (string, syscall.Errno) {
		if fd >= 0 {
			return "", toErrno(a.fstat(fd, st))
		}
		p, errno := s.path(a, n)
		if errno != 0 {
			return "", errno
		}
		return p, toErrno(a.lstat(p, st))
	}
	var st syscall.Stat_t
	fd := -1
	if fh != nil {
		fd = fh.fd
	} else if dh, ok := f.(*dirHandle); ok {
		fd = dh.fd
	}
	p, errno := get(n.r.main, &o.a, fd, &st)
	o.mirror(n.r, func(s *side, a *acct) syscall.Errno {
		var st syscall.Stat_t
		mfd := -1
		if fh != nil {
			mfd = fh.twinFd
		}
		_, errno := get(s, a, mfd, &st)
		return errno
	})
	if errno != 0 {
		return errno
	}
	n.r.main.fillAttr(&o.a, p, &st, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	o := n.r.begin(measure.OpSetattr, n)
	defer func() { o.end(errno) }()
	if sz, ok := in.GetSize(); ok {
		o.io(int64(sz), 0)
	}
	fh := asFile(f)
	if fh != nil {
		errno = n.setattrFd(&o.a, n.r.main, fh.fd, in)
		o.mirror(n.r, func(s *side, a *acct) syscall.Errno {
			if fh.twinFd < 0 {
				return syscall.EBADF
			}
			return n.setattrFd(a, s, fh.twinFd, in)
		})
		if errno != 0 {
			return errno
		}
		var st syscall.Stat_t
		if err := o.a.fstat(fh.fd, &st); err != nil {
			return toErrno(err)
		}
		n.r.main.fillAttr(&o.a, "", &st, &out.Attr)
		return 0
	}
	p, errno := n.setattrPath(&o.a, n.r.main, in)
	o.mirror(n.r, func(s *side, a *acct) syscall.Errno {
		_, errno := n.setattrPath(a, s, in)
		return errno
	})
	if errno != 0 {
		return errno
	}
	var st syscall.Stat_t
	if err := o.a.lstat(p, &st); err != nil {
		return toErrno(err)
	}
	n.r.main.fillAttr(&o.a, p, &st, &out.Attr)
	return 0
}

// asFile returns our file behind a handle of either kind.
func asFile(f fs.FileHandle) *file {
	switch f := f.(type) {
	case *file:
		return f
	case *passthroughFile:
		return f.file
	}
	return nil
}

// setattrPath applies in to n on side s by path (no open file).
func (n *node) setattrPath(a *acct, s *side, in *fuse.SetAttrIn) (string, syscall.Errno) {
	p, errno := s.path(a, n)
	if errno != 0 {
		return "", errno
	}
	t0 := a.now()
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
			a.lowerSince(t0)
			return p, toErrno(err)
		}
	}
	uid, gid, chown := setattrOwner(in)
	if chown {
		if err := unix.Fchownat(unix.AT_FDCWD, p, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			a.lowerSince(t0)
			return p, toErrno(err)
		}
	}
	a.lowerSince(t0)
	if sz, ok := in.GetSize(); ok {
		// truncate(2) by path: open the lower file for the duration.
		t0 := a.now()
		fd, err := syscall.Open(p, syscall.O_RDWR|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
		a.lowerSince(t0)
		if err != nil {
			return p, toErrno(err)
		}
		errno := n.truncate(a, s, fd, int64(sz), true)
		t0 = a.now()
		syscall.Close(fd)
		a.lowerSince(t0)
		if errno != 0 {
			return p, errno
		}
	}
	if ts, ok := setattrTimes(in); ok {
		t0 := a.now()
		err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
		a.lowerSince(t0)
		if err != nil {
			return p, toErrno(err)
		}
	}
	return p, 0
}

// setattrFd applies in through an open descriptor of n on side s.
func (n *node) setattrFd(a *acct, s *side, fd int, in *fuse.SetAttrIn) syscall.Errno {
	t0 := a.now()
	if m, ok := in.GetMode(); ok {
		if err := syscall.Fchmod(fd, m); err != nil {
			a.lowerSince(t0)
			return toErrno(err)
		}
	}
	if uid, gid, ok := setattrOwner(in); ok {
		if err := syscall.Fchown(fd, uid, gid); err != nil {
			a.lowerSince(t0)
			return toErrno(err)
		}
	}
	a.lowerSince(t0)
	if sz, ok := in.GetSize(); ok {
		if errno := n.truncate(a, s, fd, int64(sz), false); errno != 0 {
			return errno
		}
	}
	if ts, ok := setattrTimes(in); ok {
		// futimens(2): utimensat on the descriptor's /proc entry keeps
		// nanoseconds and UTIME_OMIT.
		t0 := a.now()
		err := unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), ts, 0)
		a.lowerSince(t0)
		if err != nil {
			return toErrno(err)
		}
	}
	return 0
}

// truncate changes the size of n through fd on side s under the inode's
// content lock; fresh is set for a descriptor opened just for this.
func (n *node) truncate(a *acct, s *side, fd int, size int64, fresh bool) syscall.Errno {
	st := &n.io
	if s != n.r.main {
		st = nil // the twin side keeps no content state
	}
	n.io.mu.Lock()
	defer n.io.mu.Unlock()
	if fresh {
		if errno := s.io.open(a, st, fd); errno != 0 {
			return errno
		}
	}
	return s.io.truncate(a, st, fd, size)
}

func setattrOwner(in *fuse.SetAttrIn) (uid, gid int, ok bool) {
	u, uok := in.GetUID()
	g, gok := in.GetGID()
	uid, gid = -1, -1
	if uok {
		uid = int(u)
	}
	if gok {
		gid = int(g)
	}
	return uid, gid, uok || gok
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

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) (errno syscall.Errno) {
	o := n.r.begin(measure.OpStatfs, n)
	defer func() { o.end(errno) }()
	statfs := func(s *side, a *acct, sf *syscall.Statfs_t) syscall.Errno {
		t0 := a.now()
		err := syscall.Statfs(s.lower, sf)
		a.lowerSince(t0)
		return toErrno(err)
	}
	var sf syscall.Statfs_t
	errno = statfs(n.r.main, &o.a, &sf)
	o.mirror(n.r, func(s *side, a *acct) syscall.Errno {
		var sf syscall.Statfs_t
		return statfs(s, a, &sf)
	})
	if errno != 0 {
		return errno
	}
	out.FromStatfsT(&sf)
	return 0
}

var _ = (fs.NodeFsyncer)((*node)(nil))

// Fsync serves fsync(2) on files (through their handle) and on
// directories, which have no handle of ours: the lower directory is
// opened and synced.
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) (errno syscall.Errno) {
	if fh := asFile(f); fh != nil {
		return fh.Fsync(ctx, flags)
	}
	o := n.r.begin(measure.OpFsync, n)
	defer func() { o.end(errno) }()
	fsyncDir := func(s *side, a *acct) syscall.Errno {
		p, errno := s.path(a, n)
		if errno != 0 {
			return errno
		}
		t0 := a.now()
		defer a.lowerSince(t0)
		fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return toErrno(err)
		}
		defer syscall.Close(fd)
		return toErrno(syscall.Fsync(fd))
	}
	if dh, ok := f.(*dirHandle); ok {
		// An open directory: its descriptor works even after removal.
		t0 := o.a.now()
		errno = toErrno(syscall.Fsync(dh.fd))
		o.a.lowerSince(t0)
	} else {
		errno = fsyncDir(n.r.main, &o.a)
	}
	o.mirror(n.r, fsyncDir)
	return errno
}
