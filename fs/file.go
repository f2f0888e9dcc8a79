package fs

import (
	"context"
	"strconv"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// file is an open file: a lower descriptor, with content going through
// the mount's transform under the inode's content lock.
type file struct {
	n  *node
	fd int
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

func (f *file) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	st := &f.n.io
	st.mu.RLock()
	n, errno := f.n.r.io.read(st, f.fd, dest, off)
	st.mu.RUnlock()
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	st := &f.n.io
	st.mu.Lock()
	n, errno := f.n.r.io.write(st, f.fd, data, off)
	st.mu.Unlock()
	return uint32(n), errno
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if flags&fsyncFdatasync != 0 {
		return toErrno(syscall.Fdatasync(f.fd))
	}
	return toErrno(syscall.Fsync(f.fd))
}

// Flush is called at every close(2) of a descriptor sharing this handle.
// Closing a dup of the lower descriptor reports delayed write errors of
// the lower filesystem (NFS, quota) to that close.
func (f *file) Flush(ctx context.Context) syscall.Errno {
	nfd, err := syscall.Dup(f.fd)
	if err != nil {
		return toErrno(err)
	}
	return toErrno(syscall.Close(nfd))
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	return toErrno(syscall.Close(f.fd))
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Fstat(f.fd, &st); err != nil {
		return toErrno(err)
	}
	f.n.r.fillAttr("", &st, &out.Attr)
	return 0
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if m, ok := in.GetMode(); ok {
		if err := syscall.Fchmod(f.fd, m); err != nil {
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
		if err := syscall.Fchown(f.fd, suid, sgid); err != nil {
			return toErrno(err)
		}
	}
	if sz, ok := in.GetSize(); ok {
		st := &f.n.io
		st.mu.Lock()
		errno := f.n.r.io.truncate(st, f.fd, int64(sz))
		st.mu.Unlock()
		if errno != 0 {
			return errno
		}
	}
	if ts, ok := setattrTimes(in); ok {
		// futimens(2): utimensat on the descriptor's /proc entry keeps
		// nanoseconds and UTIME_OMIT.
		p := "/proc/self/fd/" + strconv.Itoa(f.fd)
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0); err != nil {
			return toErrno(err)
		}
	}
	return f.Getattr(ctx, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	st := &f.n.io
	st.mu.RLock()
	n, errno := f.n.r.io.lseek(st, f.fd, int64(off), int(whence))
	st.mu.RUnlock()
	return uint64(n), errno
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	st := &f.n.io
	st.mu.Lock()
	errno := f.n.r.io.allocate(st, f.fd, int64(off), int64(size), mode)
	st.mu.Unlock()
	return errno
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC, bit 0 of fsync_flags.
const fsyncFdatasync = 1
