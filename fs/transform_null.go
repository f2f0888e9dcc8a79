package fs

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// nullTransform is the passthrough twin: names, links, xattrs and content
// go to the lower directory unchanged, through the same engine as crypt.
type nullTransform struct{}

var _ transform = nullTransform{}

func (nullTransform) name() string                                 { return "null" }
func (nullTransform) hidden(bool, string) bool                     { return false }
func (nullTransform) plainSize(size int64) int64                   { return size }
func (nullTransform) content() contentIO                           { return nullIO{} }
func (nullTransform) newDir(*acct, dirLoc) ([]byte, syscall.Errno) { return nil, 0 }
func (nullTransform) dirMeta() []string                            { return nil }
func (nullTransform) syncMeta(int) syscall.Errno                   { return 0 }
func (nullTransform) syncPending() syscall.Errno                   { return 0 }
func (nullTransform) xattrOverhead() int                           { return 0 }
func (nullTransform) dropLong(*acct, dirLoc, string)               {}
func (nullTransform) writeLong(*acct, dirLoc, string, string) syscall.Errno {
	return 0
}
func (nullTransform) readDirIV(*acct, dirLoc) ([]byte, syscall.Errno) { return nil, 0 }
func (nullTransform) linkSize(size int64) int64                       { return size }
func (nullTransform) readWriteOpens() bool                            { return false }
func (nullTransform) namesCost() bool                                 { return false }

func (nullTransform) lowerName(_ *acct, _ *node, _ dirLoc, name string) (string, string, syscall.Errno) {
	return name, "", 0
}

func (nullTransform) plainName(_ *acct, _ *node, _ dirLoc, lower string) (string, bool) {
	return lower, true
}

func (nullTransform) encodeLink(_ *acct, _ dirLoc, target string, _ bool, _ func(int) bool) (string, syscall.Errno) {
	return target, 0
}
func (nullTransform) decodeLink(_ *acct, _ dirLoc, lower []byte) ([]byte, syscall.Errno) {
	return lower, 0
}
func (nullTransform) dropLink(*acct, dirLoc, string) {}
func (nullTransform) markerSize(string) int64        { return -1 }

func (nullTransform) encodeXattr(_ *acct, _ string, v []byte) ([]byte, syscall.Errno) {
	return v, 0
}
func (nullTransform) decodeXattr(_ *acct, _ string, v []byte) ([]byte, syscall.Errno) {
	return v, 0
}

// nullIO reads and writes the lower file at the same offsets.
type nullIO struct{}

func (nullIO) open(*acct, *ioState, int, *syscall.Stat_t) syscall.Errno { return 0 }

func (nullIO) read(a *acct, _ *ioState, fd int, dst []byte, off int64) (int, syscall.Errno) {
	t0 := a.now()
	n, err := preadFull(fd, dst, off)
	a.lowerSince(t0)
	return n, toErrno(err)
}

func (n nullIO) writeOwned(a *acct, h *ioState, fd int, src []byte, off int64) (int, syscall.Errno) {
	return n.write(a, h, fd, src, off)
}

func (nullIO) write(a *acct, _ *ioState, fd int, src []byte, off int64) (int, syscall.Errno) {
	t0 := a.now()
	n, err := pwriteFull(fd, src, off)
	a.lowerSince(t0)
	if n > 0 {
		// Part of it was stored (the lower filesystem filled up): a
		// short write, as the lower filesystem's own write(2) returns,
		// not an error for bytes that are in the file. The caller's
		// next write gets the error.
		return n, 0
	}
	return n, toErrno(err)
}

func (nullIO) truncate(a *acct, _ *ioState, fd int, size int64) syscall.Errno {
	t0 := a.now()
	err := syscall.Ftruncate(fd, size)
	a.lowerSince(t0)
	return toErrno(err)
}

func (nullIO) allocate(a *acct, _ *ioState, fd int, off, size int64, mode uint32) syscall.Errno {
	t0 := a.now()
	err := unix.Fallocate(fd, mode, off, size)
	a.lowerSince(t0)
	return toErrno(err)
}

func (nullIO) lseek(a *acct, _ *ioState, fd int, off int64, whence int) (int64, syscall.Errno) {
	t0 := a.now()
	n, err := unix.Seek(fd, off, whence)
	a.lowerSince(t0)
	return n, toErrno(err)
}

func (nullTransform) openDir(*acct, *node, dirLoc) syscall.Errno { return 0 }
