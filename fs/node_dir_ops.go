package fs

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	cnames "github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/measure"
)

var (
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
)

// euid is the daemon's effective user ID.
var euid = syscall.Geteuid()

// preserveOwner gives a new lower entry the caller's uid and gid (the
// directory's gid in a set-group-ID directory) when the daemon runs as
// root (as go-fuse's loopback does).
func preserveOwner(ctx context.Context, a *acct, e entry) {
	if euid != 0 {
		return
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		t0 := a.now()
		defer a.lowerSince(t0)
		// Most often the entry is the caller's already (the daemon and
		// the caller are both root): one stat says so, and nothing is
		// changed.
		var now syscall.Stat_t
		if fstatat(e.dir, e.name, &now) == nil && now.Uid == caller.Uid && now.Gid == caller.Gid {
			return
		}
		// Through an O_PATH descriptor: the entry checked below is the
		// one changed, whatever is put under the name meanwhile.
		fd, err := unix.Openat(e.dir, e.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		defer syscall.Close(fd)
		var st, parent syscall.Stat_t
		if syscall.Fstat(fd, &st) != nil {
			return
		}
		gid := caller.Gid
		if syscall.Fstat(e.dir, &parent) == nil && parent.Mode&syscall.S_ISGID != 0 {
			// A set-group-ID directory gives a new entry its own group
			// (the lower filesystem did), as natively.
			gid = st.Gid
		}
		if st.Uid == caller.Uid && st.Gid == gid {
			return
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR && st.Nlink > 1 {
			// A new hard link: the inode is someone else's file.
			return
		}
		unix.Fchownat(fd, "", int(caller.Uid), int(gid), unix.AT_EMPTY_PATH)
		// chown(2) clears the set-user-ID and set-group-ID bits of a
		// file: give back the mode it was created with.
		if st.Mode&syscall.S_IFMT != syscall.S_IFLNK && st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
			syscall.Chmod(procFd(fd), st.Mode&07777)
		}
	}
}

// mkEntry runs mk to make the entry name of directory n on side s, with a
// long-name sidecar written first and removed again if mk fails. On
// success the caller releases the entry (s.done).
func (s *side) mkEntry(ctx context.Context, a *acct, n *node, name string, mk func(e entry) error) (entry, syscall.Errno) {
	e, long, errno := s.childLong(a, n, name)
	if errno != 0 {
		return e, errno
	}
	if errno := s.t.writeLong(a, s.parentLoc(e), e.name, long); errno != 0 {
		s.done(e)
		return entry{dir: -1}, errno
	}
	// mk times its own system calls (it may also do crypto).
	err := mk(e)
	if err != nil {
		if long != "" && err != syscall.EEXIST && err != syscall.ESTALE {
			// (ESTALE: a create found the entry there; see Create.)
			s.t.dropLong(a, s.parentLoc(e), e.name)
		}
		s.done(e)
		return entry{dir: -1}, toErrno(err)
	}
	preserveOwner(ctx, a, e)
	return e, 0
}

// create makes the entry on the mount's side and, in mirror mode, on the
// twin, and registers the new inode. It returns the new entry's path
// below the mount's lower root.
func (n *node) create(ctx context.Context, o *opRun, name string, out *fuse.EntryOut, mk func(s *side, a *acct, e entry) error) (*fs.Inode, string, syscall.Errno) {
	m := n.r().main
	e, errno := m.mkEntry(ctx, &o.a, n, name, func(e entry) error { return mk(m, &o.a, e) })
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		e, errno := s.mkEntry(ctx, a, n, name, func(e entry) error { return mk(s, a, e) })
		if errno == 0 {
			s.done(e)
		}
		return errno
	})
	if errno != 0 {
		return nil, "", errno
	}
	defer m.done(e)
	var st syscall.Stat_t
	gen, err := o.a.lstatGen(e, &st)
	if err != nil {
		return nil, "", toErrno(err)
	}
	m.learnLink(&o.a, e, &st)
	n.r().probeLabel(&o.a, e)
	m.fillAttr(&st, &out.Attr)
	ch := n.NewInode(ctx, newNode(), n.r().stableAttr(&st, gen))
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A new directory has a new IV, even should its inode number and
		// birth time match a node that is still cached.
		ch.Operations().(*node).forgetDirIV()
	}
	return ch, e.rel(), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpMkdir, n, name)
	defer func() { o.end(errno) }()
	var iv []byte // the new directory's IV on the mount's side
	ch, _, errno = n.create(ctx, &o, name, out, func(s *side, a *acct, e entry) error {
		// Made with its real mode at once: a default ACL of the parent
		// is inherited from it (see umask.go).
		cm := newCreateMode(ctx, s, n, mode)
		want := cm.lower(a, e.dir)
		if err := a.lowerErr(func() error { return unix.Mkdirat(e.dir, e.name, want) }); err != nil {
			return err
		}
		cm.settleAt(a, e.dir, e.name, want)
		d := s.loc(e.dir, e.dirRel, e.name)
		dirIV, errno := s.t.newDir(a, d)
		if errno == syscall.EACCES {
			// A daemon without root's powers writes the directory IV
			// into a directory made without write permission through
			// a passing chmod.
			var st syscall.Stat_t
			if fstatat(e.dir, e.name, &st) == nil && chmodAt(e.dir, e.name, st.Mode&07777|0700) == nil {
				dirIV, errno = s.t.newDir(a, d)
				chmodAt(e.dir, e.name, st.Mode&07777)
			}
		}
		if errno != 0 {
			unix.Unlinkat(e.dir, e.name, unix.AT_REMOVEDIR)
			return errno
		}
		if s == n.r().main {
			iv = dirIV
		}
		return nil
	})
	if errno == 0 && iv != nil {
		// The IV just written is the new directory's: its first lookup
		// or create need not read it back (untar: a read of a small
		// file, four system calls, per directory).
		ch.Operations().(*node).dir().iv.Store(&dirIVBox{iv})
	}
	n.madeEntry(ch, syscall.S_IFDIR)
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpMknod, n, name)
	defer func() { o.end(errno) }()
	ch, _, errno = n.create(ctx, &o, name, out, func(s *side, a *acct, e entry) error {
		cm := newCreateMode(ctx, s, n, mode)
		want := cm.lower(a, e.dir)
		if err := a.lowerErr(func() error { return unix.Mknodat(e.dir, e.name, mode&^07777|want, int(rdev)) }); err != nil {
			return err
		}
		cm.settleAt(a, e.dir, e.name, want)
		return nil
	})
	n.madeEntry(ch, mode)
	return ch, errno
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpSymlink, n, name)
	defer func() { o.end(errno) }()
	ch, _, errno = n.create(ctx, &o, name, out, func(s *side, a *acct, e entry) error {
		fits := func(size int) bool { return s.linkFits(a, size) }
		cTarget, errno := s.t.encodeLink(a, s.rootLoc(), target, false, fits)
		if errno != 0 {
			return errno
		}
		err := a.lowerErr(func() error { return unix.Symlinkat(cTarget, e.dir, e.name) })
		if errors.Is(err, syscall.ENAMETOOLONG) {
			// The lower filesystem takes shorter targets than the
			// inline form needs (XFS: 1023 bytes): the long form then,
			// if the plaintext target is one it would take natively.
			long, errno := s.t.encodeLink(a, s.rootLoc(), target, true, fits)
			if errno != 0 {
				return errno
			}
			if long != cTarget {
				cTarget = long
				err = a.lowerErr(func() error { return unix.Symlinkat(cTarget, e.dir, e.name) })
			}
		}
		if err != nil {
			s.t.dropLink(a, s.rootLoc(), cTarget)
			return err
		}
		s.madeLink(a, e, cTarget)
		return nil
	})
	n.madeEntry(ch, syscall.S_IFLNK)
	return ch, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (ch *fs.Inode, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpLink, n, name)
	defer func() { o.end(errno) }()
	tn, ok := target.(*node)
	if !ok || tn.r() != n.r() {
		return nil, syscall.EXDEV
	}
	ch, _, errno = n.create(ctx, &o, name, out, func(s *side, a *acct, e entry) error {
		old, errno := s.entryOf(a, tn)
		if errno != 0 {
			return errno
		}
		defer s.done(old)
		// No AT_SYMLINK_FOLLOW: a symlink is linked, never its target.
		return a.lowerErr(func() error { return unix.Linkat(old.dir, old.name, e.dir, e.name, 0) })
	})
	return ch, errno
}

func (n *node) Rmdir(ctx context.Context, name string) (errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpRmdir, n, name)
	defer func() { o.end(errno) }()
	n.forgetChildXattrs(name)
	rmdir := func(s *side, a *acct) syscall.Errno {
		e, errno := s.childAt(a, n, name)
		if errno != 0 {
			return errno
		}
		defer s.done(e)
		restore, errno := s.clearDirMeta(a, e)
		if errno != 0 {
			return errno
		}
		t0 := a.now()
		err := unix.Unlinkat(e.dir, e.name, unix.AT_REMOVEDIR)
		a.lowerSince(t0)
		if err != nil {
			restore()
			return toErrno(err)
		}
		s.t.dropLong(a, s.parentLoc(e), e.name)
		return 0
	}
	errno = rmdir(n.r().main, &o.a)
	o.mirror(n.r(), rmdir)
	return errno
}

// clearDirMeta prepares the lower directory e for removal (rmdir, or
// rename over it): the lower directory holds our metadata even when the
// plaintext one is empty. If only metadata is there, it removes it and
// returns a function that puts it back should the removal still fail
// (while e is still held). If the directory holds entries, it leaves
// everything as it is and lets the removal fail in LOWER, so that the
// caller gets the lower filesystem's own errno, as a native directory
// would: ENOTEMPTY on ext4, but EEXIST on XFS for a rename over a
// non-empty directory (the metadata keeps it non-empty whatever happens
// to its entries meanwhile).
func (s *side) clearDirMeta(a *acct, e entry) (restore func(), errno syscall.Errno) {
	meta := s.t.dirMeta()
	if len(meta) == 0 {
		return func() {}, 0
	}
	t0 := a.now()
	defer a.lowerSince(t0)
	fd, err := openBeneath(e.dir, e.name, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, toErrno(err)
	}
	defer syscall.Close(fd)
	tmps, errno := dirEmpty(fd, meta)
	if errno == syscall.ENOTEMPTY {
		return func() {}, 0
	}
	if errno != 0 {
		return nil, errno
	}
	// Metadata files a crash left half-written (writeSmallFile) are
	// no entries of the view: they go with the directory.
	for _, m := range tmps {
		unix.Unlinkat(fd, m, 0)
	}
	saved := make(map[string][]byte, len(meta))
	for _, m := range meta {
		if b, err := readSmallFile(fd, m, 4096); err == nil {
			saved[m] = b
		}
		unix.Unlinkat(fd, m, 0)
	}
	return func() {
		for m, b := range saved {
			writeSmallFile(e.dir, e.name+"/"+m, b, 0400)
		}
	}, 0
}

// lowerDirEmpty returns ENOTEMPTY unless the directory rel below dirFd
// holds only meta.
func lowerDirEmpty(dirFd int, rel string, meta []string) syscall.Errno {
	fd, err := openBeneath(dirFd, rel, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return toErrno(err)
	}
	defer syscall.Close(fd)
	_, errno := dirEmpty(fd, meta)
	return errno
}

// dirEmpty returns ENOTEMPTY unless the open directory fd holds only meta
// and, with encrypted names, metadata files left half-written (tmps).
func dirEmpty(fd int, meta []string) (tmps []string, errno syscall.Errno) {
	buf := make([]byte, 4096)
	for {
		nb, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return nil, toErrno(err)
		}
		if nb == 0 {
			return tmps, 0
		}
		_, _, names := syscall.ParseDirent(buf[:nb], -1, nil)
	next:
		for _, name := range names {
			for _, m := range meta {
				if name == m {
					continue next
				}
			}
			if len(meta) > 0 && cnames.IsTmp(name) {
				tmps = append(tmps, name)
				continue
			}
			return nil, syscall.ENOTEMPTY
		}
	}
}

func (n *node) Unlink(ctx context.Context, name string) (errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpUnlink, n, name)
	defer func() { o.end(errno) }()
	n.forgetChildXattrs(name)
	// A name the kernel knows as no symlink is no long link: no lstat to
	// find out (unless others change LOWER too, where it may have become
	// one; were LOWER changed behind the mount anyway, the cost is a
	// sidecar left in the link store).
	notLink := false
	if ch := n.GetChild(name); ch != nil && !n.r().sharedStorage {
		t := ch.StableAttr().Mode & syscall.S_IFMT
		notLink = t != 0 && t != syscall.S_IFLNK
	}
	unlink := func(s *side, a *acct) syscall.Errno {
		e, errno := s.childAt(a, n, name)
		if errno != 0 {
			return errno
		}
		defer s.done(e)
		h := linkHold{fd: -1}
		if !notLink {
			h = s.holdLink(a, e)
		}
		t0 := a.now()
		err := unix.Unlinkat(e.dir, e.name, 0)
		a.lowerSince(t0)
		s.releaseLink(a, h, err == nil)
		if err != nil {
			return toErrno(err)
		}
		s.t.dropLong(a, s.parentLoc(e), e.name)
		return 0
	}
	errno = unlink(n.r().main, &o.a)
	o.mirror(n.r(), unlink)
	return errno
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) (errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpRename, n, name)
	defer func() { o.end(errno) }()
	np, ok := newParent.(*node)
	if !ok || np.r() != n.r() {
		return syscall.EXDEV
	}
	np.forgetChildXattrs(newName)
	rename := func(s *side, a *acct) syscall.Errno {
		return s.rename(a, n, name, np, newName, flags)
	}
	errno = rename(n.r().main, &o.a)
	o.mirror(n.r(), rename)
	return errno
}

func (s *side) rename(a *acct, n *node, name string, np *node, newName string, flags uint32) syscall.Errno {
	fd, rel, errno := s.dirOf(a, n)
	if errno != 0 {
		return errno
	}
	defer s.closeDir(fd)
	newFd, newRel := fd, rel
	if np != n {
		if newFd, newRel, errno = s.dirOf(a, np); errno != 0 {
			return errno
		}
		defer s.closeDir(newFd)
	}
	old, long, errno := s.childIn(a, n, fd, rel, name)
	if errno != 0 {
		return errno
	}
	nw, newLong, errno := s.childIn(a, np, newFd, newRel, newName)
	if errno != 0 {
		return errno
	}
	if errno := s.t.writeLong(a, s.parentLoc(nw), nw.name, newLong); errno != 0 {
		return errno
	}
	// After an exchange both names stay in use, and after a rename with
	// RENAME_WHITEOUT the old name holds the whiteout: each needs its
	// sidecar.
	keepOld := flags&(unix.RENAME_EXCHANGE|unix.RENAME_WHITEOUT) != 0
	if keepOld {
		if errno := s.t.writeLong(a, s.parentLoc(old), old.name, long); errno != 0 {
			return errno
		}
	}
	restore := func() {}
	replaced := linkHold{fd: -1}
	if flags&unix.RENAME_EXCHANGE == 0 {
		var st, newSt syscall.Stat_t
		if a.lstat(old, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR &&
			a.lstat(nw, &newSt) == nil && newSt.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Ino != newSt.Ino {
			// A directory replacing an empty one.
			if restore, errno = s.clearDirMeta(a, nw); errno != 0 {
				return errno
			}
		}
		// A long link replaced loses its sidecar with its last name.
		replaced = s.holdLink(a, nw)
	}
	t0 := a.now()
	err := unix.Renameat2(old.dir, old.name, nw.dir, nw.name, uint(flags))
	a.lowerSince(t0)
	s.releaseLink(a, replaced, err == nil)
	if err != nil {
		restore()
		if newLong != "" && flags&unix.RENAME_EXCHANGE == 0 {
			// Only drop a sidecar nobody else uses.
			var st syscall.Stat_t
			if a.lstat(nw, &st) != nil {
				s.t.dropLong(a, s.parentLoc(nw), nw.name)
			}
		}
		return toErrno(err)
	}
	if !keepOld && (old.dirRel != nw.dirRel || old.name != nw.name) {
		s.t.dropLong(a, s.parentLoc(old), old.name)
	}
	return 0
}

func (n *node) Readlink(ctx context.Context) (target []byte, errno syscall.Errno) {
	o := n.r().begin(measure.OpReadlink, n)
	defer func() { o.end(errno) }()
	readlink := func(s *side, a *acct) ([]byte, string, syscall.Errno) {
		e, errno := s.entryOf(a, n)
		if errno != 0 {
			return nil, "", errno
		}
		defer s.done(e)
		target, errno := s.readlink(a, e)
		if errno == syscall.EIO {
			return nil, s.show(e.rel()), errno
		}
		return target, "", errno
	}
	target, p, errno := readlink(n.r().main, &o.a)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		_, _, errno := readlink(s, a)
		return errno
	})
	if errno == syscall.EIO {
		n.r().log.Warn().Str("lower", p).Msg("symlink target does not decrypt: EIO")
	}
	return target, errno
}

// direntBufSize is the buffer of one getdents(2) of a listing: a batch
// of entries (about 300 encrypted names), decoded and handed to the
// kernel before the next is read.
const direntBufSize = 32 << 10

var direntBufs = sync.Pool{New: func() any { b := make([]byte, direntBufSize); return &b }}

// readdirBatch reads the next entries of directory n from fd, the
// descriptor of its lower directory that an open directory handle holds,
// from the descriptor's offset: one getdents(2), and a second where the
// first came back short (a listing's end, usually, which the second
// confirms in the same op), their names decoded; appended to entries
// (plaintext, Off the lower filesystem's d_off) and lower (their lower
// names). eof is set when the lower directory has no more entries. One
// batch is one readdir op of the instrument. first marks a pass's first
// batch, which checks that the directory can be listed; whole marks the
// first batch of a pass from the start, which the mirror side's listing
// goes with.
func (n *node) readdirBatch(fd int, d dirLoc, first, whole bool, entries []fuse.DirEntry, lower []string) (_ []fuse.DirEntry, _ []string, eof bool, errno syscall.Errno) {
	o := n.r().begin(measure.OpReaddir, n)
	defer func() { o.end(errno) }()
	m := n.r().main
	if first {
		if errno := m.t.openDir(&o.a, n, d); errno != 0 {
			return entries, lower, false, errno
		}
	}
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	for try := 0; try < 2; try++ {
		t0 := o.a.now()
		nb, err := unix.Getdents(fd, buf)
		o.a.lowerSince(t0)
		if err != nil {
			return entries, lower, false, toErrno(err)
		}
		if nb == 0 {
			eof = true
			break
		}
		entries, lower = m.decodeDirents(&o.a, n, d, buf[:nb], entries, lower)
		if nb > len(buf)/2 {
			break
		}
	}
	if whole {
		o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
			_, errno := s.readdir(a, n)
			return errno
		})
	}
	return entries, lower, eof, 0
}

// decodeDirents appends the entries of the getdents(2) records in b, read
// from directory n (at d) on side s, in plaintext, to entries, and their
// lower names to lower. Names of the transform's own files, and names
// that do not decode, are left out.
func (s *side) decodeDirents(a *acct, n *node, d dirLoc, b []byte, entries []fuse.DirEntry, lower []string) ([]fuse.DirEntry, []string) {
	for len(b) > 0 {
		ino, typ, name, reclen := parseDirent(b)
		off := direntOff(b)
		b = b[reclen:]
		plain, ok := name, true
		if name != "." && name != ".." {
			// "." and ".." are listed as the lower directory has
			// them, as go-fuse's loopback does (its bridge does not
			// look them up in READDIRPLUS); they are not names of
			// the transform.
			plain, ok = s.t.plainName(a, n, d, name)
		}
		if !ok {
			continue
		}
		entries = append(entries, fuse.DirEntry{Name: plain, Ino: ino, Mode: uint32(typ) << 12, Off: off})
		lower = append(lower, name)
	}
	return entries, lower
}

// readdir lists directory n on side s in plaintext, whole (the mirror
// side's listing, and the mirror check's).
func (s *side) readdir(a *acct, n *node) (entries []fuse.DirEntry, errno syscall.Errno) {
	fd, rel, errno := s.openNode(a, n, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if errno != 0 {
		return nil, errno
	}
	defer syscall.Close(fd)
	d := s.loc(fd, rel, "")
	if errno := s.t.openDir(a, n, d); errno != 0 {
		return nil, errno
	}
	buf := make([]byte, direntBufSize)
	for {
		t0 := a.now()
		nb, err := unix.Getdents(fd, buf)
		a.lowerSince(t0)
		if err != nil {
			return nil, toErrno(err)
		}
		if nb == 0 {
			return entries, 0
		}
		entries, _ = s.decodeDirents(a, n, d, buf[:nb], entries, nil)
	}
}
