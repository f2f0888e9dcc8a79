//go:build linux && amd64

package trace

import "golang.org/x/sys/unix"

// fsSyscall is a filesystem system call: its name, as strace names it,
// how its target is found, and the indices of its dirfd, path and stat
// buffer arguments (-1: none).
type fsSyscall struct {
	name             string
	class            uint32
	dirfd, path, buf int
}

func fdCall(name string) fsSyscall { return fsSyscall{name, classFd, -1, -1, -1} }

// pathCall is a call with a path at index path (and a dirfd at dirfd).
func pathCall(name string, class uint32, dirfd, path int) fsSyscall {
	return fsSyscall{name, class, dirfd, path, -1}
}

func statCall(name string, class uint32, dirfd, path, buf int) fsSyscall {
	return fsSyscall{name, class, dirfd, path, buf}
}

// fsSyscalls are the system calls timed, by number (x86-64). The list is
// the calls an application makes on files; mmap'ed I/O and io_uring are
// not in it. Two-path calls are attributed by their first path.
var fsSyscalls = map[int]fsSyscall{
	unix.SYS_READ:            fdCall("read"),
	unix.SYS_WRITE:           fdCall("write"),
	unix.SYS_PREAD64:         fdCall("pread64"),
	unix.SYS_PWRITE64:        fdCall("pwrite64"),
	unix.SYS_READV:           fdCall("readv"),
	unix.SYS_WRITEV:          fdCall("writev"),
	unix.SYS_PREADV:          fdCall("preadv"),
	unix.SYS_PWRITEV:         fdCall("pwritev"),
	unix.SYS_PREADV2:         fdCall("preadv2"),
	unix.SYS_PWRITEV2:        fdCall("pwritev2"),
	unix.SYS_LSEEK:           fdCall("lseek"),
	unix.SYS_FSTAT:           fdCall("fstat"),
	unix.SYS_FSYNC:           fdCall("fsync"),
	unix.SYS_FDATASYNC:       fdCall("fdatasync"),
	unix.SYS_SYNCFS:          fdCall("syncfs"),
	unix.SYS_SYNC_FILE_RANGE: fdCall("sync_file_range"),
	unix.SYS_FTRUNCATE:       fdCall("ftruncate"),
	unix.SYS_FALLOCATE:       fdCall("fallocate"),
	unix.SYS_FADVISE64:       fdCall("fadvise64"),
	unix.SYS_GETDENTS:        fdCall("getdents"),
	unix.SYS_GETDENTS64:      fdCall("getdents64"),
	unix.SYS_CLOSE:           fdCall("close"),
	unix.SYS_FCHMOD:          fdCall("fchmod"),
	unix.SYS_FCHOWN:          fdCall("fchown"),
	unix.SYS_FGETXATTR:       fdCall("fgetxattr"),
	unix.SYS_FSETXATTR:       fdCall("fsetxattr"),
	unix.SYS_FLISTXATTR:      fdCall("flistxattr"),
	unix.SYS_FREMOVEXATTR:    fdCall("fremovexattr"),
	unix.SYS_FSTATFS:         fdCall("fstatfs"),
	unix.SYS_FLOCK:           fdCall("flock"),
	unix.SYS_FCNTL:           fdCall("fcntl"),
	unix.SYS_IOCTL:           fdCall("ioctl"),
	unix.SYS_COPY_FILE_RANGE: fdCall("copy_file_range"),

	unix.SYS_OPEN:    pathCall("open", classOpen, -1, 0),
	unix.SYS_OPENAT:  pathCall("openat", classOpen, 0, 1),
	unix.SYS_OPENAT2: pathCall("openat2", classOpen, 0, 1),
	unix.SYS_CREAT:   pathCall("creat", classOpen, -1, 0),

	unix.SYS_STAT:          statCall("stat", classStat, -1, 0, 1),
	unix.SYS_LSTAT:         statCall("lstat", classStat, -1, 0, 1),
	unix.SYS_NEWFSTATAT:    statCall("newfstatat", classStat, 0, 1, 2),
	unix.SYS_STATX:         statCall("statx", classStatx, 0, 1, 4),
	unix.SYS_READLINK:      pathCall("readlink", classPath, -1, 0),
	unix.SYS_READLINKAT:    pathCall("readlinkat", classPath, 0, 1),
	unix.SYS_UNLINK:        pathCall("unlink", classPath, -1, 0),
	unix.SYS_UNLINKAT:      pathCall("unlinkat", classPath, 0, 1),
	unix.SYS_MKDIR:         pathCall("mkdir", classPath, -1, 0),
	unix.SYS_MKDIRAT:       pathCall("mkdirat", classPath, 0, 1),
	unix.SYS_RMDIR:         pathCall("rmdir", classPath, -1, 0),
	unix.SYS_RENAME:        pathCall("rename", classPath, -1, 0),
	unix.SYS_RENAMEAT:      pathCall("renameat", classPath, 0, 1),
	unix.SYS_RENAMEAT2:     pathCall("renameat2", classPath, 0, 1),
	unix.SYS_LINK:          pathCall("link", classPath, -1, 0),
	unix.SYS_LINKAT:        pathCall("linkat", classPath, 0, 1),
	unix.SYS_SYMLINK:       pathCall("symlink", classPath, -1, 1),
	unix.SYS_SYMLINKAT:     pathCall("symlinkat", classPath, 1, 2),
	unix.SYS_MKNOD:         pathCall("mknod", classPath, -1, 0),
	unix.SYS_MKNODAT:       pathCall("mknodat", classPath, 0, 1),
	unix.SYS_CHMOD:         pathCall("chmod", classPath, -1, 0),
	unix.SYS_FCHMODAT:      pathCall("fchmodat", classPath, 0, 1),
	unix.SYS_FCHMODAT2:     pathCall("fchmodat2", classPath, 0, 1),
	unix.SYS_CHOWN:         pathCall("chown", classPath, -1, 0),
	unix.SYS_LCHOWN:        pathCall("lchown", classPath, -1, 0),
	unix.SYS_FCHOWNAT:      pathCall("fchownat", classPath, 0, 1),
	unix.SYS_TRUNCATE:      pathCall("truncate", classPath, -1, 0),
	unix.SYS_UTIME:         pathCall("utime", classPath, -1, 0),
	unix.SYS_UTIMES:        pathCall("utimes", classPath, -1, 0),
	unix.SYS_UTIMENSAT:     pathCall("utimensat", classPath, 0, 1),
	unix.SYS_FUTIMESAT:     pathCall("futimesat", classPath, 0, 1),
	unix.SYS_GETXATTR:      pathCall("getxattr", classPath, -1, 0),
	unix.SYS_LGETXATTR:     pathCall("lgetxattr", classPath, -1, 0),
	unix.SYS_SETXATTR:      pathCall("setxattr", classPath, -1, 0),
	unix.SYS_LSETXATTR:     pathCall("lsetxattr", classPath, -1, 0),
	unix.SYS_LISTXATTR:     pathCall("listxattr", classPath, -1, 0),
	unix.SYS_LLISTXATTR:    pathCall("llistxattr", classPath, -1, 0),
	unix.SYS_REMOVEXATTR:   pathCall("removexattr", classPath, -1, 0),
	unix.SYS_LREMOVEXATTR:  pathCall("lremovexattr", classPath, -1, 0),
	unix.SYS_GETXATTRAT:    pathCall("getxattrat", classPath, 0, 1),
	unix.SYS_SETXATTRAT:    pathCall("setxattrat", classPath, 0, 1),
	unix.SYS_LISTXATTRAT:   pathCall("listxattrat", classPath, 0, 1),
	unix.SYS_REMOVEXATTRAT: pathCall("removexattrat", classPath, 0, 1),
	unix.SYS_STATFS:        pathCall("statfs", classPath, -1, 0),
	unix.SYS_ACCESS:        pathCall("access", classPath, -1, 0),
	unix.SYS_FACCESSAT:     pathCall("faccessat", classPath, 0, 1),
	unix.SYS_FACCESSAT2:    pathCall("faccessat2", classPath, 0, 1),
	unix.SYS_CHDIR:         pathCall("chdir", classPath, -1, 0),
}
