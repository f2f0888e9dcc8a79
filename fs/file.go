package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// file is an open file: a lower descriptor whose content goes through the
// mount's transform under the inode's content lock, and in mirror mode a
// descriptor of the same file in the plaintext twin.
type file struct {
	n      *node
	fd     int
	twinFd int // -1 outside mirror mode
}

var (
	_ = (fs.FileReader)((*file)(nil))
	_ = (fs.FileWriter)((*file)(nil))
	_ = (fs.FileFsyncer)((*file)(nil))
	_ = (fs.FileFlusher)((*file)(nil))
	_ = (fs.FileReleaser)((*file)(nil))
	_ = (fs.FileGetattrer)((*file)(nil))
	_ = (fs.FileSetattrer)((*file)(nil))
	_ = (fs.FileLseeker)((*file)(nil))
	_ = (fs.FileAllocater)((*file)(nil))
)

// passthroughFile lets the kernel do READ and WRITE on the lower file
// itself (FUSE passthrough): only for the twin, and only when asked, since
// such I/O never reaches the daemon and cannot be measured.
type passthroughFile struct{ *file }

var _ = (fs.FilePassthroughFder)((*passthroughFile)(nil))

func (f *passthroughFile) PassthroughFd() (int, bool) { return f.fd, true }

// twin runs fn on the mirror side's descriptor (mirror mode only).
func (f *file) twin(o *opRun, fn func(s *side, a *acct, fd int) syscall.Errno) {
	o.mirror(f.n.r(), func(s *side, a *acct) syscall.Errno {
		if f.twinFd < 0 {
			return syscall.EBADF
		}
		return fn(s, a, f.twinFd)
	})
}

func (f *file) Read(ctx context.Context, dest []byte, off int64) (res fuse.ReadResult, errno syscall.Errno) {
	o := f.n.r().begin(measure.OpRead, f.n)
	defer func() { o.end(errno) }()
	f.n.fileReadServed()
	st := &f.n.extra().io
	st.mu.RLock()
	n, errno := f.n.r().main.io.read(&o.a, st, f.fd, dest, off)
	st.mu.RUnlock()
	f.twin(&o, func(s *side, a *acct, fd int) syscall.Errno {
		p, buf := getBuf(len(dest))
		defer putBuf(p)
		_, errno := s.io.read(a, nil, fd, buf, off)
		return errno
	})
	o.io(off, n)
	if errno != 0 {
		return nil, errno
	}
	// A vector result is written to /dev/fuse with writev straight from
	// dest; ReadResultData would be copied into another buffer first
	// (after a vain attempt to splice it).
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (written uint32, errno syscall.Errno) {
	o := f.n.r().begin(measure.OpWrite, f.n)
	defer func() { o.end(errno) }()
	st := &f.n.extra().io
	st.mu.Lock()
	var n int
	if f.n.r().twin == nil {
		// data is the request's buffer, read by no one after this.
		n, errno = f.n.r().main.io.writeOwned(&o.a, st, f.fd, data, off)
	} else {
		n, errno = f.n.r().main.io.write(&o.a, st, f.fd, data, off)
	}
	// The twin is written under the same lock, so both see the writes of
	// concurrent writers in the same order.
	f.twin(&o, func(s *side, a *acct, fd int) syscall.Errno {
		_, errno := s.io.write(a, nil, fd, data, off)
		return errno
	})
	st.mu.Unlock()
	o.io(off, n)
	return uint32(n), errno
}

func (f *file) Fsync(ctx context.Context, flags uint32) (errno syscall.Errno) {
	o := f.n.r().begin(measure.OpFsync, f.n)
	defer func() { o.end(errno) }()
	fsync := func(s *side, a *acct, fd int) syscall.Errno {
		t0 := a.now()
		defer a.lowerSince(t0)
		// The names of new directories and long names first: on a
		// journalling filesystem this fsync makes them durable, their
		// IVs and sidecars must be too (pending_names.go).
		if errno := s.t.syncPending(); errno != 0 {
			return errno
		}
		var err error
		if flags&fsyncFdatasync != 0 {
			err = syscall.Fdatasync(fd)
		} else {
			err = syscall.Fsync(fd)
		}
		return toErrno(err)
	}
	errno = fsync(f.n.r().main, &o.a, f.fd)
	f.twin(&o, fsync)
	return errno
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC, bit 0 of fsync_flags.
const fsyncFdatasync = 1

// Flush is called at every close(2) of a descriptor sharing this handle.
// Closing a dup of the lower descriptor reports delayed write errors of
// the lower filesystem (NFS, quota) to that close. A file on a lower
// filesystem that does nothing at close is opened with FOPEN_NOFLUSH
// (noFlush), and its closes do not come here.
func (f *file) Flush(ctx context.Context) (errno syscall.Errno) {
	o := f.n.r().begin(measure.OpFlush, f.n)
	defer func() { o.end(errno) }()
	flush := func(a *acct, fd int) syscall.Errno {
		t0 := a.now()
		defer a.lowerSince(t0)
		// Closing a duplicate reports what the lower filesystem has to
		// say at close (NFS write-back errors) while keeping fd open.
		nfd, err := syscall.Dup(fd)
		if err == syscall.EMFILE || err == syscall.ENFILE {
			// Out of descriptors: nothing to report and nothing lost;
			// close(2) does not fail for want of a descriptor.
			return 0
		}
		if err != nil {
			return toErrno(err)
		}
		return toErrno(syscall.Close(nfd))
	}
	errno = flush(&o.a, f.fd)
	f.twin(&o, func(_ *side, a *acct, fd int) syscall.Errno { return flush(a, fd) })
	return errno
}

func (f *file) Release(ctx context.Context) (errno syscall.Errno) {
	o := f.n.r().begin(measure.OpRelease, f.n)
	defer func() { o.end(errno) }()
	release := func(a *acct, fd int) syscall.Errno {
		t0 := a.now()
		defer a.lowerSince(t0)
		return toErrno(syscall.Close(fd))
	}
	f.n.forget(f)
	f.n.r().open.Delete(f)
	// A file no one writes holds no cached tail (ioState.tail).
	st := &f.n.extra().io
	st.mu.Lock()
	st.freeTail()
	st.mu.Unlock()
	errno = release(&o.a, f.fd)
	f.twin(&o, func(_ *side, a *acct, fd int) syscall.Errno { return release(a, fd) })
	return errno
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.n.Getattr(ctx, f, out)
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return f.n.Setattr(ctx, f, in, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (res uint64, errno syscall.Errno) {
	o := f.n.r().begin(measure.OpLseek, f.n)
	defer func() { o.end(errno) }()
	st := &f.n.extra().io
	st.mu.RLock()
	n, errno := f.n.r().main.io.lseek(&o.a, st, f.fd, int64(off), int(whence))
	st.mu.RUnlock()
	f.twin(&o, func(s *side, a *acct, fd int) syscall.Errno {
		_, errno := s.io.lseek(a, nil, fd, int64(off), int(whence))
		return errno
	})
	return uint64(n), errno
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) (errno syscall.Errno) {
	o := f.n.r().begin(measure.OpFallocate, f.n)
	defer func() { o.end(errno) }()
	st := &f.n.extra().io
	st.mu.Lock()
	errno = f.n.r().main.io.allocate(&o.a, st, f.fd, int64(off), int64(size), mode)
	f.twin(&o, func(s *side, a *acct, fd int) syscall.Errno {
		return s.io.allocate(a, nil, fd, int64(off), int64(size), mode)
	})
	st.mu.Unlock()
	o.io(int64(off), int(size))
	return errno
}

// closeIsNoop reports whether close(2) of a file on the filesystem of fd
// can have nothing to say: a local filesystem whose files have no flush
// operation in the kernel (ext2/3/4, XFS, btrfs, tmpfs), so that a close
// neither writes back nor reports an error. On those, a FLUSH would be
// a round trip to the daemon per close(2) for a dup and a close that do
// nothing; NFS, CIFS, FUSE and filesystems not known here keep it.
func closeIsNoop(fd int) bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return false
	}
	switch uint32(st.Type) {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC:
		return true
	}
	return false
}

// noFlush reports whether the file open as fd on side s, with lower
// stat st, needs no FLUSH at close (closeIsNoop): the lower root's
// answer for a file on its filesystem, its own for one on a filesystem
// mounted inside LOWER.
func (s *side) noFlush(fd int, st *syscall.Stat_t) bool {
	if uint64(st.Dev) == s.rootDev {
		return s.rootCloseNoop
	}
	return closeIsNoop(fd)
}

// noFlushFd is noFlush for a descriptor whose stat is not at hand.
func (s *side) noFlushFd(fd int) bool {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return false
	}
	return s.noFlush(fd, &st)
}
