package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
)

// lowerOpenFlags turns the flags of an open on the mounted view into the
// flags for the lower file. O_APPEND is dropped because the kernel already
// passes the end-of-file offset with each write, and the lower file's end
// is not the plaintext's. O_DIRECT is dropped because extent reads are not
// sector-aligned. With encryption a write-only open becomes read-write:
// partial extents are read, modified and written back.
func (r *root) lowerOpenFlags(flags uint32) int {
	f := int(flags) &^ (syscall.O_APPEND | syscall.O_DIRECT | fuse.FMODE_EXEC | syscall.O_CREAT | syscall.O_EXCL)
	if r.rmw && f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f | syscall.O_CLOEXEC | syscall.O_NOFOLLOW
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	p, errno := n.lowerPath()
	if errno != 0 {
		return nil, 0, errno
	}
	fd, err := syscall.Open(p, n.r.lowerOpenFlags(flags), 0)
	if err != nil {
		return nil, 0, toErrno(err)
	}
	return n.newFile(p, fd)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	fd := -1
	ch, p, errno := n.create(ctx, name, out, func(p string) error {
		var err error
		fd, err = syscall.Open(p, n.r.lowerOpenFlags(flags)|syscall.O_CREAT|int(flags&syscall.O_EXCL), mode)
		return err
	})
	if errno != 0 {
		if fd >= 0 {
			syscall.Close(fd)
		}
		return nil, nil, 0, errno
	}
	cn := ch.Operations().(*node)
	fh, fuseFlags, errno := cn.newFile(p, fd)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, fh, fuseFlags, 0
}

// newFile wraps an open lower descriptor and refreshes the inode's content
// state from it.
func (n *node) newFile(path string, fd int) (fs.FileHandle, uint32, syscall.Errno) {
	n.io.mu.Lock()
	n.io.lowerPath = path
	errno := n.r.io.open(&n.io, fd)
	n.io.mu.Unlock()
	if errno != 0 {
		syscall.Close(fd)
		return nil, 0, errno
	}
	f := &file{n: n, fd: fd}
	if n.r.kernelPassthrough {
		return &passthroughFile{f}, 0, 0
	}
	return f, 0, 0
}
