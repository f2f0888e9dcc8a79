package fs

import (
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// nullTransform is the passthrough twin: names, links, xattrs and content
// go to the lower directory unchanged, through the same engine as crypt.
type nullTransform struct{}

var _ transform = nullTransform{}

func (nullTransform) name() string                { return "null" }
func (nullTransform) hidden(bool, string) bool    { return false }
func (nullTransform) plainSize(size int64) int64  { return size }
func (nullTransform) content() contentIO          { return nullIO{} }
func (nullTransform) newDir(string) syscall.Errno { return 0 }
func (nullTransform) dirMeta() []string           { return nil }
func (nullTransform) xattrAllowed(string) bool    { return true }
func (nullTransform) xattrOverhead() int          { return 0 }
func (nullTransform) dropLong(string, string)     {}
func (nullTransform) writeLong(string, string, string) syscall.Errno {
	return 0
}
func (nullTransform) readDirIV(string) ([]byte, syscall.Errno) { return nil, 0 }

func (nullTransform) lowerName(_ *node, _, name string) (string, string, syscall.Errno) {
	return name, "", 0
}

func (nullTransform) plainName(_ *node, _, lower string) (string, bool) { return lower, true }

func (nullTransform) encodeLink(target string) (string, syscall.Errno) { return target, 0 }
func (nullTransform) decodeLink(lower []byte) ([]byte, syscall.Errno)  { return lower, 0 }

func (nullTransform) encodeXattr(_ string, v []byte) ([]byte, syscall.Errno) { return v, 0 }
func (nullTransform) decodeXattr(_ string, v []byte) ([]byte, syscall.Errno) { return v, 0 }

// nullIO reads and writes the lower file at the same offsets.
type nullIO struct{}

func (nullIO) open(*ioState, int) syscall.Errno { return 0 }

func (nullIO) read(_ *ioState, fd int, dst []byte, off int64) (int, syscall.Errno) {
	n, err := preadFull(fd, dst, off)
	return n, fs.ToErrno(err)
}

func (nullIO) write(_ *ioState, fd int, src []byte, off int64) (int, syscall.Errno) {
	n, err := pwriteFull(fd, src, off)
	return n, fs.ToErrno(err)
}

func (nullIO) truncate(_ *ioState, fd int, size int64) syscall.Errno {
	return fs.ToErrno(syscall.Ftruncate(fd, size))
}

func (nullIO) allocate(_ *ioState, fd int, off, size int64, mode uint32) syscall.Errno {
	return fs.ToErrno(unix.Fallocate(fd, mode, off, size))
}

func (nullIO) lseek(_ *ioState, fd int, off int64, whence int) (int64, syscall.Errno) {
	n, err := unix.Seek(fd, off, whence)
	return n, fs.ToErrno(err)
}

// preadFull reads until dst is full or the file ends.
func preadFull(fd int, dst []byte, off int64) (int, error) {
	done := 0
	for done < len(dst) {
		n, err := syscall.Pread(fd, dst[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// pwriteFull writes all of src or fails.
func pwriteFull(fd int, src []byte, off int64) (int, error) {
	done := 0
	for done < len(src) {
		n, err := syscall.Pwrite(fd, src[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}
