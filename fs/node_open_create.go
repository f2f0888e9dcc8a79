package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/lowerfd"
	"github.com/twincrypt/twincrypt/fs/uring"
	"github.com/twincrypt/twincrypt/measure"
)

var (
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
)

// openFlags turns the flags of an open on the mounted view into the flags
// for the lower file on side s. O_APPEND is dropped because the kernel
// already passes the end-of-file offset with each write, and the lower
// file's end is not the plaintext's. O_DIRECT is dropped because extent
// reads are not sector-aligned. With encryption a write-only open becomes
// read-write: partial extents are read, modified and written back.
func (s *side) openFlags(flags uint32) int {
	f := int(flags) &^ (syscall.O_APPEND | syscall.O_DIRECT | fuse.FMODE_EXEC | syscall.O_CREAT | syscall.O_EXCL)
	if s.t.readWriteOpens() && f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
}

func (n *node) Open(ctx context.Context, flags uint32) (fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	o := n.r().begin(measure.OpOpen, n)
	defer func() { o.end(errno) }()
	// Opened without O_TRUNC: newFile truncates once it knows the lower
	// file is the node's own.
	fd, rel, errno := n.r().main.openFile(&o.a, n, n.r().main.openFlags(flags)&^syscall.O_TRUNC)
	twinFd := -1
	o.mirror(n.r(), func(s *side, a *acct) (errno syscall.Errno) {
		twinFd, _, errno = s.openFile(a, n, s.openFlags(flags))
		return errno
	})
	if errno != 0 {
		closeFd(twinFd)
		return nil, 0, errno
	}
	return n.newFile(&o.a, rel, fd, twinFd, flags&syscall.O_TRUNC != 0)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (ch *fs.Inode, fh fs.FileHandle, fuseFlags uint32, errno syscall.Errno) {
	o := n.r().beginNamed(measure.OpCreate, n, name)
	defer func() { o.end(errno) }()
	fd, twinFd := -1, -1
	ch, rel, errno := n.create(ctx, &o, name, out, func(s *side, a *acct, e entry) error {
		cm := newCreateMode(ctx, s, n, mode)
		want := cm.lower(a, e.dir)
		t0 := a.now()
		// O_NOFOLLOW (in openFlags): a symlink planted under the name
		// is not followed, the create fails with ELOOP. O_EXCL: only
		// a file made here gets its mode settled.
		f, err := unix.Openat(e.dir, e.name, s.openFlags(flags)|syscall.O_CREAT|syscall.O_EXCL, want)
		created := err == nil
		if err == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
			if s == n.r().main {
				// The kernel believed the name free (CREATE comes for
				// a negative entry only): the file appeared in LOWER
				// behind its back, and nobody checked the caller's
				// right to open it; it may be a hard link to anything.
				// ESTALE makes the kernel look the name up again and
				// open what it finds as an existing file, with the
				// permission checks and O_TRUNC of an open.
				n.r().log.Info().Str("lower", s.show(e.rel())).Msg("create found an entry made behind the mount's back: ESTALE, looked up again")
				a.lowerSince(t0)
				return syscall.ESTALE
			}
			// The twin's name is taken: opened as an existing file,
			// through the same type check as an OPEN (a FIFO there
			// would hold this request until someone writes to it).
			var pfd int
			if pfd, err = unix.Openat(e.dir, e.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				var errno syscall.Errno
				f, errno = n.r().reopenRegular(a, s, nil, e.rel(), pfd, s.openFlags(flags), false)
				syscall.Close(pfd)
				if errno != 0 {
					err = errno
				}
			}
		}
		a.lowerSince(t0)
		if s == n.r().main {
			fd = f
		} else {
			twinFd = f
		}
		if created {
			var st syscall.Stat_t
			if a.fstat(f, &st) == nil {
				cm.settle(a, e.dir, e.name, st.Mode, want)
			}
		}
		return err
	})
	if errno != 0 {
		closeFd(fd)
		closeFd(twinFd)
		return nil, nil, 0, errno
	}
	n.madeEntry(ch, syscall.S_IFREG)
	fh, fuseFlags, errno = ch.Operations().(*node).newFile(&o.a, rel, fd, twinFd, false)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, fh, fuseFlags, 0
}

// openFile opens the lower file of n on side s with the lower flags flags,
// for an OPEN. Whoever can write LOWER may have put something else under
// the name since the kernel looked it up: a FIFO, whose open(2) for
// reading waits for a writer (a daemon thread, and on the ring a whole
// queue, stuck until one comes), or a device node, whose driver's open
// runs with the daemon's rights (a watchdog starts counting, a tape
// rewinds). So the object is first opened O_PATH, which runs no open of
// its type, and only the node's own regular file is then opened for
// real, through our descriptor's /proc link: the very inode that was
// checked, nothing resolved in LOWER again.
//
// Opening with O_NONBLOCK and checking the type afterwards would be cheaper
// and enough for a FIFO (a read open returns at once, a write open fails
// ENXIO), but it still runs a planted device's open. The O_PATH way costs
// an O_PATH open, an fstat, an fcntl and a close more per OPEN than the
// plain open and fstat did, 2.2x the daemon's lower part of an open
// (docs/uring.md, "Requests that wait on LOWER").
//
// The mount's own side may have its OPEN answered again off a ring queue
// (see reopenRegular); the twin's, opened after it, may not.
func (s *side) openFile(a *acct, n *node, flags int) (int, string, syscall.Errno) {
	pfd, rel, errno := s.openNode(a, n, unix.O_PATH|syscall.O_NOFOLLOW)
	if errno != 0 {
		return -1, rel, errno
	}
	fd, errno := n.r().reopenRegular(a, s, n, rel, pfd, flags, s == n.r().main)
	syscall.Close(pfd)
	return fd, rel, errno
}

// reopenRegular opens pfd, an O_PATH descriptor of the lower object rel
// (of node n, or nil when there is no node to compare with), with flags,
// once it is known to be a regular file and n's own inode.
//
// The inode is a regular file, so the reopen cannot meet a FIFO; what it
// can still wait on is a lease: a process holding one on the lower file
// (Samba, nfsd, or the file's owner) makes an open for writing wait until
// it gives the lease up, at most /proc/sys/fs/lease-break-time (45 s). On a
// ring queue thread that wait would hold up every caller on its CPU. So
// the reopen is tried with O_NONBLOCK, which turns that wait into
// EWOULDBLOCK; then, where waiting holds up no one (a goroutine,
// /dev/fuse), the open waits as a native one does, and on a queue thread
// the request is answered again off it (uring.RetryAway) if retry is set.
// Without retry (the open of a mirror's twin, or in a CREATE, whose answer
// cannot be dropped once the main side has acted) EWOULDBLOCK is the answer.
// A caller who asked for O_NONBLOCK gets EWOULDBLOCK, as natively.
//
// On a regular file O_NONBLOCK changes nothing after the open for the
// local filesystems (reads and writes wait for the disk either way), but
// it is handed on with each READ to a LOWER that is itself a FUSE
// filesystem, whose server may act on it: it is cleared again (one
// fcntl), and the descriptor is what a plain open made.
func (r *root) reopenRegular(a *acct, s *side, n *node, rel string, pfd, flags int, retry bool) (int, syscall.Errno) {
	var st syscall.Stat_t
	if err := a.fstat(pfd, &st); err != nil {
		return -1, toErrno(err)
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFLNK:
		// What the O_NOFOLLOW open of the plain way gave.
		return -1, syscall.ELOOP
	default:
		// A corrupt file is that file's EIO plus a log line; a FIFO or
		// device put in the file's place is treated alike.
		r.log.Warn().Str("lower", s.show(rel)).Str("type", lowerfd.TypeName(st.Mode)).Msg("not a regular file in LOWER: EIO")
		return -1, syscall.EIO
	}
	if n != nil {
		if errno := n.sameLower(s, rel, &st); errno != 0 {
			return -1, errno
		}
	}
	want := flags&openFlagsMask&^(syscall.O_NOFOLLOW|syscall.O_CREAT|syscall.O_EXCL) | syscall.O_CLOEXEC
	t0 := a.now()
	fd, err := reopenLeased(pfd, want, retry)
	a.lowerSince(t0)
	return fd, toErrno(err)
}

// reopenLeased reopens our descriptor fd of a regular file with flags, as
// reopenRegular says: without waiting for a lease's holder on a ring
// queue thread (EWOULDBLOCK, and the request retried away if retry),
// waiting as natively anywhere else, O_NONBLOCK left as the caller asked.
func reopenLeased(fd, flags int, retry bool) (int, error) {
	nfd, err := lowerfd.Reopen(fd, flags|syscall.O_NONBLOCK)
	if flags&syscall.O_NONBLOCK != 0 {
		return nfd, err
	}
	if err == syscall.EWOULDBLOCK {
		if uring.OnQueueThread() {
			if retry {
				uring.RetryAway()
			}
			return -1, err
		}
		return lowerfd.Reopen(fd, flags)
	}
	if err != nil {
		return -1, err
	}
	// F_SETFL sets these flags (and O_NONBLOCK, left out): as opened.
	const setfl = syscall.O_APPEND | syscall.O_ASYNC | syscall.O_DIRECT | syscall.O_NOATIME
	if _, err := unix.FcntlInt(uintptr(nfd), unix.F_SETFL, flags&setfl); err != nil {
		syscall.Close(nfd)
		return -1, err
	}
	return nfd, nil
}

func closeFd(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}

// newFile wraps open lower descriptors (of the file rel below the mount's
// lower root) and refreshes the inode's content state from the mount's
// own one; trunc truncates the file to zero (an open with O_TRUNC). The
// kernel opens regular files only: a lower object of another type was
// swapped in behind its back (a device node, a FIFO) and is not read or
// written. Nor is a regular file other than the node's own inode
// (sameLower: a hard link put under the name since the lookup).
func (n *node) newFile(a *acct, rel string, fd, twinFd int, trunc bool) (fs.FileHandle, uint32, syscall.Errno) {
	var st syscall.Stat_t
	// The inode's content state (its size above all) is set from this
	// fstat: it is made with the content lock held, so that a write,
	// truncate or fallocate through another descriptor of the file cannot
	// come between the two and be undone in that state (a stale size:
	// reads cut short, EIO, a read-modify-write over the wrong tail;
	// fsx next to a loop that opens the file found it).
	x := n.extra()
	x.io.mu.Lock()
	errno := toErrno(a.fstat(fd, &st))
	if errno == 0 && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		n.r().log.Warn().Str("lower", n.r().main.show(rel)).Msg("not a regular file in LOWER: EIO")
		errno = syscall.EIO
	}
	if errno == 0 {
		errno = n.sameLower(n.r().main, rel, &st)
	}
	if errno == 0 {
		x.io.lowerPath = n.r().main.show(rel)
		errno = n.r().main.io.open(a, &x.io, fd, &st)
	}
	if errno == 0 && trunc {
		errno = n.truncOpen(a, fd)
	}
	x.io.mu.Unlock()
	if errno != 0 {
		closeFd(fd)
		closeFd(twinFd)
		return nil, 0, errno
	}
	f := &file{n: n, fd: fd, twinFd: twinFd}
	n.r().open.Store(f, nil)
	x.filesMu.Lock()
	x.files = append(x.files, f)
	x.filesMu.Unlock()
	var flags uint32
	if n.r().main.noFlush(fd, &st) && (twinFd < 0 || n.r().twin.noFlushFd(twinFd)) {
		// Nothing to flush at close(2) (see Flush): spare the round trip.
		flags |= fuse.FOPEN_NOFLUSH
	}
	if n.r().kernelPassthrough {
		return &passthroughFile{f}, flags, 0
	}
	// Every change of the content goes through this daemon, so what the
	// kernel has cached for the inode is still right at the next open:
	// keep it (without this, each open drops the file's page cache and a
	// reader that reopens reads and decrypts everything again). A change
	// of the lower file behind our back shows in its mtime or size at the
	// next GETATTR, and the kernel drops the cache then (auto_inval_data).
	return f, flags | fuse.FOPEN_KEEP_CACHE, 0
}

// truncOpen truncates the file n, open as fd on the mount's side, to
// zero through the content I/O (crypt: an empty file, a new header at the
// next write), with the content lock held. A read-only descriptor (an
// open O_RDONLY|O_TRUNC) is reopened read-write through /proc for it:
// the very inode, nothing resolved in LOWER. That reopen may meet a lease
// as the OPEN's own does (reopenLeased): on a ring queue thread the OPEN
// is then answered again off it, before anything was truncated.
func (n *node) truncOpen(a *acct, fd int) syscall.Errno {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return toErrno(err)
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		t0 := a.now()
		wfd, err := reopenLeased(fd, syscall.O_RDWR|syscall.O_CLOEXEC, true)
		a.lowerSince(t0)
		if err != nil {
			return toErrno(err)
		}
		defer syscall.Close(wfd)
		fd = wfd
	}
	return n.r().main.io.truncate(a, &n.extra().io, fd, 0)
}

// unlinked reports whether n is a file whose last name is gone while it is
// still open.
func (n *node) unlinked() bool {
	if n.isRoot() {
		return false
	}
	_, parent := n.Parent()
	return parent == nil
}

// openUnlinked opens the unlinked file (or removed directory) n on side s with the lower flags
// flags, through one of its open lower descriptors: the /proc magic link
// of our own descriptor reaches the very inode, deleted or not, and
// nothing in LOWER is resolved. This is how an open of /proc/PID/fd/N
// reopens a deleted file natively, and how the kernel's own requests on
// such a file (an ACL check at that open, an xattr call) are served.
func (n *node) openUnlinked(a *acct, s *side, flags int) (int, syscall.Errno) {
	x := n.opened()
	if x == nil {
		return -1, syscall.ENOENT // never opened
	}
	x.filesMu.Lock()
	defer x.filesMu.Unlock()
	for _, f := range x.files {
		fd := f.fd
		if s != n.r().main {
			fd = f.twinFd
		}
		if fd < 0 {
			continue
		}
		t0 := a.now()
		// Without O_NOFOLLOW: with it, an O_PATH open would give the
		// magic link itself, and any other open ELOOP.
		nfd, err := unix.Open(procFd(fd), flags&^syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		a.lowerSince(t0)
		return nfd, toErrno(err)
	}
	if s == n.r().main && len(x.dirs) > 0 {
		t0 := a.now()
		nfd, err := unix.Open(procFd(x.dirs[0].fd), flags&^syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		a.lowerSince(t0)
		return nfd, toErrno(err)
	}
	return -1, syscall.ENOENT
}

// forget drops f from the node's open files.
func (n *node) forget(f *file) {
	x := n.extra()
	x.filesMu.Lock()
	defer x.filesMu.Unlock()
	for i, g := range x.files {
		if g == f {
			last := len(x.files) - 1
			x.files[i] = x.files[last]
			x.files[last] = nil
			x.files = x.files[:last]
			return
		}
	}
}
