package fs

import (
	"context"
	"encoding/binary"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// The inode attribute ioctls (lsattr, chattr, xfs_io's chattr/lsproj).
// The kernel asks them of a FUSE filesystem as FUSE_IOCTL on a file or
// directory it opens itself (fuse_fileattr_get/set), after the VFS has
// checked that the caller owns the inode and, for the immutable and
// append-only flags, holds CAP_LINUX_IMMUTABLE. They are passed on to
// the lower object: its flags are the view's (a lower file is a view
// file's only storage, and its immutable, no-atime, no-COW or sync flag
// means for the view what it means natively).
const (
	fsIocGetflags   = uint32(unix.FS_IOC_GETFLAGS)
	fsIocSetflags   = uint32(unix.FS_IOC_SETFLAGS)
	fsIocFsgetxattr = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFssetxattr = 0x401c5820 // _IOW('X', 32, struct fsxattr)
	fsxattrSize     = 28         // struct fsxattr

	fsAppendFl     = 0x00000020 // FS_APPEND_FL
	fsCasefoldFl   = 0x40000000 // FS_CASEFOLD_FL
	fsXflagAppend  = 0x00000010 // FS_XFLAG_APPEND
	fsXflagDax     = 0x00008000 // FS_XFLAG_DAX
	fsDaxFl        = 0x02000000 // FS_DAX_FL
	refusedFlags   = fsAppendFl | fsCasefoldFl | fsDaxFl
	refusedXflags  = fsXflagAppend | fsXflagDax
	ioctlArgFlagsN = 4 // FS_IOC_[GS]ETFLAGS carry an int, whatever the command's encoded size
)

var _ = (fs.NodeIoctler)((*node)(nil))

// Ioctl answers the inode attribute ioctls and refuses every other one
// with ENOTTY, as a filesystem without them does. Flags the view could
// not honour are refused with EOPNOTSUPP when they would be newly set:
// append-only (the daemon writes a file at offsets, and an encrypted
// file's tail extent is rewritten by every append), casefolding (names
// are looked up as the kernel's cache spells them; encrypted names do
// not fold) and DAX.
func (n *node) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (result int32, errno syscall.Errno) {
	switch cmd {
	case fsIocGetflags, fsIocSetflags, fsIocFsgetxattr, fsIocFssetxattr:
	default:
		return 0, syscall.ENOTTY
	}
	fd, ok := handleFd(f)
	if !ok {
		return 0, syscall.ENOTTY
	}
	o := n.r().begin(measure.OpIoctl, n)
	defer func() { o.end(errno) }()
	switch cmd {
	case fsIocGetflags:
		if len(output) < ioctlArgFlagsN {
			return 0, syscall.EINVAL
		}
		v, errno := getFlags(&o.a, fd)
		if errno != 0 {
			return 0, errno
		}
		binary.NativeEndian.PutUint32(output, v)
		return 0, 0
	case fsIocFsgetxattr:
		if len(output) < fsxattrSize {
			return 0, syscall.EINVAL
		}
		var x [fsxattrSize]byte
		if errno := fsxattr(&o.a, fd, fsIocFsgetxattr, &x); errno != 0 {
			return 0, errno
		}
		copy(output, x[:])
		return 0, 0
	}
	// A change: refuse what the view cannot honour, apply it to the
	// lower object (and the twin's in mirror mode), and make the kernel
	// fetch the attributes again: the lower ctime moved, and the kernel
	// does not drop what it caches after a FUSE_IOCTL.
	var set func(a *acct, fd int) syscall.Errno
	switch cmd {
	case fsIocSetflags:
		if len(input) < ioctlArgFlagsN {
			return 0, syscall.EINVAL
		}
		v := binary.NativeEndian.Uint32(input)
		old, errno := getFlags(&o.a, fd)
		if errno != 0 {
			return 0, errno
		}
		if (v&^old)&refusedFlags != 0 {
			return 0, syscall.EOPNOTSUPP
		}
		set = func(a *acct, fd int) syscall.Errno {
			t0 := a.now()
			defer a.lowerSince(t0)
			return toErrno(unix.IoctlSetPointerInt(fd, uint(fsIocSetflags), int(v)))
		}
	case fsIocFssetxattr:
		if len(input) < fsxattrSize {
			return 0, syscall.EINVAL
		}
		var x, old [fsxattrSize]byte
		copy(x[:], input)
		if errno := fsxattr(&o.a, fd, fsIocFsgetxattr, &old); errno != 0 {
			return 0, errno
		}
		if (binary.NativeEndian.Uint32(x[:])&^binary.NativeEndian.Uint32(old[:]))&refusedXflags != 0 {
			return 0, syscall.EOPNOTSUPP
		}
		set = func(a *acct, fd int) syscall.Errno { return fsxattr(a, fd, fsIocFssetxattr, &x) }
	}
	if errno := set(&o.a, fd); errno != 0 {
		return 0, errno
	}
	n.mirrorIoctl(&o, f, set)
	n.EmbeddedInode().NotifyContent(-1, 0)
	return 0, 0
}

// handleFd is the lower descriptor of an open file or directory.
func handleFd(f fs.FileHandle) (int, bool) {
	if pf, ok := f.(*passthroughFile); ok {
		f = pf.file
	}
	switch h := f.(type) {
	case *file:
		return h.fd, true
	case *dirHandle:
		return h.fd, true
	}
	return -1, false
}

// mirrorIoctl applies a change to the twin's object in mirror mode:
// through the twin's descriptor of an open file, or by opening the
// twin's directory.
func (n *node) mirrorIoctl(o *opRun, f fs.FileHandle, set func(a *acct, fd int) syscall.Errno) {
	if pf, ok := f.(*passthroughFile); ok {
		f = pf.file
	}
	switch h := f.(type) {
	case *file:
		h.twin(o, func(s *side, a *acct, fd int) syscall.Errno { return set(a, fd) })
	case *dirHandle:
		o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
			fd, _, errno := s.openNode(a, n, syscall.O_RDONLY|syscall.O_DIRECTORY)
			if errno != 0 {
				return errno
			}
			defer syscall.Close(fd)
			return set(a, fd)
		})
	}
}

func getFlags(a *acct, fd int) (uint32, syscall.Errno) {
	t0 := a.now()
	defer a.lowerSince(t0)
	v, err := unix.IoctlGetUint32(fd, uint(fsIocGetflags))
	return v, toErrno(err)
}

func fsxattr(a *acct, fd int, cmd uint32, x *[fsxattrSize]byte) syscall.Errno {
	t0 := a.now()
	defer a.lowerSince(t0)
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(cmd), uintptr(unsafe.Pointer(x)))
	if e != 0 {
		return e
	}
	return 0
}
