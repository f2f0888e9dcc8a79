package fs

import (
	"context"
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
	return n.lookupIn(ctx, name, -1, "", out)
}

// lookupIn is Lookup. With dirFd >= 0 the entry is the one a listing of
// n just read through dirFd, a descriptor of n's lower directory, under
// the lower name lower: an entry of a READDIRPLUS, which needs no new
// descriptor of the directory and no encryption of its name.
func (n *node) lookupIn(ctx context.Context, name string, dirFd int, lower string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpLookup, n, name)
	defer func() { o.end(errno) }()
	m := n.r().main
	var e entry
	if dirFd >= 0 {
		e = entry{dir: dirFd, name: lower}
	} else {
		e, errno = m.childAt(&o.a, n, name)
		if errno != 0 {
			// EPERM: the config's name with plaintext names, which is not
			// in the view. A name over NAME_MAX keeps its ENAMETOOLONG,
			// as natively, for every call that walks to it.
			if errno == syscall.EPERM {
				errno = syscall.ENOENT
			}
			return nil, errno
		}
		defer m.done(e)
	}
	if m.t.hidden(n.isRoot(), e.name) {
		return nil, syscall.ENOENT
	}
	var st syscall.Stat_t
	gen, err := o.a.lstatGen(e, &st)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		e, errno := s.childAt(a, n, name)
		if errno != 0 {
			return errno
		}
		defer s.done(e)
		var st syscall.Stat_t
		return toErrno(a.lstat(e, &st))
	})
	if err != nil {
		return nil, toErrno(err)
	}
	m.learnLink(&o.a, e, &st)
	m.fillAttr(&st, &out.Attr)
	id := n.r().stableAttr(&st, gen)
	old := n.GetChild(name)
	if old != nil {
		// The kernel gets the entry's attributes, also for the node
		// go-fuse keeps should it already hold this inode (a new node
		// has no stale atime to clear).
		if on, ok := old.Operations().(*node); ok {
			on.attrsSent()
		}
	}
	if old != nil && old.IsDir() && id.Mode&syscall.S_IFMT == syscall.S_IFDIR &&
		old.StableAttr().Ino == id.Ino && old.StableAttr().Gen == id.Gen {
		// The same directory as the node already in the tree under this
		// name: hand that node back. The kernel may have forgotten it
		// (FORGET, under memory pressure or drop_caches) while go-fuse
		// kept it because a child is still known, such as a hard-linked
		// file the kernel holds through another name. A fresh node would
		// take its place in n but not its children: they would keep their
		// parent link to the old node, which keeps this name (and its
		// cached directory IV) after the directory is renamed or
		// replaced, so that paths rebuilt through it would lead to the
		// wrong lower entry (TestDifferentialBugForgottenDir).
		return old, 0
	}
	if id.Mode&syscall.S_IFMT == syscall.S_IFDIR && n.hasAncestor(id) {
		// A lower directory that contains itself: the inode of n or of
		// one of its ancestors met again below it (a bind mount in
		// LOWER, a lower filesystem that repeats inode numbers).
		// go-fuse would hand back that very node and make its tree a
		// cycle, which every path walk through it would follow for
		// ever. The kernel refuses such an alias the same way (ELOOP).
		dirRel := e.dirRel
		if dirFd >= 0 {
			// Looked up through a listing's descriptor: no path yet.
			dirRel, _ = m.rel(untimed, n)
		}
		n.r().log.Warn().Str("lower", m.show(join(dirRel, e.name))).
			Msg("a lower directory that is its own ancestor (a loop in LOWER): ELOOP")
		return nil, syscall.ELOOP
	}
	return n.NewInode(ctx, newNode(), id), 0
}

// hasAncestor reports whether n or a directory above it in go-fuse's
// tree is the inode id.
func (n *node) hasAncestor(id fs.StableAttr) bool {
	for m, depth := n, 0; depth < maxDepth; depth++ {
		if a := m.StableAttr(); a.Ino == id.Ino && a.Gen == id.Gen {
			return true
		}
		if m.isRoot() {
			return false
		}
		_, p := m.Parent()
		if p == nil {
			return false
		}
		m = p.Operations().(*node)
	}
	return true
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	o := n.r().begin(measure.OpGetattr, n)
	defer func() {
		if errno == 0 {
			n.attrsSent()
		}
		o.end(errno)
	}()
	fh := asFile(f)
	get := func(s *side, a *acct, fd int, st *syscall.Stat_t) syscall.Errno {
		if fd >= 0 {
			return toErrno(a.fstat(fd, st))
		}
		e, errno := s.entryOf(a, n)
		if errno == syscall.ENOENT && n.unlinked() {
			// A stat of /proc/PID/fd/N of a deleted file.
			fd, _, errno := s.openNode(a, n, unix.O_PATH)
			if errno != 0 {
				return errno
			}
			defer syscall.Close(fd)
			return toErrno(a.fstat(fd, st))
		}
		if errno != 0 {
			return errno
		}
		defer s.done(e)
		return toErrno(a.lstat(e, st))
	}
	if f == nil && n.r().twin == nil && !n.r().sharedStorage {
		// A stat by path of a file someone holds open (the kernel asks
		// after a write, and twice around a chown): fstat of an open
		// file of the node, the very inode, rather than a walk to its
		// name. Under filesMu: Release closes the descriptor only after.
		if x := n.opened(); x != nil {
			x.filesMu.Lock()
			if len(x.files) > 0 {
				fh = x.files[0]
				defer x.filesMu.Unlock()
			} else {
				x.filesMu.Unlock()
			}
		}
	}
	var st syscall.Stat_t
	fd := -1
	if fh != nil {
		fd = fh.fd
	} else if dh, ok := f.(*dirHandle); ok {
		fd = dh.fd
	}
	errno = get(n.r().main, &o.a, fd, &st)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		var st syscall.Stat_t
		mfd := -1
		if fh != nil {
			mfd = fh.twinFd
		}
		return get(s, a, mfd, &st)
	})
	if errno != 0 {
		return errno
	}
	n.r().main.fillAttr(&st, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	o := n.r().begin(measure.OpSetattr, n)
	defer func() { o.end(errno) }()
	// The reply carries the attributes after the change, as fresh as a
	// GETATTR's, for as long (go-fuse sets no lifetime on SETATTR
	// replies: the kernel would ask GETATTR at the next stat, three
	// times per file of a tar x).
	out.SetTimeout(n.r().attrTTL)
	if sz, ok := in.GetSize(); ok {
		o.io(int64(sz), 0)
	}
	if fh := asFile(f); fh != nil {
		return n.setattrFile(&o, fh, in, out)
	}
	if _, size := in.GetSize(); !size {
		// chmod, chown and utimes come without a file handle even when
		// the caller holds the file open (fchmod, fchown: tar x, for
		// every file): through an open file of the node, the very
		// inode, rather than its path.
		if x := n.opened(); x != nil {
			x.filesMu.Lock()
			if len(x.files) > 0 {
				// Under filesMu: Release closes the descriptor only after.
				errno = n.setattrFile(&o, x.files[0], in, out)
				x.filesMu.Unlock()
				return errno
			}
			x.filesMu.Unlock()
		}
	}
	var st syscall.Stat_t
	errno = n.setattrPath(&o.a, n.r().main, in, &st)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		return n.setattrPath(a, s, in, nil)
	})
	if errno != 0 {
		return errno
	}
	n.r().main.fillAttr(&st, &out.Attr)
	return 0
}

// setattrFile applies in through the open file fh of n.
func (n *node) setattrFile(o *opRun, fh *file, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	errno := n.setattrFd(&o.a, n.r().main, fh.fd, in)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
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
	n.r().main.fillAttr(&st, &out.Attr)
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

// setattrPath applies in to n on side s without an open file: n's entry
// is opened O_PATH without following a symlink, checked to be n's own
// inode (sameLower: the kernel checked the caller against n's attributes,
// and a chmod, chown or truncate of a hard link planted under the name
// would change someone else's file), and changed through that descriptor.
// The attributes afterwards go to st, if not nil.
func (n *node) setattrPath(a *acct, s *side, in *fuse.SetAttrIn, st *syscall.Stat_t) syscall.Errno {
	e, errno := s.entryOf(a, n)
	if errno != 0 {
		return errno
	}
	defer s.done(e)
	t0 := a.now()
	fd, err := openBeneath(e.dir, e.name, unix.O_PATH|syscall.O_NOFOLLOW, 0)
	if err != nil {
		a.lowerSince(t0)
		return toErrno(err)
	}
	defer syscall.Close(fd)
	var lst syscall.Stat_t
	if err := syscall.Fstat(fd, &lst); err != nil {
		a.lowerSince(t0)
		return toErrno(err)
	}
	if errno := n.sameLower(s, e.rel(), &lst); errno != 0 {
		a.lowerSince(t0)
		return errno
	}
	symlink := lst.Mode&syscall.S_IFMT == syscall.S_IFLNK
	if m, ok := in.GetMode(); ok {
		// As fchmodat(AT_SYMLINK_NOFOLLOW): a symlink's mode is fixed.
		err := error(unix.EOPNOTSUPP)
		if !symlink {
			err = syscall.Chmod(procFd(fd), m)
		}
		if err != nil {
			a.lowerSince(t0)
			return toErrno(err)
		}
	}
	uid, gid, chown := setattrOwner(in)
	if chown || setattrNothing(in) {
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
			a.lowerSince(t0)
			return toErrno(err)
		}
	}
	a.lowerSince(t0)
	if sz, ok := in.GetSize(); ok {
		// truncate(2) by path: open the lower file for the duration,
		// through the descriptor (the very inode checked above).
		t0 := a.now()
		err := error(syscall.ELOOP)
		var wfd int
		if !symlink {
			// The kernel truncates regular files only: anything else
			// was swapped in behind its back, and is refused before
			// the open, so that a device's driver never runs.
			err = syscall.EIO
			if lst.Mode&syscall.S_IFMT == syscall.S_IFREG {
				wfd, err = unix.Open(procFd(fd), syscall.O_RDWR|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
			}
		}
		a.lowerSince(t0)
		if err != nil {
			return toErrno(err)
		}
		errno := n.truncate(a, s, wfd, int64(sz), true)
		t0 = a.now()
		syscall.Close(wfd)
		a.lowerSince(t0)
		if errno != 0 {
			return errno
		}
	}
	if ts, ok := setattrTimes(in); ok {
		t0 := a.now()
		var err error
		if symlink {
			err = unix.UtimesNanoAt(e.dir, e.name, ts, unix.AT_SYMLINK_NOFOLLOW)
		} else {
			err = unix.UtimesNanoAt(unix.AT_FDCWD, procFd(fd), ts, 0)
		}
		a.lowerSince(t0)
		if err != nil {
			return toErrno(err)
		}
	}
	if st != nil {
		return toErrno(a.fstat(fd, st))
	}
	return 0
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
	if uid, gid, ok := setattrOwner(in); ok || setattrNothing(in) {
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
		err := unix.UtimesNanoAt(unix.AT_FDCWD, procFd(fd), ts, 0)
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
	x := n.extra()
	st := &x.io
	if s != n.r().main {
		st = nil // the twin side keeps no content state
	}
	x.io.mu.Lock()
	defer x.io.mu.Unlock()
	if fresh && st != nil {
		var lst syscall.Stat_t
		if err := a.fstat(fd, &lst); err != nil {
			return toErrno(err)
		}
		if errno := s.io.open(a, st, fd, &lst); errno != 0 {
			return errno
		}
	}
	return s.io.truncate(a, st, fd, size)
}

// setattrNothing reports a SETATTR that changes no attribute: what the
// kernel sends for chown(f, -1, -1). Natively that call still moves the
// file's ctime (and as any chown drops set-user-ID bits, which the kernel
// turns into a mode change of its own); so does a chown to -1, -1 of the
// lower file (setattrOwner gives -1, -1 for it).
func setattrNothing(in *fuse.SetAttrIn) bool {
	return in.Valid&^(fuse.FATTR_FH|fuse.FATTR_LOCKOWNER|fuse.FATTR_CTIME) == 0
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
	o := n.r().begin(measure.OpStatfs, n)
	defer func() { o.end(errno) }()
	statfs := func(s *side, a *acct, sf *syscall.Statfs_t) syscall.Errno {
		t0 := a.now()
		err := syscall.Fstatfs(s.rootFd, sf)
		a.lowerSince(t0)
		return toErrno(err)
	}
	var sf syscall.Statfs_t
	errno = statfs(n.r().main, &o.a, &sf)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
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
	o := n.r().begin(measure.OpFsync, n)
	defer func() { o.end(errno) }()
	fsyncDir := func(s *side, a *acct) syscall.Errno {
		fd, _, errno := s.openNode(a, n, syscall.O_RDONLY|syscall.O_DIRECTORY)
		if errno != 0 {
			return errno
		}
		defer syscall.Close(fd)
		t0 := a.now()
		defer a.lowerSince(t0)
		if errno := s.t.syncPending(); errno != 0 {
			return errno
		}
		if errno := s.t.syncMeta(fd); errno != 0 {
			return errno
		}
		return toErrno(syscall.Fsync(fd))
	}
	if dh, ok := f.(*dirHandle); ok {
		// An open directory: its descriptor works even after removal.
		t0 := o.a.now()
		if errno = n.r().main.t.syncPending(); errno == 0 {
			errno = n.r().main.t.syncMeta(dh.fd)
		}
		if errno == 0 {
			errno = toErrno(syscall.Fsync(dh.fd))
		}
		o.a.lowerSince(t0)
	} else {
		errno = fsyncDir(n.r().main, &o.a)
	}
	o.mirror(n.r(), fsyncDir)
	return errno
}
